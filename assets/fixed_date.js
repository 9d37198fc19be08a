// The page's clock stands still at $NOW_MS (ms since the epoch): Date.now() and new Date() with no
// argument return it, so dates a page computes itself ("today", "2 days ago") are the same on every run
// and every day. Timers and performance.now() keep real time (the harness's settle reads them).
// Playwright's own clock.set_fixed_time kept a short timer pending at all times, which held every settle
// open until its cap.
(() => {
  const NOW = $NOW_MS, RealDate = Date;
  class FixedDate extends RealDate {
    constructor(...args) { super(...(args.length ? args : [NOW])); }
    static now() { return NOW; }
  }
  window.Date = FixedDate;
})();
