// The sandbox's one change to the admin's behaviour (town/wagtail_hooks.py inserts it on every admin page):
// the "You have unsaved edits" reminder polls its form every half second, from a snapshot taken two
// seconds after the page loaded, so whether a screenshot showed it depended on how fast the machine ran
// the steps before. An interval of 0 turns the polling off (Wagtail's own "no interval" value).
document.addEventListener('DOMContentLoaded', () => {
  document.querySelectorAll('[data-controller~="w-unsaved"]').forEach((form) => {
    form.setAttribute('data-w-unsaved-check-interval-value', '0');
  });
});
