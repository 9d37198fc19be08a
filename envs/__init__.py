"""envs -- the environments collect.py runs episodes in: one module per suite, its experts beside it.

  envs/miniwob.py            MiniWoB++ from the `miniwob` package, served on 127.0.0.1; the page's own reward
  envs/django_suite.py       the one mechanism of the Django suites: a server and a database file per
                               worker, a fresh copy of the seed's database per episode, task templates
  envs/backoffice/suite.py   Django's admin over a seeded SQLite file (the app is envs/backoffice/); its
  envs/backoffice/experts.py   tasks are tasks/backoffice.json, judged by envs/webarena.py's evaluators
  envs/helpdesk/suite.py     django-helpdesk from PyPI, unmodified (the project is envs/helpdesk/); its
  envs/helpdesk/experts.py     tasks are tasks/helpdesk.json
  envs/shop/suite.py         django-oscar from PyPI: its storefront and staff dashboard (the project is
  envs/shop/experts.py         envs/shop/); its tasks are tasks/shop.json
  envs/cms/suite.py          Wagtail from PyPI: its admin and the site it serves (the project is envs/cms/:
  envs/cms/experts.py          settings, page models, seed); its tasks are tasks/cms.json
  envs/webarena.py           WebArena-format task files against sites the user serves; WebArena's evaluators
  envs/example.py            a ~50-line site of your own (docs/environments.md: "Add your own site")

The environment interface. One object per run serves every worker (collect.make_env builds it, the
caller closes it). What is the same on every site is the harness's, in collect.py: a browser context
per worker with the suite's viewport and origin allow-list, the observation (screenshot + Set-of-Mark
elements, read from the live page), executing an action with real mouse and keyboard input, the
settle after it. So a suite says only how an episode starts, whether the page ended it, and how the
final state is judged:

    suite, viewport, scale, origins        its name; CSS viewport (w, h) and device scale factor; the
                                           origins navigation may reach (anything else is blocked)
    all_tasks() / has_task(task)           the task names (--tasks all) / whether `task` is one
    url(task) / public_url(url)            the start page / a URL as stored (ports -> a placeholder)
    reset(page, task, seed)                start the seeded episode on `page` -> (instruction, fields);
                                           the observation is then the page, read by collect.observe
    status(page)                           after each action: (done, reward, success), the page's own end
    evaluate(page, task, fields, answer)   an episode ended by stop(answer) or the step limit -> (reward, success)
    judge_s                                seconds evaluate() may take beyond the action timeout (an LLM judge,
                                           a site's REST API)
    expert(task)                           the scripted expert, `moves(page, instruction)`, or None
    attach(ctx) / detach(ctx)              a worker's browser context opens / is dropped (per-context servers)
    har_path()                             a fresh file for a new context's network trace (a HAR file that
                                           Playwright writes when the context closes), or None (default):
                                           only a suite judged on the trace records it (WebArena-Verified)
    busy_js                                a JS expression, true while the page is still building itself in a
                                           way the generic settle cannot see (a rich-text editor's iframe):
                                           the settle waits while it holds; None (default) for none
    close()                                stop what __init__ started

`Environment` below gives every method a default, so a suite writes only what differs.

Experts are async generators of `Move`s (an op on the element a CSS selector finds; the policy turns
it into a mark on the current screenshot), each with its purpose -- `why`, "to open the order's
status form" -- written once per template step: the step records it and annotate.py's drafters
say it. A step of an expert that is itself an expert -- log in,
scroll a target into view -- is yielded whole (`yield login(page)`), and `flatten` walks the nested
generators depth first. Async generators cannot `yield from`, and experts must be async: they read
the live page between moves.
"""
import inspect
from dataclasses import dataclass


class Environment:
    """Defaults for the interface above: one shared server (or none), the page never ends an episode
    itself, an episode the page did not end has failed, no experts."""
    suite = "environment"
    viewport, scale = (1280, 800), 1
    origins = ()
    judge_s = 0.0
    busy_js = None
    tabs = False   # True: several tabs, their actions in the grammar and the open tabs in each step (WebArena)

    def all_tasks(self):
        return []

    def has_task(self, task):
        return task in self.all_tasks()

    def url(self, task):
        raise NotImplementedError

    def public_url(self, url):
        return url

    async def attach(self, ctx):
        """Called before a worker's context gets its allow-list (made from self.origins)."""

    def detach(self, ctx):
        """Idempotent: a context whose close failed or timed out never fires its close event."""

    async def reset(self, page, task, seed):
        raise NotImplementedError

    async def status(self, page):
        return False, 0.0, False

    async def evaluate(self, page, task, fields, answer):
        return 0.0, False

    def expert(self, task):
        return None

    def har_path(self):
        return None

    def close(self):
        pass


@dataclass
class Move:
    """One expert move: an op on the element found by css (+ exact text, + nth match), and why it is made:
    a short phrase that starts with "to" ("to save the ticket's new owner"), recorded as the step's
    `purpose`. A scroll that only brings the next target into view needs none (the drafter names that target)."""
    op: str
    css: str | None = None
    text: str | None = None
    nth: int = 0
    value: str | None = None
    why: str | None = None


class ExpertError(Exception):
    """An expert whose target is missing or unmarked: a bug in the expert or in the observation."""


class NotReady(ExpertError):
    """The expert's target is not on this observation (yet): a slow page. The episode loop looks again
    a few times before it counts as an ExpertError."""


async def flatten(moves):
    """The Moves of an expert whose items may be sub-experts (async generators), depth first."""
    stack = [moves]
    while stack:
        try:
            item = await stack[-1].__anext__()
        except StopAsyncIteration:
            stack.pop()
            continue
        if inspect.isasyncgen(item):
            stack.append(item)
        else:
            yield item


# ----------------------------------------------------------------------------------------------
# Page reading shared by the experts: where a target is, scrolling it into view.

JS_NORM = "const norm = s => (s || '').replace(/\\s+/g, ' ').trim();"

# Where is element (css, text, nth) relative to the visible area? 'ok', 'up', 'down', 'hidden' or 'missing'.
JS_WHERE = JS_NORM + """
  let els = Array.from(document.querySelectorAll(css));
  if (text !== null) els = els.filter(e => norm(e.textContent) === text);
  const el = els[nth];
  if (!el) return 'missing';
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height) return 'hidden';
  let top = 0, bottom = innerHeight;               // viewport, then every clipping ancestor
  for (let a = el.parentElement; a; a = a.parentElement) {
    const ov = getComputedStyle(a).overflowY;
    if (ov !== 'visible') {
      const ar = a.getBoundingClientRect();
      top = Math.max(top, ar.top); bottom = Math.min(bottom, ar.bottom);
    }
  }
  const cy = r.top + r.height / 2;
  if (cy < top + 1) return 'up';
  if (cy > bottom - 1) return 'down';
  return 'ok';
"""


async def where(page, css, text=None, nth=0):
    return await page.evaluate(f"([css, text, nth]) => {{ {JS_WHERE} }}", [css, text, nth])


async def reveal(page, css, text=None, nth=0, limit=12):
    """Yield wheel scrolls (at the viewport centre) until the element's centre is inside the visible area."""
    for _ in range(limit + 20):
        w = await where(page, css, text, nth)
        if w == "hidden":      # no box yet (image still loading): wait for it
            await page.wait_for_timeout(100)
            continue
        if w not in ("up", "down"):
            break
        yield Move("scroll", value=w)


async def reach(page, op, css, text=None, nth=0, value=None, why=None):
    """The move on a target, after the wheel scrolls that bring its centre inside the window."""
    yield reveal(page, css, text, nth, limit=10)
    yield Move(op, css=css, text=text, nth=nth, value=value, why=why)


def navigating(e):
    """Whether `e` (Playwright raises its base Error) is a page's context torn down by a navigation."""
    return "context was destroyed" in str(e) or "navigat" in str(e)


async def through_navigation(page, fn, *args, tries=3):
    """await fn(*args), again once the page has loaded when a navigation tore its context down meanwhile: a
    form's submit whose navigation started only after the settle had ended (collect.LEAVING_MS; seen on two
    cores under a load of 10, a login's redirect in the CMS) lands in the next look at the page."""
    for k in range(tries):
        try:
            return await fn(*args)
        except Exception as e:  # noqa: BLE001 -- Playwright's base Error
            if k == tries - 1 or not navigating(e):
                raise
            await page.wait_for_load_state("load")


def js_fn(args, body):
    """An arrow function with the text normaliser `norm` in scope."""
    return f"({args}) => {{ {JS_NORM} {body} }}"


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
