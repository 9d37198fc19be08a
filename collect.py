r"""collect.py -- run a policy in live browser environments and record MAG trajectories.

Each episode: reset a seeded task in a real browser, then at every step take an observation
(the screenshot and the Set-of-Mark elements from metrics.OBSERVE_JS), ask the policy for its
reply ("Guide: ... / Action: ..." text, parsed by metrics.py exactly as a model's would be),
execute the action with Playwright, wait for the page to settle, and read the environment's
own reward. Episodes are appended to <out>/episodes.jsonl (one line each, fsynced) and
screenshots to <out>/img/<episode>/<step>.png -- the format every later stage reads.

Runbook
  CPU smoke (seconds):   python collect.py --suite miniwob --tasks click-button --episodes 2 \
                             --out /tmp/mag-smoke
  Expert dataset:        python collect.py --suite miniwob --tasks all --episodes 20 --seed 0 \
                             --policy expert --workers 4 --out data/miniwob
  Continue after Ctrl-C: the same command with --resume (finished episodes are skipped)
  On N machines:         add --shard K/N (K = 1..N) and --out data/part-K, then
                             python metrics.py merge data/part-* --out data/miniwob
                         (docs/scale-out.md)
  A benchmark's split:   python collect.py --benchmark mag-v1.1 --split test --workers 2 --out data/v1.1-test
                         (its tasks, seeds and protocol from tasks/mag-v1.1.json; the guides written with
                         annotate.py; ends by saying whether the folder is the benchmark, byte for byte;
                         with --shard K/N, whether its episodes match the split's: then metrics.py merge)
  Record a person:       python collect.py --suite miniwob --tasks login-user --episodes 3 --policy human \
                             --out data/human
                         (a headed browser opens; click and type, each click or keystroke run is a step;
                         Ctrl+Shift+S opens an answer box: Enter records stop(answer), Escape closes it)
  Browser: $MAG_CHROMIUM, else Playwright's own Chromium, else /usr/bin/chromium.

Suites: envs/, one module each behind the interface of envs/__init__.py (docs/environments.md):
miniwob, backoffice (Django's admin, one server per worker), and the same way three open-source
applications from PyPI: helpdesk (django-helpdesk), shop (django-oscar), cms (Wagtail); webarena (task
files against --sites), example.
Other stages run episodes through two keyword-only entry points, never an argparse Namespace:
make_env(suite, **webarena_kw) and run_episodes(env, jobs, make_policy, out, *, ...);
evaluate.py and train_grpo.py bring their model and API policies through the same `act(obs) -> text`
interface as the policies below. Left out on purpose: a selenium/BrowserGym layer (plain Playwright
is faster and smaller), video recording.
"""
import argparse
import asyncio
import base64
import contextlib
import importlib
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import envs
import metrics
from envs import webarena  # light (stdlib and metrics): it declares its flags; its sites are read on demand

# ----------------------------------------------------------------------------------------------
# Config

SUITES = ("miniwob", "backoffice", "helpdesk", "shop", "cms", "labelstudio", "webarena", "example")
# How an episode runs, in one place: the flags' defaults and run_episodes' (a benchmark's protocol sets
# the same four, under these names)
RUN_DEFAULTS = {"max_steps": 30, "action_timeout": 10.0, "settle_quiet_ms": 50, "settle_cap_ms": 2000}
suite_options = webarena.options   # the suite flags (add_suite_args) as make_env's keywords (evaluate.py)


def add_suite_args(p, default):
    """--suite, --tasks and the webarena suite's flags: what to run (evaluate.py declares them through
    this too)."""
    p.add_argument("--suite", default=default, choices=SUITES, help="environment suite (envs/)")
    p.add_argument("--tasks", default="all",
                   help="comma-separated task names or 'all' (MiniWoB++: all with an expert)")
    webarena.add_args(p)   # --task-file, --sites, --auth-dir, --check, the judge's flags


def add_run_args(p):
    """How episodes run: the flags run_episodes takes (evaluate.py declares them through this too)."""
    p.add_argument("--workers", type=int, default=1, help="parallel browser contexts")
    p.add_argument("--max-steps", type=int, default=RUN_DEFAULTS["max_steps"], help="step limit per episode")
    p.add_argument("--action-timeout", type=float, default=RUN_DEFAULTS["action_timeout"],
                   help="seconds before an action counts as hung")
    p.add_argument("--settle-quiet-ms", type=float, default=RUN_DEFAULTS["settle_quiet_ms"],
                   help="DOM quiet period that ends the settle")
    p.add_argument("--settle-cap-ms", type=float, default=RUN_DEFAULTS["settle_cap_ms"],
                   help="longest settle after one action")
    p.add_argument("--headed", action="store_true",
                   help="show the browser (collect.py: always for --policy human)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    p.add_argument(
        "--shard", type=metrics.shard_spec, default=None, metavar="K/N",
        help="run only part K of N of the (task, seed) list, e.g. one machine's; join: metrics.py merge")


def run_options(args):
    """The four run flags as run_episodes' keywords."""
    return {key: getattr(args, key) for key in RUN_DEFAULTS}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # what to collect
    add_suite_args(p, "miniwob")
    p.add_argument("--episodes", type=int, default=5, help="episodes per task (seeds seed..seed+episodes-1)")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--policy", default="expert", choices=["expert", "random", "human"], help="who acts")
    p.add_argument("--out", default="data/miniwob", help="dataset folder")
    p.add_argument("--resume", action="store_true",
                   help="skip episodes already in --out; set a torn last line aside")
    p.add_argument("--benchmark", default=None, metavar="NAME",
                   help="build one split of a benchmark (tasks/NAME.json, or a path): its "
                        "(suite, task, seed) list with the experts and its protocol, in place of "
                        "--suite ... --settle-cap-ms")
    p.add_argument("--split", default="test", choices=metrics.BENCHMARK_SPLITS, help="with --benchmark")
    p.add_argument("--freeze", action="store_true",
                   help="with --benchmark, maintainers: record this build's fingerprint in the definition")
    p.add_argument("--reruns", type=int, default=4,
                   help="with --benchmark: run an episode that departs from the frozen split again (N times)")
    p.add_argument("--other-browser", action="store_true",
                   help="with --benchmark: build on a Chromium (or observation snippets) other than the "
                        "definition's; the verdict is marked not comparable")
    # how
    add_run_args(p)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# The browser: one for all workers, each worker in a context of its own (a new one only after a fault).

def playwright_chromium():
    """Where Playwright's own Chromium would be (it may not be installed)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        return pw.chromium.executable_path


def find_chromium(own=None):
    """The browser to launch: $MAG_CHROMIUM, else None (= Playwright's own, when `own` exists),
    else a system Chromium. `own` is Playwright's expected path (playwright_chromium())."""
    if os.environ.get("MAG_CHROMIUM"):
        path = os.environ["MAG_CHROMIUM"]
        if not os.path.exists(path):
            raise SystemExit(f"MAG_CHROMIUM={path}: no such file")
        return path
    if own and os.path.exists(own):
        return None
    for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if os.path.exists(path):
            return path
    raise SystemExit("no Chromium found: set MAG_CHROMIUM, run `playwright install chromium`, "
                     "or `apt-get install -y chromium`")


# One seed, one screenshot: grayscale text at whole pixels (subpixel glyphs depended on the renderer's
# history) and whole tiles re-rastered by one thread (partial re-rasters shaded box-shadow edges by frame
# timing, run to run).
CHROMIUM_ARGS = ["--disable-lcd-text", "--disable-font-subpixel-positioning", "--disable-partial-raster",
                 "--num-raster-threads=1"]


class Browser:
    """The shared browser, relaunched (once, under a lock) when it has died, and the contexts workers gave
    back: a caller that runs episodes again and again on one Browser (train_grpo's live groups) reuses them
    (a new context and its first page load cost ~400 ms of CPU, a reset in a loaded page ~50)."""

    def __init__(self, pw, headless):
        self.pw, self.headless = pw, headless
        self.browser = None   # launched on first use, again after a crash (get)
        self.lock = asyncio.Lock()
        self.idle = []   # (context, page) given back by the workers

    async def page(self, env, url):
        """(context, page) for a worker in `env`: a given-back one (one showing `url` first), else a new
        one."""
        browser = await self.get()   # relaunched if it died: the contexts given back died with it
        self.idle = [(c, p) for c, p in self.idle if c.browser is browser and not p.is_closed()]
        mine = [i for i, (_, p) in enumerate(self.idle) if p.mag_env is env]
        pick = next((i for i in mine if self.idle[i][1].url == url), mine[0] if mine else None)
        return self.idle.pop(pick) if pick is not None else await new_page(browser, env, [])

    async def get(self):
        async with self.lock:
            if self.browser is None or not self.browser.is_connected():
                path = find_chromium(self.pw.chromium.executable_path)
                self.browser = await self.pw.chromium.launch(headless=self.headless, executable_path=path,
                                                             args=CHROMIUM_ARGS)
            return self.browser

    async def close(self):
        if self.browser is not None and self.browser.is_connected():
            await self.browser.close()


# ----------------------------------------------------------------------------------------------
# The environments (envs/): imported on demand (envs.webarena, light, always): a stage imports only its
# suite's.

# The Django suites (envs/django_suite.py): where each one's class is.
DJANGO_SUITES = {"backoffice": "envs.backoffice.suite.Backoffice", "helpdesk": "envs.helpdesk.suite.Helpdesk",
                 "shop": "envs.shop.suite.Shop", "cms": "envs.cms.suite.Cms",
                 "labelstudio": "envs.labelstudio.suite.LabelStudio"}


def make_env(suite, **webarena_kw):
    """The suite's environment (WebArena's from webarena_kw: envs.webarena.options); the caller closes it."""
    if suite == "miniwob":
        from envs.miniwob import MiniWoB
        return MiniWoB()
    if suite in DJANGO_SUITES:
        module, name = DJANGO_SUITES[suite].rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        missing = cls.missing()   # the pip command, or for a suite with its own venv the make target
        if missing:
            raise SystemExit(f"the {suite} suite needs its application, which is not installed: {missing}")
        return cls()
    if suite == "webarena":
        return webarena.WebArena(**webarena_kw)
    if suite == "example":   # envs/example.py: "Add your own site" in docs/environments.md
        from envs.example import Example
        return Example()
    raise ValueError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")


# ----------------------------------------------------------------------------------------------
# Observation, action execution and settle.

async def new_page(browser, env, blocked):
    """A fresh context+page: pinned viewport, scale, locale and timezone; other origins blocked."""
    har = env.har_path()   # a suite judged on the network trace records one: a HAR file, written at close
    ctx = await browser.new_context(viewport={"width": env.viewport[0], "height": env.viewport[1]},
                                    device_scale_factor=env.scale, locale="en-US", timezone_id="UTC",
                                    record_har_path=har)
    await ctx.add_init_script(metrics.INIT_JS)
    await env.attach(ctx)   # a suite with a server per context adds that server to env.origins first
    if env.busy_js:   # the suite's own "still building" check joins the settle's (metrics.INIT_JS)
        await ctx.add_init_script(f"window.__mag.busy.push(() => Boolean({env.busy_js}));")
    allowed = tuple(env.origins) + ("data:", "about:", "blob:")

    async def guard(route):
        blocked.append(route.request.url)
        if route.request.is_navigation_request():
            # a 204 answer keeps the current page (an abort would show an error page)
            await route.fulfill(status=204)
        else:
            await route.abort("blockedbyclient")
    try:
        # only requests to other origins reach Python; same-origin ones are never intercepted
        pattern = re.compile("^(?!" + "|".join(re.escape(o) for o in allowed) + ")")
        await ctx.route(pattern, guard)
        # animations and transitions end at once and the caret is hidden, so a screenshot depends only on
        # the page's state, never on when it was taken
        await ctx.add_init_script(metrics.read_asset("no_animation.js"))
        page = await ctx.new_page()
        page.mag_env = env
        page.mag_blocked = blocked
        page.mag_har = har
        await track(page)
    except BaseException:  # the env gets back what attach gave this context
        env.detach(ctx)
        raise
    return ctx, page


PAGE_RECORDS = ("mag_env", "mag_blocked", "mag_har", "mag_episode_dir", "mag_home")


async def track(page, like=None):
    """What observe() and settle() read on a page: its CDP session and the requests in flight (images, XHR
    also hold the settle: a widget drawn with a CSS image has no size until its image arrives). A tab opened
    during an episode takes the records of the page it was opened from (`like`)."""
    page.mag_cdp = await page.context.new_cdp_session(page)
    inflight = page.mag_inflight = set()
    page.on("request", lambda r: inflight.add(r))
    page.on("requestfinished", lambda r: inflight.discard(r))
    page.on("requestfailed", lambda r: inflight.discard(r))
    for name in PAGE_RECORDS if like is not None else ():
        setattr(page, name, getattr(like, name, None))


async def switch_tab(page, op, value):
    """new_tab() (on the task's start page: the grammar has no goto), tab_focus(K), close_tab() (the last tab
    left gets the focus) -> the page that has the focus after it: a suite with several tabs (env.tabs)."""
    tabs = page.context.pages
    if op == "new_tab":
        tab = await page.context.new_page()
        await track(tab, page)
        await tab.goto(getattr(page, "mag_home", None) or "about:blank", wait_until="load")
        return tab
    if op == "close_tab":
        if len(tabs) == 1:
            raise ActionError("close_tab: the only open tab stays open")
        tab = [t for t in tabs if t is not page][-1]
        await page.close()
    else:
        if int(value) >= len(tabs):
            raise ActionError(f"tab_focus({value}): {len(tabs)} tab(s) open, numbered from 0")
        tab = tabs[int(value)]
    if not hasattr(tab, "mag_cdp"):   # opened by the task's start or by the site (a target=_blank link)
        await track(tab, page)
    await tab.bring_to_front()
    return tab


async def tab_list(page, env):
    """A step's "tabs" (title and URL of each open tab, in opening order), "tab" (the focused one's index)."""
    tabs = []
    for t in page.context.pages:
        title = ""
        with contextlib.suppress(Exception):   # a tab in mid-navigation has no title yet
            title = await t.title()
        tabs.append({"title": title, "url": env.public_url(t.url)})
    return {"tabs": tabs, "tab": page.context.pages.index(page)}


OBSERVE_TRIES = 5  # frames to wait at most for the marks to stop moving (see metrics.OBSERVE_JS)


async def observe(page, env):
    """(elements, png bytes, url): the stable marks and the screenshot of the same page state.

    The PNG of the viewport at device scale comes straight from CDP: the same bytes as page.screenshot(),
    without the DOM changes Playwright makes around a capture (those would hold the next settle open).
    The clip is in document coordinates, hence the page's scroll offset."""
    obs = await page.evaluate(metrics.OBSERVE_JS, [env.scale, OBSERVE_TRIES])
    (x, y), (w, h) = obs["scroll"], env.viewport
    shot = await page.mag_cdp.send("Page.captureScreenshot", {
        "format": "png", "clip": {"x": x, "y": y, "width": w, "height": h, "scale": env.scale}})
    return obs["elements"], base64.b64decode(shot["data"]), obs["url"]


async def observe_agreed(page, env, cap_ms, quiet_ms=RUN_DEFAULTS["settle_quiet_ms"]):
    """(elements, png, url, agreed): observed again until two consecutive observations agree -- screenshot
    bytes and element list, so the marks match the picture -- or cap_ms have passed (agreed False: the step
    is recorded all the same and flagged in its episode's meta.unsettled). A document the settle did not end
    on (a submit's navigation begun after it: its page still blank, twice alike) is settled once first."""
    t0, resettled = time.perf_counter(), False
    last = await envs.through_navigation(page, observe, page, env)   # a submit's late navigation: its page
    while True:
        now = await envs.through_navigation(page, observe, page, env)
        if now == last:
            settled = getattr(page, "mag_settled", None)
            if resettled or settled is None or settled == await envs.through_navigation(
                    page, page.evaluate, "performance.timeOrigin"):
                return (*now, True)
            await settle(page, quiet_ms, cap_ms)
            t0, resettled = time.perf_counter(), True
        elif (time.perf_counter() - t0) * 1000 >= cap_ms:
            return (*now, False)
        last = now


LEAVING_MS = 500  # how long a submit or a followed link may take to start its navigation


async def settle(page, quiet_ms, cap_ms):
    """Wait until the DOM has been quiet for quiet_ms, no short timer is pending, no request is in
    flight, no image is loading (loaded ones decoded) and the page is not being left (a submit or a followed
    link whose navigation has not started yet: metrics.INIT_JS), capped at cap_ms. The page waits for its own
    part in one call (window.__mag.settle); requests in flight are Playwright's to see, so checked here.

    Returns the seconds waited. A navigation in flight makes evaluate fail; then wait for load.
    """
    t0, first = time.perf_counter(), True
    while True:
        left = cap_ms - (time.perf_counter() - t0) * 1000
        try:  # the first check waits a frame: the action's effects and the requests they start come first
            page.mag_settled = await page.evaluate(   # the document it ended on: see observe_agreed()
                "(a) => window.__mag && window.__mag.settle(...a).then(() => performance.timeOrigin)",
                [quiet_ms, left, LEAVING_MS - (cap_ms - left), first])
            first = False
        except Exception as e:  # noqa: BLE001 -- playwright raises its base Error for a torn-down context
            if not envs.navigating(e):
                raise
            await page.wait_for_load_state("load")
            continue
        waited = (time.perf_counter() - t0) * 1000
        if not getattr(page, "mag_inflight", None) or waited >= cap_ms:
            return waited / 1000
        first = True   # answered is not yet handled: once none is in flight, a frame for handlers, then quiet
        await asyncio.sleep(0.015)


def css_point(point, env):
    """Screenshot pixels -> CSS px, clamped into the viewport."""
    w, h = env.viewport
    return min(max(0, point[0] / env.scale), w - 1), min(max(0, point[1] / env.scale), h - 1)


SCROLL_FRACTION = 0.6  # one scroll moves 60% of the viewport: overlap keeps context on screen
SCROLL_WAIT_POLLS = 20  # up to ~200 ms for a wheel to turn into a scroll


async def execute(page, action, env):
    """Perform one action with real mouse/keyboard input -> the page that has the focus after it (a tab action
    changes it). Element ops need action['point']."""
    op, value = action["op"], action.get("value") or ""
    if op in metrics.TAB_OPS:
        return await switch_tab(page, op, value)
    if op in metrics.ELEMENT_OPS:
        x, y = css_point(action["point"], env)
        if op == "hover":
            await page.mouse.move(x, y)
        elif op == "click":
            await page.mouse.click(x, y)
        elif op == "type":
            await page.mouse.click(x, y)
            await page.keyboard.press("ControlOrMeta+A")   # replace, do not append to, existing text
            await page.keyboard.type(value)                 # key events: autocomplete widgets listen to them
        elif op == "select":
            # a listbox (<select multiple>) reports the option under the point: its select is meant
            handle = await page.evaluate_handle("([x, y]) => { const e = document.elementFromPoint(x, y);"
                                                " return e && e.closest('select') || e; }", [x, y])
            el = handle.as_element()
            tag = await el.evaluate("e => e.tagName") if el else None
            if tag != "SELECT":
                raise ActionError(f"select: the element at ({x:.0f}, {y:.0f}) is a {tag}, not a <select>")
            # a label the select lacks is the policy's mistake: Playwright would wait for it until the timeout
            labels = await el.evaluate("e => [...e.options].map((o) => o.label)")
            if value not in labels:
                listed = ", ".join(map(repr, labels))[:200]
                raise ActionError(f"select: no option {value!r} (the options: {listed})")
            await el.select_option(label=value)
    elif op == "press":
        await page.keyboard.press(value)
    elif op == "scroll":
        w, h = env.viewport
        dx, dy = {"down": (0, 1), "up": (0, -1), "right": (1, 0), "left": (-1, 0)}[value]
        await page.mouse.move(w / 2, h / 2)
        before = await page.evaluate("window.__mag ? window.__mag.scrolls : 0")
        await page.mouse.wheel(dx * w * SCROLL_FRACTION, dy * h * SCROLL_FRACTION)
        # the wheel returns before the page has scrolled: wait for the scroll event (none comes when
        # nothing under the pointer can scroll), or the next observation would show the old position
        for _ in range(SCROLL_WAIT_POLLS):
            if await page.evaluate("window.__mag ? window.__mag.scrolls : 0") != before:
                break
            await asyncio.sleep(0.01)
    return page


class ActionError(Exception):
    """An action the page cannot take (a select on a non-select): the step records it, the episode goes on."""


def ground(action, elements):
    """Fill both groundings: a mark gets its box centre as the point; a point gets the innermost mark
    under it."""
    if action is None or action["op"] not in metrics.ELEMENT_OPS:
        return action
    if action.get("mark") is not None:
        el = next((e for e in elements if e["mark"] == action["mark"]), None)
        action["point"] = metrics.box_center(el["bbox"]) if el else None
    elif action.get("point") is not None:
        hits = [e for e in elements if metrics.in_box(action["point"], e["bbox"])]
        hits.sort(key=lambda e: (e["bbox"][2] - e["bbox"][0]) * (e["bbox"][3] - e["bbox"][1]))
        action["mark"] = hits[0]["mark"] if hits else None
        action["point"] = [round(v, 1) for v in action["point"]]
    return action


# ----------------------------------------------------------------------------------------------
# Policies: `await policy.act(obs) -> reply text`, parsed by metrics.parse_output with the policy's
# `order` and `grounding`, exactly as a model's reply is; `executed` says whether the policy's own
# input already did the action (a person typing), so the loop must not do it again.
# obs = {"episode": the episode so far (the current step has no action yet), "step": k,
#        "png": screenshot bytes, "page": the live page (experts and humans read it; models must not)}.

class ExpertPolicy:
    """The suite's scripted expert (envs/): its Moves, sub-experts flattened (envs.flatten), each
    resolved to the mark of its element on the current screenshot."""
    order, grounding = "action_only", "som"
    executed = False  # the harness performs every action

    def __init__(self, task, expert):
        self.task, self.expert = task, expert
        self.moves = self.pending = self.purpose = None   # the moves left, one not yet found, why the last

    async def act(self, obs):
        page, ep = obs["page"], obs["episode"]
        if self.moves is None:
            self.moves = envs.flatten(self.expert(page, ep["instruction"]))
        # a move whose target was not there is tried again
        do = self.pending or await anext(self.moves, None)
        if do is None:  # the expert has no move left
            self.purpose = None
            return "Action: stop()"
        mark, self.pending = None, do
        if do.css is not None:
            mark = await page.evaluate(metrics.read_asset("find_mark.js"), [do.css, do.text, do.nth])
            if mark is None or mark < 0:
                what = "no element" if mark == -1 else "an element without a mark"
                raise envs.NotReady(f"{self.task}: {what} for {do.css!r} text={do.text!r} nth={do.nth}")
        self.pending = None
        self.purpose = do.why   # the step records it (run_episode): the drafters say why the step is taken
        action = metrics.make_action(do.op, mark=mark, value=do.value)
        return metrics.format_output(None, action, "som", self.order, ep["viewport"])


class RandomPolicy:
    """Uniform over marks; mostly clicks, sometimes typing a word, scrolling or pressing Enter. The draws are
    seeded by (suite, task, seed): each task of a suite gets its own sequence, so the floor is per task."""
    order, grounding = "action_only", "som"
    executed = False

    def __init__(self, suite, task, seed):
        self.rng = random.Random(f"{suite}/{task}/{seed}")

    async def act(self, obs):
        step = obs["episode"]["steps"][obs["step"]]
        action = metrics.random_action(self.rng, [e["mark"] for e in step["elements"]])
        return metrics.format_output(None, action, "som", self.order, obs["episode"]["viewport"])


# The human recorder (assets/human.js): a person acts in a headed browser. Capture-phase listeners hold back
# each click (and Enter/Tab/Escape) and queue it with its position, so the step's screenshot is taken *before*
# it happens; the harness then replays it like any other action. Text keys and <select> choices go through at
# once (a person must see what they type): keystrokes into one field become one type() step, closed by the
# next click or key, and are marked as already done. Ctrl+Shift+S opens a small answer box over the page
# (after the step's screenshot); Enter in it is the step stop("answer").
HUMAN_KEYS = ("Enter", "Tab", "Escape")  # held back and replayed as press(); other non-text keys are ignored


class HumanPolicy:
    """Replies in pixel grounding: a click is recorded where the person clicked (the loop finds the
    mark under it); typing and selects name the focused element's box centre."""
    order, grounding = "action_only", "coord"
    executed = False  # set per step: True when the person's own input already did it

    def __init__(self, poll_s=0.05):
        self.events, self.poll_s = [], poll_s
        self.typing = None   # [mark, text] of a keystroke run not yet recorded

    async def act(self, obs):
        page, ep = obs["page"], obs["episode"]
        elements = ep["steps"][obs["step"]]["elements"]
        await page.evaluate(metrics.read_asset("human.js"))
        scale = ep["meta"]["device_scale_factor"]
        while (action := self._next_action(elements, scale)) is None:  # until the person has done something
            await asyncio.sleep(self.poll_s)
            self.events += await page.evaluate("window.__magHuman.events.splice(0)")
        self.executed = action["op"] in ("type", "select")
        if action["op"] in ("click", "press"):  # let the replay of this click or key through (a person
            # clicking in the same few milliseconds could take its place: harmless for a recorder, noted here)
            allow = "allowClicks" if action["op"] == "click" else "allowKeys"
            await page.evaluate("(k) => { window.__magHuman[k] += 1; }", allow)
        return metrics.format_output(None, action, "coord", self.order, ep["viewport"])

    def _next_action(self, elements, scale):
        """Turn queued events into at most one action; typed text is flushed before what follows it."""
        while self.events:
            ev = self.events[0]
            typed = ev["kind"] == "key" and (len(ev["key"]) == 1 or ev["key"] == "Backspace")
            if self.typing is not None and (not typed or self.typing[0] != ev["mark"]):
                flushed = self._flush(elements)  # the event stays queued for the next step
                if flushed:
                    return flushed
                continue
            self.events.pop(0)
            if typed:
                self.typing = self.typing or [ev["mark"], ""]
                text = self.typing[1]
                self.typing[1] = text[:-1] if ev["key"] == "Backspace" else text + ev["key"]
            elif ev["kind"] == "click":
                return metrics.make_action("click", point=[ev["x"] * scale, ev["y"] * scale])
            elif ev["kind"] == "select":
                return self._on_mark("select", ev["mark"], elements, ev["value"])
            elif ev["kind"] == "stop":   # the answer box (Ctrl+Shift+S): the episode ends with its text
                return metrics.make_action("stop", value=ev["value"])
            elif ev["key"] in HUMAN_KEYS:
                return metrics.make_action("press", value=ev["key"])
        return None

    def _flush(self, elements):
        (mark, text), self.typing = self.typing, None
        return self._on_mark("type", mark, elements, text) if text else None

    @staticmethod
    def _on_mark(op, mark, elements, value):
        el = next((e for e in elements if e["mark"] == mark), None)
        return metrics.make_action(op, point=metrics.box_center(el["bbox"]) if el else [0, 0], value=value)


def make_policy(name, env, task, seed):
    """collect.py's own policies by --policy name, one per episode."""
    if name == "expert":
        return ExpertPolicy(task, env.expert(task))
    if name == "random":
        return RandomPolicy(env.suite, task, seed)
    return HumanPolicy()


# ----------------------------------------------------------------------------------------------
# The episode loop.

def new_episode(env, task, seed, policy_name, instruction):
    vw, vh = env.viewport
    return {"id": metrics.episode_id(env.suite, task, seed), "suite": env.suite, "task": task, "seed": seed,
            "instruction": instruction, "start_url": env.public_url(env.url(task)),
            # the screenshot's size: every coordinate is in its pixels
            "viewport": [vw * env.scale, vh * env.scale],
            "success": False, "reward": 0.0, "steps": [], "error": None,
            "meta": {"policy": policy_name, "css_viewport": [vw, vh], "device_scale_factor": env.scale,
                     "blocked": [], "collected_by": "collect.py"}}


async def judge(env, page, task, fields, steps, timeout):
    """(reward, success) of an episode the page did not end: the suite's evaluators, the episode's answer."""
    answer = webarena.final_answer(steps)
    return await asyncio.wait_for(env.evaluate(page, task, fields, answer), timeout + env.judge_s)


NOT_READY_LOOKS = 3   # an expert's target not on screen yet (a slow page): look again, later each time


async def take_step(page, env, ep, k, policy, img_dir, action_timeout, settle_ms):
    """Step k: observe the page (its screenshot written, the step recorded in `ep`) and ask the policy
    for its reply -> (step, elements, reply)."""
    for look in range(NOT_READY_LOOKS):
        looking = observe_agreed(page, env, settle_ms[1], settle_ms[0])   # a late document: a settle, a look
        elements, png, url, agreed = await asyncio.wait_for(looking, action_timeout + settle_ms[1] / 1000 * 3)
        if img_dir:  # None: an episode kept in memory (train_grpo's live rollouts)
            with open(os.path.join(img_dir, f"{k}.png"), "wb") as f:
                f.write(png)
        step = {"step": k, "url": env.public_url(url), "screenshot": img_dir and f"img/{ep['id']}/{k}.png",
                "elements": elements, "action": None, "guide": None, "guide_status": None, "guide_alt": None}
        if env.tabs:   # which tabs are open, which one the screenshot shows
            step.update(await tab_list(page, env))
        ep["steps"][k:] = [step]
        try:
            reply = await policy.act({"episode": ep, "step": k, "png": png, "page": page})
            if getattr(policy, "purpose", None):   # an expert says why it takes the step
                step["purpose"] = policy.purpose
            if not agreed:   # meta: a flag of this run, not of the data (the fingerprint leaves meta out)
                ep["meta"].setdefault("unsettled", []).append(k)
            return step, elements, reply
        except envs.NotReady:
            if look == NOT_READY_LOOKS - 1:
                raise
            await page.wait_for_timeout(500 * (look + 1))
            await settle(page, *settle_ms)


async def run_episode(page, env, task, seed, policy, *, out, blocked, policy_name, max_steps, action_timeout,
                      settle_quiet_ms, settle_cap_ms, partial=None):
    """Play one episode; returns the episode dict (screenshots written under `out` as it goes). `partial`
    (a dict) receives the episode as soon as it exists: a fault mid-episode leaves its steps for the error.
    The run's keywords come from run_episodes (their defaults: RUN_DEFAULTS)."""
    img_dir = out and os.path.join(out, "img", metrics.episode_id(env.suite, task, seed))
    if img_dir:
        shutil.rmtree(img_dir, ignore_errors=True)  # a retried episode starts clean
        os.makedirs(img_dir, exist_ok=True)
    page.mag_episode_dir = img_dir   # a suite keeps its own files of the episode here (a HAR file)
    t0 = time.perf_counter()
    # the pointer leaves the page first: where the last episode left it would :hover an element of
    # this one, and the same seed would not give the same screenshot after a different history
    await page.mouse.move(-1, -1)
    if hasattr(env, "prepare"):   # the seed's data built, the server up: no time limit (seconds, once)
        await env.prepare(page, seed)
    instruction, fields = await asyncio.wait_for(env.reset(page, task, seed), action_timeout * 3)
    ep = new_episode(env, task, seed, policy_name, instruction)
    if fields:
        ep["meta"]["fields"] = fields
    if partial is not None:
        partial["ep"] = ep
    await settle(page, settle_quiet_ms, settle_cap_ms)  # images and deferred widgets of the new problem
    done = False
    for k in range(max_steps):
        step, elements, reply = await take_step(page, env, ep, k, policy, img_dir, action_timeout,
                                                (settle_quiet_ms, settle_cap_ms))
        guide, action = metrics.parse_output(reply, policy.grounding, policy.order, ep["viewport"], env.tabs)
        if action is None:  # an unparseable reply is a wasted step, never a crash; the reply is kept
            step["action"] = metrics.make_action("stop", value=None)
            step["exec_error"], step["reply"] = metrics.UNPARSEABLE, reply
            continue
        step["action"] = ground(action, elements)
        if guide:
            step["guide"], step["guide_status"] = guide, "draft"
        if action["op"] == "stop":
            break
        if not policy.executed:
            if action["op"] in metrics.ELEMENT_OPS and action["point"] is None:
                step["exec_error"] = f"mark {action['mark']} is not on this screen"
                continue
            try:
                page = await asyncio.wait_for(execute(page, action, env), action_timeout)
            except ActionError as e:
                step["exec_error"] = str(e)
        await settle(page, settle_quiet_ms, settle_cap_ms)
        done, reward, success = await env.status(page)
        if done:
            ep["reward"], ep["success"] = reward, success
            break
    if not done:
        fields = ep["meta"].get("fields")
        ep["reward"], ep["success"] = await judge(env, page, task, fields, ep["steps"], action_timeout)
    ep["meta"]["seconds"] = round(time.perf_counter() - t0, 3)
    # requests to other origins (navigations answered 204, the rest aborted)
    ep["meta"]["blocked"] = list(blocked)
    return ep


def is_fault(e):
    """A page/browser fault worth a retry (crash, hang, closed target) as opposed to a bug."""
    from playwright.async_api import Error as PlaywrightError
    return isinstance(e, (PlaywrightError, asyncio.TimeoutError, ConnectionError))


async def worker(jobs, env, browser, make_policy, out, bar, episodes, episode_kw, raise_errors):
    """Run jobs left ({task: [seeds, last first]}) in one browser context, appending each episode to `out`
    and `episodes`: its own task while it has seeds left (MiniWoB++ starts them in the loaded page), then
    the next."""
    ctx = page = task = None
    while any(jobs.values()):
        task = task if jobs.get(task) else next(t for t, seeds in jobs.items() if seeds)
        seed = jobs[task].pop()
        ep = error = None
        partial = {}   # run_episode puts the episode here as soon as it exists
        outage, failed = False, []   # failed: the tries a fault ended, kept in the episode's meta
        for attempt in range(2):  # a fault gets one retry in a fresh context (and browser, if it died)
            try:
                if page is None or page.is_closed():
                    if ctx is not None:   # its first tab closed (close_tab(), a Verified evaluation): it too
                        with contextlib.suppress(Exception):
                            await ctx.close()
                    ctx, page = await browser.page(env, env.url(task))
                page.mag_blocked.clear()
                ep = await run_episode(page, env, task, seed, make_policy(task, seed), out=out,
                                       blocked=page.mag_blocked, partial=partial, **episode_kw)
                error = None
                break
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as e:  # noqa: BLE001 -- every failure is recorded, never dropped
                if raise_errors and not is_fault(e):
                    raise
                error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
                outage = isinstance(e, metrics.ApiError) and e.outage
                if not is_fault(e):
                    break
                failed.append({"try": attempt + 1, "error": error})
                # bounded: a context whose renderer hangs must not hang the whole collection
                if ctx is not None:
                    with contextlib.suppress(Exception):  # the context may already be gone with its browser
                        await asyncio.wait_for(ctx.close(), episode_kw["action_timeout"])
                    env.detach(ctx)
                ctx = page = None
        if error is not None:  # recorded with what it got so far, never dropped
            policy_name = episode_kw.get("policy_name", "expert")
            ep = partial.get("ep") or new_episode(env, task, seed, policy_name, "")
            if ep["steps"] and ep["steps"][-1]["action"] is None:
                ep["steps"].pop()  # an observation the fault left without an action
            ep["error"] = error
        if failed:
            ep["meta"]["retries"] = failed
        # an endpoint that failed after its retries is the run's error, not the policy's: set aside, redone
        if out:
            metrics.append_episode(out, ep, metrics.API_FAILED if outage else "episodes.jsonl")
        episodes.append(ep)
        bar.update(1)
    if ctx is not None:
        browser.idle.append((ctx, page))   # closed with the browser, or taken by the caller's next run


async def run_episodes(env, jobs, make_policy, out, *, workers=1, policy_name="expert", browser=None,
                       headless=True, progress=True, raise_errors=False, **run):
    """Run every (task, seed) of `jobs` in `env` with `workers` browser contexts; append each episode to
    <out>/episodes.jsonl (None: kept in memory, no screenshot files) and return them, in the order they ended.

    make_policy(task, seed) -> a fresh policy for one episode (retried episodes get a new one).
    browser: a running collect.Browser to share (train_grpo keeps one for the run); None starts one.
    raise_errors: an exception that is not a page or browser fault (a bug in the policy) propagates
    instead of being recorded as the episode's error.
    run: how each episode runs, any of RUN_DEFAULTS' keys (max_steps, action_timeout, settle_quiet_ms,
    settle_cap_ms); the rest keep their defaults.
    """
    from tqdm import tqdm
    jobs = list(jobs)   # -> the tasks in job order, each with its seeds last-first (for pop)
    left = {task: [s for t, s in reversed(jobs) if t == task] for task in dict.fromkeys(t for t, _ in jobs)}
    if unknown := set(run) - set(RUN_DEFAULTS):
        raise TypeError(f"run_episodes: unknown keyword(s) {', '.join(sorted(unknown))}")
    episode_kw = {**RUN_DEFAULTS, **run, "policy_name": policy_name}
    if not jobs:
        return []
    episodes = []
    async with contextlib.AsyncExitStack() as stack:
        if browser is None:
            from playwright.async_api import async_playwright
            pw = await stack.enter_async_context(async_playwright())
            browser = Browser(pw, headless)
            stack.push_async_callback(browser.close)
        bar = stack.enter_context(tqdm(total=len(jobs), disable=not progress, unit="ep"))
        await asyncio.gather(
            *(worker(left, env, browser, make_policy, out, bar, episodes, episode_kw, raise_errors)
              for _ in range(workers)))
    return episodes


def select_tasks(spec, env, policy):
    """The task list, checked before any browser starts: unknown tasks and missing experts fail here.
    'all' is every task of the suite (MiniWoB++: every task that has an expert)."""
    tasks = env.all_tasks() if spec == "all" else [t.strip() for t in spec.split(",") if t.strip()]
    if missing := [t for t in tasks if not env.has_task(t)]:
        raise SystemExit(f"unknown {env.suite} task(s): {', '.join(missing)}")
    if policy == "expert" and env.suite == "webarena":
        raise SystemExit(
            "WebArena-format tasks have no experts: use --policy random or human (a model: evaluate.py)")
    if policy == "expert" and (no_expert := [t for t in tasks if env.expert(t) is None]):
        raise SystemExit(f"no expert for {env.suite} task(s) {', '.join(no_expert)}")
    return tasks


def done_ids(out, repair=True):
    """The ids of the episodes in <out>; a torn last line of <out>/episodes.jsonl is set aside first, unless
    repair=False (read-only: an error)."""
    if not os.path.exists(os.path.join(out, "episodes.jsonl")):
        return set()
    if repair and (note := metrics.repair_dataset(out)):
        print(f"resume: {note}")
    return {e["id"] for e in metrics.load_dataset(out)}


def pending_jobs(out, suite, tasks, seed, episodes, shard=None, repair=True):
    """The (task, seed) grid, or its part `shard` (K, N) -> (the ids of those jobs, the ones not yet in
    <out>)."""
    done = done_ids(out, repair)
    grid = metrics.shard([(task, s) for task in tasks for s in range(seed, seed + episodes)], shard)
    ids = [metrics.episode_id(suite, task, s) for task, s in grid]
    return ids, [job for job, i in zip(grid, ids) if i not in done]


def summarize(out, ids):
    eps = [e for e in metrics.load_dataset(out) if e["id"] in ids]
    if not eps:
        return {"episodes": 0}
    by_task = {t: [e for e in eps if e["task"] == t] for t in sorted({e["task"] for e in eps})}
    return {"episodes": len(eps), "success_rate": sum(e["success"] for e in eps) / len(eps),
            "mean_steps": sum(len(e["steps"]) for e in eps) / len(eps),
            "errors": sum(1 for e in eps if e.get("error")),
            "by_task": {t: {"n": len(v), "success": sum(e["success"] for e in v) / len(v)}
                        for t, v in by_task.items()}}


def open_out(args):
    data = os.path.join(args.out, "episodes.jsonl")
    if not args.resume and os.path.exists(data) and os.path.getsize(data):
        raise SystemExit(
            f"{args.out} already holds episodes: pass --resume to continue it or choose another --out")
    os.makedirs(args.out, exist_ok=True)


async def collect(args):
    env = make_env(args.suite, **suite_options(args))
    try:
        tasks = select_tasks(args.tasks, env, args.policy)
        open_out(args)
        ids, jobs = pending_jobs(args.out, env.suite, tasks, args.seed, args.episodes, args.shard)
        print(f"collect: {len(jobs)} episodes to run ({len(ids) - len(jobs)} already done), "
              f"{len(tasks)} tasks, policy={args.policy}, workers={args.workers} -> {args.out}")
        await run_episodes(env, jobs, lambda task, seed: make_policy(args.policy, env, task, seed), args.out,
                           workers=args.workers, policy_name=args.policy, **run_options(args),
                           headless=not (args.headed or args.policy == "human"),
                           progress=not args.no_progress)
        return summarize(args.out, set(ids))
    finally:
        env.close()


# ----------------------------------------------------------------------------------------------
# A benchmark's split (metrics.py: MAG-Bench): the definition's jobs, suite by suite, by the experts under
# its protocol; then the guides of its source, written by annotate.py's own commands, and the fingerprint.

ANNOTATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "annotate.py")
GUIDE_COMMANDS = {"template": (["draft", "--drafter", "template"], ["verify", "--accept-drafts"],
                               ["paraphrase", "--drafter", "template"])}


def browser_version():
    """The Chromium a run launches, as its --version says ("Chromium 150.0.7871.100 built on Debian ...")."""
    path = find_chromium(own := playwright_chromium()) or own
    run = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return run.stdout.strip() or f"{path} (no version: {run.stderr.strip()[:80]})"


def check_protocol(args, bench, prog="collect"):
    """Before any work (a build, evaluate.py's run): this machine's browser and observation snippets vs.
    the definition's -> what benchmark.json or run.json records; refused (one line) unless --other-browser."""
    found = {"browser": browser_version(), "observation": metrics.observation_version()}
    problems = metrics.protocol_problems(bench, found["browser"], found["observation"])
    if problems and not args.other_browser:
        raise SystemExit(f"{prog}: {'; '.join(problems)}: its episodes would differ. Run it where they "
                         "agree, or add --other-browser to run anyway, the results marked not comparable")
    for problem in problems:
        print(f"warning: {problem}: this run is marked not comparable (--other-browser)")
    return dict(found, comparable=not problems, problems=problems)


async def collect_benchmark(args, protocol):
    bench = metrics.load_benchmark(args.benchmark)
    jobs = metrics.shard(metrics.benchmark_jobs(bench, args.split), args.shard)
    if args.freeze:   # refused before the build, not after it
        metrics.check_unfrozen(bench, args.split)
    open_out(args)
    done = done_ids(args.out)
    part = f"shard {args.shard[0]}/{args.shard[1]} of the " if args.shard else ""
    print(f"collect: {part}{args.split} split of {bench['benchmark']}: {len(jobs)} episodes "
          f"({sum(metrics.episode_id(*job) in done for job in jobs)} already done) -> {args.out}")
    await run_benchmark_jobs(args, bench, [job for job in jobs if metrics.episode_id(*job) not in done])
    for rerun in range(1, args.reruns + 2):   # a shard checks its episodes against the split's rows for them
        departed, verdict = finish_benchmark(args, bench, protocol, last=rerun > args.reruns)
        if not departed:
            break
        # Under load, a rendering race now and then flips a frame (a glyph's anti-aliasing, a scroll
        # caught a pixel short). The episode is run again, the same seed in a fresh page; the check stays
        # byte for byte, and the departed copy is kept for a look.
        print(f"benchmark: {len(departed)} episodes depart from the frozen split; run again "
              f"({rerun} of {args.reruns}), the departed copies in {args.out}/departed/{rerun}: "
              + ", ".join(departed), flush=True)
        set_aside(args.out, departed, os.path.join(args.out, "departed", str(rerun)))
        again = [job for job in jobs if metrics.episode_id(*job) in departed]
        await run_benchmark_jobs(args, bench, again)
    return dict(summarize(args.out, {metrics.episode_id(*job) for job in jobs}), verdict=verdict)


async def run_benchmark_jobs(args, bench, jobs):
    """(suite, task, seed) jobs, suite by suite, by the experts under the benchmark's protocol."""
    for suite in bench["suites"]:
        todo = [(task, seed) for name, task, seed in jobs if name == suite]
        if not todo:
            continue
        env = make_env(suite)
        try:
            select_tasks(",".join(dict.fromkeys(task for task, _ in todo)), env, "expert")
            await run_episodes(env, todo, lambda task, seed, env=env: make_policy("expert", env, task, seed),
                               args.out, workers=args.workers, **bench["protocol"]["run"],
                               progress=not args.no_progress)
        finally:
            env.close()


def set_aside(out, ids, to):
    """Move episodes out of the folder `out` into `to` (their records, screenshots and drafts), so that a
    rerun writes them anew: nothing is deleted."""
    os.makedirs(os.path.join(to, "img"), exist_ok=True)
    for name, key in (("episodes.jsonl", "id"), ("drafts.jsonl", "episode")):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
        moving = {k for k, line in enumerate(lines) if json.loads(line)[key] in ids}
        with open(os.path.join(to, name), "a", encoding="utf-8") as f:
            f.writelines(lines[k] for k in sorted(moving))
        metrics.write_atomic(path, "".join(line for k, line in enumerate(lines) if k not in moving))
    for ep_id in ids:
        if os.path.isdir(os.path.join(out, "img", ep_id)):
            shutil.move(os.path.join(out, "img", ep_id), os.path.join(to, "img", ep_id))


def finish_benchmark(args, bench, protocol, last=True):
    """The split's guides (annotate.py, as a person would run it), each episode marked with the split, and
    the verdict: is this folder the benchmark's split (a shard: the split's rows for its episodes), byte for
    byte? -> (the episodes to run again: those departing from a frozen split, unless `last`; the verdict's
    line, printed last by main). A folder that is NOT the split, when `last`, exits here with the verdict."""
    for command in GUIDE_COMMANDS[bench["splits"][args.split]["guides"]]:
        run = subprocess.run([sys.executable, ANNOTATE, command[0], args.out, *command[1:]])
        if run.returncode:
            raise SystemExit(f"annotate.py {command[0]} {args.out} failed (exit {run.returncode}, "
                             "see above): fix it and rerun this command with --resume")
    episodes = metrics.load_dataset(args.out)
    for ep in episodes:
        ep["split"] = args.split
    metrics.write_dataset(args.out, episodes)
    manifest = metrics.data_manifest(args.out)   # hashes every screenshot: once
    if args.freeze:
        metrics.freeze_benchmark(bench, args.split, manifest)
    digest, found = metrics.check_benchmark_data(bench, args.split, manifest, partial=bool(args.shard))
    unsettled = sum(len(ep["meta"].get("unsettled", [])) for ep in episodes)
    metrics.write_atomic(os.path.join(args.out, "benchmark.json"), json.dumps(
        {"benchmark": bench["benchmark"], "version": bench["version"], "split": args.split,
         "definition": args.benchmark, "shard": args.shard, "fingerprint": None if args.shard else digest,
         "matches": not found, "differences": found, "unsettled_steps": unsettled, **protocol}, indent=1))
    if args.shard:
        name = f"shard {args.shard[0]}/{args.shard[1]} of {bench['benchmark']} {args.split}"
        verdict = f"{len(episodes) - len(found)} of {len(episodes)} episodes of {name} match"
    else:
        name = f"{bench['benchmark']} {args.split}"
        verdict = f"{args.out} is {name}, byte for byte (fingerprint {digest})"
    note = "" if protocol["comparable"] else " -- NOT comparable: " + "; ".join(protocol["problems"])
    note += f"; {unsettled} steps never settled (their episodes' meta.unsettled)" if unsettled else ""
    if not found:
        return [], f"benchmark: {verdict}{note}"
    if args.shard and not bench["splits"][args.split].get("fingerprint"):   # nothing to check a part against
        return [], (f"benchmark: {len(episodes)} episodes of {name} built; {found[0]}: merge the shards, "
                    "then freeze the merged folder (--resume --freeze)")
    if not last and (departed := metrics.departing_episodes(bench, args.split, manifest)):
        return departed, None
    raise SystemExit(f"benchmark: {args.out} is NOT {name}: {metrics.describe_differences(found)} "
                     f"(all in {args.out}/benchmark.json){note}")


def main(argv=None):
    args = parse_args(argv)
    if args.benchmark and not os.path.exists(ANNOTATE):
        raise SystemExit(f"--benchmark writes the guides with annotate.py: copy it beside {__file__}")
    if args.freeze and args.shard:
        raise SystemExit("--freeze records a whole split: merge the shards, then --resume --freeze on it")
    try:
        protocol = check_protocol(args, metrics.load_benchmark(args.benchmark)) if args.benchmark else None
        summary = asyncio.run(collect_benchmark(args, protocol) if args.benchmark else collect(args))
    except metrics.DatasetError as e:   # a broken definition, a frozen split frozen again: one line, exit 2
        metrics.fail(e)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished episode is in {args.out}/episodes.jsonl; "
              "rerun with --resume to continue")
        logging.getLogger("asyncio").disabled = True   # Ctrl-C stopped Playwright's driver too: no news
        sys.exit(130)
    verdict = f"\n{summary['verdict']}" if args.benchmark else ""   # a build's verdict: its last line
    print(json.dumps(summary, indent=1) + verdict)
    return summary


if __name__ == "__main__":
    # a shell starts a background job with SIGINT ignored, and children inherit that: Ctrl-C (or a
    # test's SIGINT) must still stop the run cleanly, so the handler is set here, not inherited; SIGTERM
    # (`timeout`, a job scheduler) stops it as Ctrl-C does, so the app servers it started stop too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    main()
