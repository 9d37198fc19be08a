"""envs/labelstudio/suite.py -- the annotation studio: Label Studio, installed from PyPI and unmodified, a
Django back end behind a React single-page front end (its projects list, data manager and labelling
interface), in a small Django project (envs/labelstudio/: settings, the seed command) over a seeded SQLite
file, run by the shared Django mechanism (envs/django_suite.py). Tasks are templates in
tasks/labelstudio.json; its experts: envs/labelstudio/experts.py. The team signs in at /user/login/.

What differs from the other Django suites:
  - it runs from its own venv, .venv-labelstudio (`make labelstudio`): Label Studio pins its own Django
    stack, as WebArena-Verified's judge pins its own pydantic;
  - its uploads and exports live in a folder beside the database (`<db>.data/`, Label Studio's
    BASE_DATA_DIR), which the shared mechanism builds and copies with the database;
  - runserver runs without --insecure: Label Studio serves its own hashed static files (its URLs map
    /static/ to the package's build), which Django's --insecure handler would answer 404 for first.
Building by hand: envs/labelstudio/studio_site/settings.py (its runbook).
"""
import datetime
import os

from envs import django_suite
from envs.django_suite import DjangoSuite

SANDBOX_NOW = datetime.datetime(2026, 4, 6, 9, 0, tzinfo=datetime.timezone.utc)   # settings.SANDBOX_NOW
VENV = os.path.join(os.path.dirname(django_suite.ENVS_DIR), ".venv-labelstudio")


# mulberry32 with a fixed seed: every page draws the same sequence, on every run
SEEDED_RANDOM = """(() => { let a = 53;
  Math.random = () => { a = (a + 0x6D2B79F5) | 0; let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; }; })();"""

# What a look must not catch half-way: a hover tooltip, drawn by a timer while the pointer rests on a button
# (after a click on the tabs' +, one run's look saw it and the other's not), and layers promoted by
# will-change (the data manager's dialogs): Chromium rasterises their text when it chooses, and two runs'
# pixels differed at the dialog's letters. Both off on every page. And one colour for every avatar: each is
# drawn with Math.random, whose draws before it depend on how often the page rendered (two runs of
# fix-label gave an annotator's avatar two colours).
STEADY_STYLE = """(() => {
  const css = '[class^="tooltip--"], [class*=" tooltip--"] { display: none !important; } ' +
    '*, *::before, *::after { will-change: auto !important; } ' +
    '[data-testid=userpic] { background: rgb(198, 180, 198) !important; }';
  document.addEventListener('DOMContentLoaded', () => {
    const style = document.createElement('style');
    style.textContent = css;
    document.head.appendChild(style);
  });
})();"""

# A data manager action confirmed in its dialog (delete tasks, delete annotations): the dialog closes at once,
# its request leaves a moment later and the table reloads after its answer. A look between the click and the
# reload saw the deleted rows still ticked in one run and "No tasks found" in the other: the page is busy
# (busy_js) from the click until the table's tasks come back (at most 5 s after the action's answer).
ACTION_WATCH = """(() => {
  let state = 'idle', timer = null;
  window.__magActionBusy = () => state !== 'idle';
  addEventListener('click', (e) => {
    if (e.target.closest && e.target.closest('[data-testid=dialog-ok-button]')) state = 'sent';
  }, true);
  const fetch = window.fetch;
  window.fetch = (...args) => fetch(...args).then((r) => {
    const url = String((args[0] && args[0].url) || args[0]);
    if (state === 'sent' && url.includes('/api/dm/actions')) {
      state = 'answered';
      timer = setTimeout(() => { state = 'idle'; }, 5000);
    } else if (state === 'answered' && url.includes('/api/tasks')) {
      clearTimeout(timer);
      state = 'idle';
    }
    return r;
  });
})();"""

CLEAR_BROWSER_STATE = """async () => {
  const workers = navigator.serviceWorker ? await navigator.serviceWorker.getRegistrations() : [];
  for (const r of workers) await r.unregister();
  for (const k of (window.caches ? await caches.keys() : [])) await caches.delete(k);
  for (const d of (indexedDB.databases ? await indexedDB.databases() : [])) indexedDB.deleteDatabase(d.name);
}"""


def load_tasks():
    return django_suite.load_tasks("labelstudio")


class LabelStudio(DjangoSuite):
    suite = "labelstudio"
    ready_path = "/user/login/"
    app = ("label_studio", "label-studio==1.23.2")
    requirements = "requirements-labelstudio.txt"
    python = os.path.join(VENV, "bin", "python")
    server_args = ()
    files = ".data"   # settings: Label Studio's BASE_DATA_DIR is the database's path + this
    # the data manager and the labelling interface show dates the page computes from the browser's clock
    browser_now = SANDBOX_NOW
    # A task opened from the data manager (?task=N in the address) is drawn by the labelling interface a
    # while later: its config, the task and its annotations each come by a request of their own, and the
    # choices appear only then. Every project of the seed labels by choices: until they are drawn, the page
    # is still building. So is the data manager while its rows are greyed out and take no clicks: it asks for
    # another page of tasks when its table is scrolled to the end; and any page while it shows a loader (the
    # data manager's running opossum, an Ant Design spinner): between the requests of one load, no request is
    # in flight, and a look there saw the loader on one run and the table on the other.
    # The projects list draws its cards first and each one's counts ("7 / 18") from a later request. The data
    # manager is still starting until it has put its tab in the address (?tab=N), and until it has drawn its
    # tabs (a new project's data manager was seen blank with its tab in the address).
    busy_js = ("(/[?&]task=/.test(location.search) && !document.querySelector('.lsf-choices')) || "
               "(/^\\/projects\\/\\d+\\/data/.test(location.pathname) && (!/[?&]tab=/.test(location.search) || "
               "!document.querySelector('[class*=lsf-tabs-dm__item]'))) || "
               "!!document.querySelector('.lsf-table__row-wrapper_loading, .lsf-table__row-wrapper_disabled, "
               ".lsf-spinner-ls, .ant-spin-spinning') || "
               "[...document.querySelectorAll('.lsf-project-card__total')].some((e) => !/\\d/.test(e.textContent)) || "
               "!!(window.__magActionBusy && window.__magActionBusy())")

    async def attach(self, ctx):
        """The shared set-up, then Math.random seeded in every page (the front end draws the sign-in page's
        "Did you know?" tip and the colours of people's avatars with it), STEADY_STYLE and ACTION_WATCH."""
        await super().attach(ctx)
        await ctx.add_init_script(SEEDED_RANDOM)
        await ctx.add_init_script(STEADY_STYLE)
        await ctx.add_init_script(ACTION_WATCH)

    async def reset(self, page, task, seed):
        """The shared reset (fresh data, no cookies, no local or session storage), after what else the front
        end keeps in the browser is gone: its service worker, the caches it filled, IndexedDB."""
        if page.url.startswith(tuple(self.origins)):
            await page.evaluate(CLEAR_BROWSER_STATE)
        return await super().reset(page, task, seed)

    @classmethod
    def missing(cls):
        if os.path.exists(cls.python):
            return None
        return f"make labelstudio (a venv of its own, {VENV}, with pip install -r {cls.requirements})"
