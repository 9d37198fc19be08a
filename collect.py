"""collect.py -- run a policy in live browser environments and record MAG trajectories.

Each episode: reset a seeded task in a real browser, then at every step take an observation
(the screenshot and the Set-of-Mark elements from metrics.OBSERVE_JS), ask the policy for its
reply ("Guide: ... / Action: ..." text, parsed by metrics.py exactly as a model's would be),
execute the action with Playwright, wait for the page to settle, and read the environment's
own reward. Episodes are appended to <out>/episodes.jsonl (one line each, fsynced) and
screenshots to <out>/img/<episode>/<step>.png -- the format every later stage reads.

Runbook
  CPU smoke (seconds):   python collect.py --suite miniwob --tasks click-button --episodes 2 --out /tmp/mag-smoke
  Expert dataset:        python collect.py --suite miniwob --tasks all --episodes 20 --seed 0 --policy expert --workers 4 --out data/miniwob
  Continue after Ctrl-C: the same command with --resume (finished episodes are skipped, a torn last line is set aside)
  Record a person:       python collect.py --suite miniwob --tasks login-user --episodes 3 --policy human --out data/human
                         (a headed browser opens; click and type; each click/keystroke run becomes a step)
  Browser: $MAG_CHROMIUM, else Playwright's own Chromium, else /usr/bin/chromium.

Suites
  miniwob     MiniWoB++ from the `miniwob` PyPI package, served from site-packages by a static HTTP
              server on 127.0.0.1; seeded with Math.seedrandom; reward from the page's WOB_* globals.
  backoffice  Django's admin over a seeded SQLite file (envs/backoffice), one runserver per worker on
              127.0.0.1; task templates in tasks/backoffice.json, judged at the end by WebArena-style
              evaluators (database, URL, page text, answer). Seeded databases are cached in
              ~/.cache/mag/backoffice/. Example:
              python collect.py --suite backoffice --tasks all --episodes 5 --workers 2 --out data/backoffice

Left out on purpose: no selenium/BrowserGym layer (plain Playwright is faster and smaller); no
video recording; the model and API policies arrive with evaluate.py and train_sft.py, through
the same `act(obs) -> text` interface as the policies below.
"""
import argparse
import asyncio
import base64
import contextlib
import functools
import glob
import hashlib
import http.server
import json
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

import metrics

# ----------------------------------------------------------------------------------------------
# Config

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    # what to collect
    p.add_argument("--suite", default="miniwob", choices=["miniwob", "backoffice"], help="environment suite")
    p.add_argument("--tasks", default="all", help="comma-separated task names, or 'all' (every task with an expert)")
    p.add_argument("--episodes", type=int, default=5, help="episodes per task (seeds seed..seed+episodes-1)")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--policy", default="expert", choices=["expert", "random", "human"], help="who acts")
    p.add_argument("--out", default="data/miniwob", help="dataset folder")
    p.add_argument("--resume", action="store_true", help="skip episodes already in --out; set a torn last line aside")
    # how
    p.add_argument("--workers", type=int, default=1, help="parallel browser contexts")
    p.add_argument("--max-steps", type=int, default=30, help="step limit per episode")
    p.add_argument("--action-timeout", type=float, default=10.0, help="seconds before an action counts as hung")
    p.add_argument("--settle-quiet-ms", type=float, default=50, help="DOM quiet period that ends the settle")
    p.add_argument("--settle-cap-ms", type=float, default=2000, help="longest settle after one action")
    p.add_argument("--headed", action="store_true", help="show the browser (default for --policy human)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# The browser. One browser for all workers; a worker gets its own context and reuses it across
# episodes (a page reload is the reset); a new context only after a fault.

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


# Text drawn at whole-pixel positions in grayscale: with subpixel positioning a glyph's rendering
# depended on the renderer's history, so one seed gave two screenshots after different episodes.
CHROMIUM_ARGS = ["--disable-lcd-text", "--disable-font-subpixel-positioning"]


class Browser:
    """The shared browser, relaunched (once, under a lock) when it has died."""

    def __init__(self, pw, headless):
        self.pw, self.headless, self.browser, self.lock = pw, headless, None, asyncio.Lock()

    async def get(self):
        async with self.lock:
            if self.browser is None or not self.browser.is_connected():
                path = find_chromium(self.pw.chromium.executable_path)
                self.browser = await self.pw.chromium.launch(headless=self.headless, executable_path=path, args=CHROMIUM_ARGS)
            return self.browser

    async def close(self):
        if self.browser is not None and self.browser.is_connected():
            await self.browser.close()


# ----------------------------------------------------------------------------------------------
# MiniWoB++: the package's HTML served on 127.0.0.1; a seeded episode per (task, seed).

MINIWOB_VIEWPORT = (160, 210)  # CSS px: the task area of every MiniWoB++ page
MINIWOB_SCALE = 3              # device scale factor: a legible 480x630 screenshot
EPISODE_MAX_MS = 2**31 - 1     # MiniWoB's own 10 s clock would end slow episodes; >= 2^31 overflows setTimeout


def serve_directory(root):
    """A quiet threaded static HTTP server on 127.0.0.1 (a free port); returns (server, base_url)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=root))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class MiniWoB:
    suite = "miniwob"
    viewport, scale = MINIWOB_VIEWPORT, MINIWOB_SCALE
    settle_floor_ms = 0   # single-page tasks: the settle may end as soon as the DOM is quiet

    def __init__(self):
        import miniwob
        self.root = os.path.join(os.path.dirname(miniwob.__file__), "html")
        self.server, self.base = serve_directory(self.root)
        self.origins = [self.base]

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def url(self, task):
        return f"{self.base}/miniwob/{task}.html"

    def public_url(self, url):
        """URLs are stored with the server's port replaced by a placeholder (WebArena style), so a
        dataset does not depend on which free port a run happened to get."""
        return url.replace(self.base, "__MINIWOB__")

    def has_task(self, task):
        return os.path.exists(os.path.join(self.root, "miniwob", f"{task}.html"))

    async def reset(self, page, task, seed):
        """Load the task page fresh and start a seeded episode; returns (instruction, fields).

        NL tasks return {utterance, fields} from getUtterance; the fields are the task's own
        parse of the instruction and are kept in the episode's meta (they are not shown to models).
        """
        await page.goto(self.url(task), wait_until="load")
        # the page's scripts are synchronous: after "load", core and genProblem exist. The first render
        # of a fresh browser can paint with a fallback font (seen on the date field): wait for fonts.
        # Int seeds go in as JS numbers: seedrandom hashes "3" and 3 differently.
        return await page.evaluate("""async (seed) => {
            await document.fonts.ready;
            core.EPISODE_MAX_TIME = EPISODE_MAX_MS;
            if (window.jQuery) jQuery.fx.off = true;
            Math.seedrandom(seed);
            core.startEpisodeReal();
            const u = core.getUtterance();
            return typeof u === 'string' ? [u, null] : [u.utterance, u.fields || null];
        }""".replace("EPISODE_MAX_MS", str(EPISODE_MAX_MS)), seed)

    async def status(self, page):
        """(done, reward, success) from the page's own globals; success = raw reward > 0."""
        done, raw = await page.evaluate("[WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]")
        return bool(done), float(raw), bool(done and raw > 0)

    async def attach(self, ctx):
        """Nothing per context: one static server serves every worker."""

    async def evaluate(self, page, task, params, answer):
        """An episode that ended before the page said done (stop() or the step limit) has failed."""
        return 0.0, False


# ----------------------------------------------------------------------------------------------
# The back office: Django's real admin (envs/backoffice) over a seeded SQLite file. Every browser
# context (= worker) gets its own `manage.py runserver` on its own port and its own database file,
# so parallel episodes never see each other's changes. Tasks are templates in
# tasks/backoffice.json; the seed picks their parameters from the seeded database, and
# WebArena-style evaluators judge the final state when the episode ends.

HERE = os.path.dirname(os.path.abspath(__file__))
BACKOFFICE_DIR = os.path.join(HERE, "envs", "backoffice")
BACKOFFICE_TASKS = os.path.join(HERE, "tasks", "backoffice.json")
BACKOFFICE_VIEWPORT = (1280, 800)   # CSS px, scale 1: a laptop screen, where the admin lays out as designed
BACKOFFICE_PLACEHOLDER = "__BACKOFFICE__"
SERVER_READY_S = 30                 # runserver imports Django and runs its checks: ~1 s idle, more on a busy machine


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DjangoServer:
    """One runserver over one SQLite file. The port is fixed at creation, so a restart after a crash
    comes back where its browser context's allow-list expects it."""

    def __init__(self, db):
        self.db, self.port, self.proc = db, free_port(), None
        self.base = f"http://127.0.0.1:{self.port}"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        """Start and wait until GET /admin/login/ answers 200 (blocking: call it in a thread)."""
        log = open(self.db + ".log", "wb")   # a file, not a pipe: a full pipe would stall the server
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload", "--insecure"],
            cwd=BACKOFFICE_DIR, env={**os.environ, "MAG_BACKOFFICE_DB": self.db}, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        t0 = time.monotonic()
        while self.proc.poll() is None and time.monotonic() - t0 < SERVER_READY_S:
            try:
                if urllib.request.urlopen(self.base + "/admin/login/", timeout=1).status == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        with open(self.db + ".log", errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"backoffice server {self.base} not ready within {SERVER_READY_S} s; its output:\n{tail}")

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def backoffice_version():
    """A hash of the app's code: cached databases are rebuilt when the models or the seeding change."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(BACKOFFICE_DIR, "**", "*.py"), recursive=True)):
        with open(path, "rb") as f:
            h.update(path[len(BACKOFFICE_DIR):].encode() + f.read())
    return h.hexdigest()[:12]


def query(db, sql, params=()):
    """Rows (as lists) of one read-only query; sqlite3 binds :name arguments from a dict."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        return [list(r) for r in con.execute(sql, params).fetchall()]


def fill(x, params):
    """Put parameters into a template: "{k}" alone keeps the value's type (an expected count stays an
    int), any other string is str.format-ed; lists and dicts are filled throughout."""
    if isinstance(x, dict):
        return {k: fill(v, params) for k, v in x.items()}
    if isinstance(x, list):
        return [fill(v, params) for v in x]
    if isinstance(x, str):
        m = re.fullmatch(r"\{(\w+)\}", x)
        return params[m[1]] if m else x.format(**params)
    return x


def task_params(template, db, seed):
    """The seed's parameters: one row of the template's `pick` query (chosen by random.Random(seed)),
    plus the `set` values formatted from it."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        con.row_factory = sqlite3.Row
        rows = con.execute(template["pick"]).fetchall()
    if not rows:
        raise RuntimeError(f"task template has no candidates on seed {seed}: {template['pick']}")
    params = {"seed": seed, **dict(random.Random(seed).choice(rows))}
    for k, v in template.get("set", {}).items():
        params[k] = v.format(**params)
    return params


async def check(ev, page, db, params, answer):
    """One WebArena-style evaluator (already filled with the parameters) -> passed?"""
    if ev["type"] == "db":
        return query(db, ev["sql"], params) == ev["expected"]
    if ev["type"] == "url_match":
        return urllib.parse.urlsplit(page.url).path == ev["path"]
    if ev["type"] == "program_html":
        text = " ".join(await page.locator(ev["css"]).all_inner_texts())
        return all(r in text for r in ev["required"])
    if ev["type"] == "string_match":
        got = (answer or "").strip()
        if "exact" in ev:
            return got == str(ev["exact"])
        return all(str(s).lower() in got.lower() for s in ev["must_include"])
    raise ValueError(f"unknown evaluator type {ev['type']!r}")


class Backoffice:
    suite = "backoffice"
    viewport, scale = BACKOFFICE_VIEWPORT, 1
    # An Enter or a click that submits a form starts its navigation a task or two later, and the
    # request may not exist yet when the DOM already looks quiet: without this floor the next
    # observation could show the page being left (seen under load with two workers).
    settle_floor_ms = 150

    def __init__(self):
        with open(BACKOFFICE_TASKS) as f:
            self.tasks = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        self.cache = os.path.join(cache_home, "mag", "backoffice", backoffice_version())
        self.tmp = tempfile.mkdtemp(prefix="mag-backoffice-")   # the served files and server logs
        self.servers, self.idle, self.origins = {}, [], []      # context -> server; servers of closed contexts; bases
        self.build_lock = asyncio.Lock()                       # one build at a time (and never the same seed twice)

    def close(self):
        for server in self.idle + list(self.servers.values()):
            server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, task, base=BACKOFFICE_PLACEHOLDER):
        return base + self.tasks[task]["start_url"]

    def public_url(self, url):
        """The server's address replaced by a placeholder (WebArena style): ports differ between runs."""
        for base in self.origins:
            url = url.replace(base, BACKOFFICE_PLACEHOLDER)
        return url

    def has_task(self, task):
        return task in self.tasks

    async def attach(self, ctx):
        """Give a new browser context its server (reusing one whose context has closed) before new_page
        makes the context's allow-list from self.origins. Started lazily by reset()."""
        if self.idle:
            server = self.idle.pop()
        else:
            server = DjangoServer(os.path.join(self.tmp, f"served-{len(self.origins)}.sqlite3"))
            self.origins.append(server.base)
        self.servers[ctx] = server
        ctx.on("close", lambda _: self.idle.append(self.servers.pop(ctx)))

    async def database(self, seed):
        """The cached seeded database of `seed`, built on first use (~1 s, Django in child processes)."""
        from envs.backoffice.build_db import build_db
        path = os.path.join(self.cache, f"seed-{seed}.sqlite3")
        async with self.build_lock:
            if not os.path.exists(path):
                os.makedirs(self.cache, exist_ok=True)
                await asyncio.to_thread(build_db, path, seed)
        return path

    async def reset(self, page, task, seed):
        """Fresh data (the seed's database copied over the served file), a server that is up, no
        cookies (every episode starts logged out), the start page; returns (instruction, parameters)."""
        server, template = self.servers[page.context], self.tasks[task]
        db = await self.database(seed)
        tmp = server.db + ".new"
        shutil.copyfile(db, tmp)
        os.replace(tmp, server.db)   # atomic: a request sees the old file or the new one, never half
        if not server.alive():       # first episode, or it died since the last one
            await asyncio.to_thread(server.start)
        await page.context.clear_cookies()
        params = task_params(template, db, seed)
        await page.goto(self.url(task, server.base), wait_until="load")
        return fill(template["instruction"], params), params

    async def status(self, page):
        """Never done during the episode (the policy says stop); a dead server is a fault, so the
        worker retries the episode in a fresh context and reset() restarts the server."""
        server = self.servers[page.context]
        if not server.alive():
            raise ConnectionError(f"backoffice server {server.base} died (exit code {server.proc.poll()})")
        return False, 0.0, False

    async def evaluate(self, page, task, params, answer):
        """Every evaluator of the task on the final state -> (reward, success); WebArena's binary reward.
        `params` are the ones reset() picked (kept in the episode's meta.fields)."""
        template = self.tasks[task]
        db = self.servers[page.context].db
        passed = [await check(ev, page, db, params, answer) for ev in fill(template["evaluators"], params)]
        return float(all(passed)), all(passed)


SUITES = {"miniwob": MiniWoB, "backoffice": Backoffice}


# ----------------------------------------------------------------------------------------------
# Observation, action execution and settle.

# Animations and transitions end at once and the caret is hidden, so a screenshot depends only on
# the page's state, never on when it was taken.
NO_ANIMATION_JS = """
document.addEventListener('DOMContentLoaded', () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation-duration: 0s !important; animation-delay: 0s !important;' +
    ' transition-duration: 0s !important; transition-delay: 0s !important; caret-color: transparent !important; }';
  (document.head || document.documentElement).appendChild(style);
});
"""


async def new_page(browser, env, blocked):
    """A fresh context+page: pinned viewport, scale, locale and timezone; other origins blocked."""
    ctx = await browser.new_context(viewport={"width": env.viewport[0], "height": env.viewport[1]},
                                    device_scale_factor=env.scale, locale="en-US", timezone_id="UTC")
    await ctx.add_init_script(metrics.INIT_JS)
    await env.attach(ctx)   # a suite with a server per context adds that server to env.origins first
    allowed = tuple(env.origins) + ("data:", "about:", "blob:")

    async def guard(route):
        blocked.append(route.request.url)
        if route.request.is_navigation_request():
            await route.fulfill(status=204)  # a 204 answer keeps the current page (an abort would show an error page)
        else:
            await route.abort("blockedbyclient")
    # only requests to other origins reach Python; same-origin ones are never intercepted
    pattern = re.compile("^(?!" + "|".join(re.escape(o) for o in allowed) + ")")
    await ctx.route(pattern, guard)
    await ctx.add_init_script(NO_ANIMATION_JS)
    page = await ctx.new_page()
    page.mag_cdp = await ctx.new_cdp_session(page)
    # requests in flight (images, XHR) also hold the settle: a widget drawn with a CSS image has no
    # size until its image arrives. Kept on the page object so settle() needs nothing else.
    inflight = page.mag_inflight = set()
    page.on("request", lambda r: inflight.add(r))
    page.on("requestfinished", lambda r: inflight.discard(r))
    page.on("requestfailed", lambda r: inflight.discard(r))
    return ctx, page


async def screenshot(page, env, scroll=(0, 0)):
    """PNG of the viewport at device scale, straight from CDP: the same bytes as page.screenshot(),
    without the DOM changes Playwright makes around a capture (those would hold the next settle open).
    The clip is in document coordinates, hence the page's scroll offset."""
    w, h = env.viewport
    r = await page.mag_cdp.send("Page.captureScreenshot", {
        "format": "png", "clip": {"x": scroll[0], "y": scroll[1], "width": w, "height": h, "scale": env.scale}})
    return base64.b64decode(r["data"])


OBSERVE_TRIES = 5  # frames to wait at most for the marks to stop moving (see metrics.OBSERVE_JS)


async def observe(page, env):
    """(elements, png bytes, url): the stable marks and the screenshot of the same page state."""
    obs = await page.evaluate(metrics.OBSERVE_JS, [env.scale, OBSERVE_TRIES])
    png = await screenshot(page, env, obs["scroll"])
    return obs["elements"], png, obs["url"]


async def settle(page, quiet_ms, cap_ms, floor_ms=0):
    """Wait until the DOM has been quiet for quiet_ms, no short timer is pending and no request is
    in flight (cap cap_ms), and at least floor_ms have passed (see Backoffice.settle_floor_ms).

    Returns the seconds waited. A navigation in flight makes evaluate fail; then wait for load.
    """
    t0 = time.perf_counter()
    first = True
    while True:
        try:  # the first check waits a frame: the action's effects and the requests they start come first
            s = await page.evaluate("(f) => window.__mag ? window.__mag.settle(f) : {quiet: 1e9, pending: 0}", first)
            first = False
        except Exception as e:  # noqa: BLE001 -- playwright raises its base Error for a torn-down context
            if "context was destroyed" not in str(e) and "navigat" not in str(e):
                raise
            await page.wait_for_load_state("load")
            continue
        waited = (time.perf_counter() - t0) * 1000
        busy = s["pending"] or getattr(page, "mag_inflight", None)
        if (not busy and s["quiet"] >= quiet_ms and waited >= floor_ms) or waited >= cap_ms:
            return waited / 1000
        need = 15 if busy else max(quiet_ms - s["quiet"], floor_ms - waited)
        await asyncio.sleep(max(5, min(need, cap_ms - waited)) / 1000)


def css_point(point, env):
    """Screenshot pixels -> CSS px, clamped into the viewport."""
    w, h = env.viewport
    return min(max(0, point[0] / env.scale), w - 1), min(max(0, point[1] / env.scale), h - 1)


SCROLL_FRACTION = 0.6  # one scroll moves 60% of the viewport: overlap keeps context on screen
SCROLL_WAIT_POLLS = 20  # up to ~200 ms for a wheel to turn into a scroll


async def execute(page, action, env):
    """Perform one action with real mouse/keyboard input. Element ops need action['point']."""
    op, value = action["op"], action.get("value") or ""
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
            handle = await page.evaluate_handle("([x, y]) => document.elementFromPoint(x, y)", [x, y])
            el = handle.as_element()
            tag = await el.evaluate("e => e.tagName") if el else None
            if tag != "SELECT":
                raise ActionError(f"select: the element at ({x:.0f}, {y:.0f}) is a {tag}, not a <select>")
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


class ActionError(Exception):
    """An action the page cannot take (a select on a non-select): the step records it, the episode goes on."""


def ground(action, elements):
    """Fill both groundings: a mark gets its box centre as the point; a point gets the innermost mark under it."""
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

@dataclass
class Do:
    """One expert move: an op on the element found by css (+ exact text, + nth match)."""
    op: str
    css: str | None = None
    text: str | None = None
    nth: int = 0
    value: str | None = None


FIND_MARK_JS = """([css, text, nth]) => {
  const norm = (s) => (s || '').replace(/\\s+/g, ' ').trim();
  const els = [...document.querySelectorAll(css)].filter((e) => text === null || norm(e.textContent) === text);
  return els[nth] ? window.__mag.markOf(els[nth]) : -1;
}"""


class ExpertError(Exception):
    """An expert whose target is missing or unmarked: a bug in the expert or in the observation."""


class ExpertPolicy:
    order, grounding = "action_only", "som"
    executed = False  # the harness performs every action

    def __init__(self, task):
        self.task, self.moves = task, None

    async def act(self, obs):
        page, ep = obs["page"], obs["episode"]
        if self.moves is None:
            self.moves = find_expert(self.task)(page, ep["instruction"])
        try:
            do = await self.moves.__anext__()
        except StopAsyncIteration:
            return "Action: stop()"
        mark = None
        if do.css is not None:
            mark = await page.evaluate(FIND_MARK_JS, [do.css, do.text, do.nth])
            if mark is None or mark < 0:
                what = "no element" if mark == -1 else "an element without a mark"
                raise ExpertError(f"{self.task}: {what} for {do.css!r} text={do.text!r} nth={do.nth}")
        action = metrics.make_action(do.op, mark=mark, value=do.value)
        return metrics.format_output(None, action, "som", self.order, ep["viewport"])


class RandomPolicy:
    """Uniform over marks; mostly clicks, sometimes typing a word, scrolling or pressing Enter."""
    order, grounding = "action_only", "som"
    executed = False
    WORDS = ("hello", "test", "blue", "42", "Alice")

    def __init__(self, seed):
        self.rng = random.Random(seed)

    async def act(self, obs):
        step = obs["episode"]["steps"][obs["step"]]
        marks = [e["mark"] for e in step["elements"]]
        u = self.rng.random()
        if not marks or u < 0.1:
            action = metrics.make_action("scroll", value=self.rng.choice(["down", "up"])) if u < 0.07 \
                else metrics.make_action("press", value="Enter")
        elif u < 0.3:
            action = metrics.make_action("type", mark=self.rng.choice(marks), value=self.rng.choice(self.WORDS))
        else:
            action = metrics.make_action("click", mark=self.rng.choice(marks))
        return metrics.format_output(None, action, "som", self.order, obs["episode"]["viewport"])


# The human recorder: a person acts in a headed browser. Capture-phase listeners hold back each
# click (and Enter/Tab/Escape) and queue it with its position, so the step's screenshot is taken
# *before* it happens; the harness then replays it like any other action. Text keys and <select>
# choices go through at once (a person must see what they type): keystrokes into one field become
# one type() step, closed by the next click or key, and are marked as already done.
HUMAN_JS = """
(() => {
  if (window.__magHuman) return;
  const H = window.__magHuman = {events: [], allowClicks: 0, allowKeys: 0};
  const mark = (el) => (window.__mag && window.__mag.markOf) ? window.__mag.markOf(el) : null;
  const isSelect = (el) => el && (el.tagName === 'SELECT' || el.tagName === 'OPTION');
  for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click']) {
    window.addEventListener(type, (e) => {
      if (!e.isTrusted || isSelect(e.target)) return;
      if (H.allowClicks > 0) { if (type === 'click') H.allowClicks--; return; }  // the harness's replay
      e.preventDefault(); e.stopImmediatePropagation();
      // a cancelled pointerdown suppresses the mouse events after it, so the click is queued here
      if (type === 'pointerdown') H.events.push({kind: 'click', x: e.clientX, y: e.clientY});
    }, true);
  }
  window.addEventListener('keydown', (e) => {
    if (!e.isTrusted) return;
    if (['Enter', 'Tab', 'Escape'].includes(e.key)) {
      if (H.allowKeys > 0) { H.allowKeys--; return; }
      e.preventDefault(); e.stopImmediatePropagation();
    }
    H.events.push({kind: 'key', key: e.key, mark: mark(document.activeElement)});
  }, true);
  window.addEventListener('change', (e) => {
    const t = e.target;
    if (t && t.tagName === 'SELECT') H.events.push({kind: 'select', mark: mark(t), value: t.selectedOptions[0] ? t.selectedOptions[0].text : ''});
  }, true);
})();
"""
HUMAN_KEYS = ("Enter", "Tab", "Escape")  # held back and replayed as press(); other non-text keys are ignored


class HumanPolicy:
    """Replies in pixel grounding: a click is recorded where the person clicked (the loop finds the
    mark under it); typing and selects name the focused element's box centre."""
    order, grounding = "action_only", "coord"
    executed = False  # set per step: True when the person's own input already did it

    def __init__(self, poll_s=0.05):
        self.events, self.typing, self.poll_s = [], None, poll_s  # typing: [mark, text]

    async def act(self, obs):
        page, ep = obs["page"], obs["episode"]
        elements = ep["steps"][obs["step"]]["elements"]
        await page.evaluate(HUMAN_JS)
        while True:
            action = self._next_action(elements, ep["meta"]["device_scale_factor"])
            if action is not None:
                break
            await asyncio.sleep(self.poll_s)
            self.events += await page.evaluate("window.__magHuman.events.splice(0)")
        self.executed = action["op"] in ("type", "select")
        if not self.executed:  # let the replay of this click or key through (a person clicking in
            # the same few milliseconds could take its place: harmless for a recorder, noted here)
            await page.evaluate("(k) => { window.__magHuman[k] += 1; }", "allowClicks" if action["op"] == "click" else "allowKeys")
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
                self.typing[1] = self.typing[1][:-1] if ev["key"] == "Backspace" else self.typing[1] + ev["key"]
            elif ev["kind"] == "click":
                return metrics.make_action("click", point=[ev["x"] * scale, ev["y"] * scale])
            elif ev["kind"] == "select":
                return self._on_mark("select", ev["mark"], elements, ev["value"])
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


def make_policy(name, task, seed):
    if name == "expert":
        return ExpertPolicy(task)
    if name == "random":
        return RandomPolicy(seed)
    return HumanPolicy()


# ----------------------------------------------------------------------------------------------
# MiniWoB++ experts: each reads the instruction and the DOM and yields Do moves; the episode
# loop resumes it after the previous move has run and the page has settled.

# Shared helpers: where a target is, scrolling it into view, waiting for icons to settle.
_JS_NORM = "const norm = s => (s || '').replace(/\\s+/g, ' ').trim();"

# Where is element (css,text,nth) relative to the visible area? Returns 'ok', 'up', 'down', 'hidden' or 'missing'.
_JS_WHERE = _JS_NORM + """
  let els = Array.from(document.querySelectorAll(css));
  if (text !== null) els = els.filter(e => norm(e.textContent) === text);
  const el = els[nth];
  if (!el) return 'missing';
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height) return 'hidden';
  let top = 0, bottom = 210;                       // viewport, then every clipping ancestor
  for (let a = el.parentElement; a; a = a.parentElement) {
    const ov = getComputedStyle(a).overflowY;
    if (ov !== 'visible') { const ar = a.getBoundingClientRect(); top = Math.max(top, ar.top); bottom = Math.min(bottom, ar.bottom); }
  }
  const cy = r.top + r.height / 2;
  if (cy < top + 1) return 'up';
  if (cy > bottom - 1) return 'down';
  return 'ok';
"""


async def where(page, css, text=None, nth=0):
    return await page.evaluate(f"([css, text, nth]) => {{ {_JS_WHERE} }}", [css, text, nth])


async def reveal(page, css, text=None, nth=0, limit=12):
    """Yield wheel scrolls (at the viewport centre) until the element's centre is inside the visible area."""
    for _ in range(limit + 20):
        w = await where(page, css, text, nth)
        if w == "hidden":      # no box yet (image still loading): wait for it
            await page.wait_for_timeout(100)
            continue
        if w not in ("up", "down"):
            break
        yield Do("scroll", value=w)


async def index_of(page, css, js_pred, arg=None):
    """Index (in querySelectorAll(css) order) of the first element for which js_pred(el, arg) is true, or -1."""
    return await page.evaluate(
        f"([css, arg]) => {{ {_JS_NORM} const pred = {js_pred};"
        " return Array.from(document.querySelectorAll(css)).findIndex(e => pred(e, arg)); }", [css, arg])


def js_fn(args, body):
    """An arrow function with the text normaliser `norm` in scope."""
    return f"({args}) => {{ {_JS_NORM} {body} }}"


def quoted(instruction):
    return re.findall(r'"([^"]*)"', instruction)


# Tasks.
async def solve_click_button(page, instruction):
    """Click the button whose text is quoted in the instruction (all such buttons are correct)."""
    yield Do("click", css="#area button", text=quoted(instruction)[0])


async def solve_click_link(page, instruction):
    """Click the span.alink whose text is quoted (all links with that text are correct)."""
    yield Do("click", css="#area span.alink", text=quoted(instruction)[0])


async def solve_enter_text(page, instruction):
    """Type the quoted text into #tt and press Submit."""
    yield Do("type", css="#tt", value=quoted(instruction)[0])
    yield Do("click", css="#subbtn")


async def solve_login_user(page, instruction):
    """Type username and password (quoted, in that order) and press Login."""
    user, pw = quoted(instruction)[:2]
    yield Do("type", css="#username", value=user)
    yield Do("type", css="#password", value=pw)
    yield Do("click", css="#subbtn")


async def solve_click_checkboxes(page, instruction):
    """Tick the checkbox of each label listed in 'Select a, b and click Submit.' (or 'nothing'), then Submit."""
    listed = re.match(r"Select (.*) and click Submit\.", instruction).group(1)
    wanted = set() if listed == "nothing" else set(listed.split(", "))
    labels = await page.evaluate("() => Array.from(document.querySelectorAll('#boxes label')).map(l => l.textContent.trim())")
    for i, name in enumerate(labels):
        if name in wanted:
            yield Do("click", css=f"#ch{i}")
    yield Do("click", css="#subbtn")


async def solve_choose_list(page, instruction):
    """Select the named option in the <select>, then Submit."""
    item = re.match(r"Select (.*) from the list and click Submit\.", instruction).group(1)
    yield Do("select", css="#options", value=item)
    yield Do("click", css="#area button")


async def solve_click_tab_2(page, instruction):
    """Find which tab panel holds a link with the quoted text, open that tab if hidden, click the link."""
    word = quoted(instruction)[0]
    tab = await page.evaluate(js_fn("w", """
        const panels = Array.from(document.querySelectorAll('#area > div[id^=tabs-]'));
        const vis = panels.findIndex(p => p.style.display !== 'none' && p.querySelector('span.alink') &&
            Array.from(p.querySelectorAll('span.alink')).some(s => norm(s.textContent) === w));
        if (vis >= 0) return panels[vis].id;
        return panels.find(p => Array.from(p.querySelectorAll('span.alink')).some(s => norm(s.textContent) === w)).id;
    """), word)
    if not await page.evaluate("(id) => document.getElementById(id).offsetParent !== null", tab):
        yield Do("click", css="#area ul li a", text="Tab #" + tab.split("-")[1])
    yield Do("click", css=f"#{tab} span.alink", text=word)


async def solve_use_autocomplete(page, instruction):
    """Type the required prefix, then click a suggestion that also has the required suffix
    (if it is not visible, type the full item so that it becomes the first suggestion)."""
    q = quoted(instruction)
    start, end = q[0], (q[1] if len(q) > 1 else "")
    yield Do("type", css="#tags", value=start)
    items = await page.evaluate("() => Array.from(document.querySelectorAll('ul.ui-autocomplete li.ui-menu-item'))"
                                ".map(d => [d.textContent.replace(/\\s+/g, ' ').trim(), d.getBoundingClientRect().bottom])")
    k = next(i for i, (t, _) in enumerate(items) if t.startswith(start) and t.endswith(end))
    if items[k][1] > 209:
        yield Do("type", css="#tags", value=items[k][0])
        k = 0
    yield Do("click", css="ul.ui-autocomplete li.ui-menu-item", nth=k)
    yield Do("click", css="#subbtn")


async def solve_enter_date(page, instruction):
    """<input type=date>: a centre click focuses the *year* segment, so type the year there,
    Shift+Tab twice to the month segment and press the month/day digits (segments auto-advance)."""
    mm, dd, yyyy = re.search(r"(\d\d)/(\d\d)/(\d{4})", instruction).groups()
    yield Do("type", css="#tt", value=yyyy)
    yield Do("press", value="Shift+Tab")
    yield Do("press", value="Shift+Tab")
    for ch in mm + dd:
        yield Do("press", value=ch)
    yield Do("click", css="#subbtn")


async def solve_navigate_tree(page, instruction):
    """Expand collapsed ancestor folders (click their span.folder) top-down until an item with the
    quoted name is visible, then click it: a folder via its span.folder, a file via its <li>."""
    name = quoted(instruction)[0]
    for _ in range(10):
        plan = await page.evaluate(js_fn("name", """
            const spans = Array.from(document.querySelectorAll('#tree span'));
            const hits = spans.filter(s => norm(s.textContent) === name);
            const shown = hits.filter(s => s.offsetParent !== null);
            const folders = Array.from(document.querySelectorAll('#tree span.folder'));
            if (shown.length) {
                const s = shown[0];
                if (s.classList.contains('folder')) return ['span', folders.filter(f => norm(f.textContent) === name).indexOf(s)];
                const lis = Array.from(document.querySelectorAll('#tree li')).filter(l => norm(l.textContent) === name);
                return ['li', lis.indexOf(s.parentElement)];
            }
            // outermost collapsed ancestor of the first hit
            let top = null;
            for (let li = hits[0].parentElement.parentElement.closest('li'); li; li = li.parentElement.closest('li'))
                if (li.querySelector(':scope > ul').style.display === 'none') top = li;
            const f = top.querySelector(':scope > span.folder');
            const t = norm(f.textContent);
            return ['expand', folders.filter(x => norm(x.textContent) === t).indexOf(f), t];
        """), name)
        kind, k = plan[0], plan[1]
        css, text = ("#tree li", name) if kind == "li" else ("#tree span.folder", name if kind == "span" else plan[2])
        async for d in reveal(page, css, text, k):
            yield d
        yield Do("click", css=css, text=text, nth=k)
        if kind != "expand":
            return


async def solve_search_engine(page, instruction):
    """Search for the quoted name, go to page (n-1)//3+1 of the results, click result (n-1)%3 there."""
    term = quoted(instruction)[0]
    n = int(re.search(r"click the (\d+)(?:st|nd|rd|th) search result", instruction).group(1)) - 1
    yield Do("type", css="#search-text", value=term)
    yield Do("click", css="#search")
    if n // 3:
        yield Do("click", css="#pagination a", text=str(n // 3 + 1))
    yield Do("click", css="#page-content a.search-title", nth=n % 3)


_SOCIAL_MENU = {"Share via DM": "share", "Copy link to Tweet": "copy", "Embed Tweet": "embed",
                "Mute": "menu-user", "Block": "block-user", "Report": "report"}


async def solve_social_media(page, instruction):
    """Find the first post by the user; click reply/retweet/like directly, or open its 'more' menu
    and click the menu entry. Scrolls the #area list (wheel) to bring targets into view.
    Icons are CSS `content:url()` images swapped on :hover; while the hover image loads the icon
    collapses, so a plain click (whose own mouse move triggers the swap) misses: hover first, then
    click once the next observation shows the hovered icon."""
    user, action = re.search(r"For the user (\S+), click on the \"(.*)\" button", instruction).groups()
    k = await index_of(page, "#area .media", "(e, u) => e.querySelector('.username').textContent === u", user)
    if action in ("Reply", "Retweet", "Like"):
        css = f"#area .{action.lower()}"
    else:
        async for d in reveal(page, "#area .more", None, k):
            yield d
        yield Do("hover", css="#area .more", nth=k)
        yield Do("click", css="#area .more", nth=k)
        css = f"#area ul li.{_SOCIAL_MENU[action]}"
    async for d in reveal(page, css, None, k):
        yield d
    if action in ("Reply", "Retweet", "Like"):
        yield Do("hover", css=css, nth=k)
    yield Do("click", css=css, nth=k)


_FORWARD_TEMPLATES = [
    'Find the email by NAME and forward that email to DEST.', 'Locate the email by NAME. Forward that email to DEST.',
    'Look for the email from NAME and forward to DEST.', 'Forward to DEST the email from NAME.',
    'Send DEST the email you got from NAME.', 'Go to the email by NAME. Send it to DEST.',
    'Send to DEST the email you got from NAME.', 'Forward the email from NAME to DEST.',
    'Send DEST the email from NAME.', 'Please find the message by NAME, then send it to DEST.',
    'Please forward the information from NAME to DEST.', 'DEST wants the email you got from NAME.',
    'DEST wants the email NAME sent to you.', 'The mail by NAME should be forwarded to DEST.',
    'Please forward to DEST the email by NAME.', 'Give DEST the message you received from NAME,',
    'Forward the mail by NAME to DEST.', 'Go to the message from NAME and send it to DEST.',
    'DEST is waiting for the email by NAME.', 'NAME wants his or her message to be sent to DEST.',
    'I want the mail by NAME to be sent to DEST.', 'Forward to DEST the email you got from NAME.',
    'Please forward the message from NAME to DEST.', 'Please find the mail by NAME. Forward it to DEST.',
    'Navigate to the message from NAME and send it to DEST.', 'Forward DEST the email from NAME.',
    'Forward DEST the message NAME sent you.', 'Send DEST the information NAME sent to you.',
    'Search for the mail NAME sent you and send it to DEST.', 'Get NAME email and then forward it to DEST please.']


async def solve_email_inbox_forward_nl(page, instruction):
    """Parse NAME/DEST with the task's NL templates (keeping parses where both are inbox senders),
    open NAME's email, click Forward, type DEST into the 'to' field, click send."""
    senders = await page.evaluate("() => Array.from(document.querySelectorAll('#main .email-sender')).map(e => e.textContent)")
    parses = []
    for t in _FORWARD_TEMPLATES:
        rx = "^" + re.escape(t).replace("NAME", "(?P<name>.+)").replace("DEST", "(?P<dest>.+)") + "$"
        m = re.match(rx, instruction)
        if m:
            parses.append((m["name"] in senders and m["dest"] in senders, m["name"], m["dest"]))
    _, name, dest = max(parses, key=lambda p: p[0])
    async for d in reveal(page, "#main .email-thread", None, senders.index(name)):
        yield d
    yield Do("click", css="#main .email-thread", nth=senders.index(name))
    yield Do("click", css="#email .email-forward")
    yield Do("type", css="#forward .forward-sender", value=dest)
    yield Do("click", css="#send-forward")


# book-flight.
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]


async def _pick_airport(page, field, wanted):
    """Type `wanted` (city or airport code) into an autocomplete field and click a suggestion containing it."""
    yield Do("type", css=field, value=wanted)
    menu = "ul.ui-autocomplete:not([style*='display: none']) li.ui-menu-item"
    items = await page.evaluate("(css) => Array.from(document.querySelectorAll(css)).map(e => e.textContent.trim())", menu)
    k = next(i for i, t in enumerate(items) if f"({wanted})" in t or t.startswith(wanted + " ("))
    if await where(page, menu, None, k) != "ok":   # scrolled out of the 80px-high menu: narrow the search
        yield Do("type", css=field, value=items[k])
        k = 0
    yield Do("click", css=menu, nth=k)


async def solve_book_flight(page, instruction):
    """Fill From/To via their autocomplete menus, open the jQuery-UI datepicker (opens on Dec 2016, the
    maxDate), click Prev until the target month shows, click the day, Search, then scroll the results
    and click 'Book flight' of the cheapest/shortest flight."""
    m = re.search(r"Book the (\w+) one-way flight from: (.+) to: (.+) on (\d\d)/(\d\d)/(\d{4})\.", instruction)
    goal, origin, dest, mm, dd, yyyy = m.groups()
    async for d in _pick_airport(page, "#flight-from", origin):
        yield d
    async for d in _pick_airport(page, "#flight-to", dest):
        yield d
    yield Do("click", css="#datepicker")
    target = f"{_MONTHS[int(mm) - 1]} {yyyy}"
    for _ in range(24):
        shown = await page.evaluate("() => document.querySelector('#ui-datepicker-div .ui-datepicker-title').textContent"
                                    ".replace(/\\s+/g, ' ').trim()")
        if shown == target:
            break
        later = (int(shown.split()[1]), _MONTHS.index(shown.split()[0])) > (int(yyyy), int(mm) - 1)
        yield Do("click", css="#ui-datepicker-div a.ui-datepicker-" + ("prev" if later else "next"))
    yield Do("click", css="#ui-datepicker-div td[data-handler=selectDay] a", text=str(int(dd)))
    yield Do("click", css="#search")
    key = "price" if goal == "cheapest" else "duration"
    vals = await page.evaluate(f"() => Array.from(document.querySelectorAll('#results .flight')).map("
                               f"f => +f.querySelector('[data-{key}]').getAttribute('data-{key}'))")
    k = vals.index(min(vals))
    async for d in reveal(page, "#results .flight-price", None, k):
        yield d
    yield Do("click", css="#results .flight-price", nth=k)


EXPERTS = {
    "click-button": solve_click_button,
    "click-link": solve_click_link,
    "enter-text": solve_enter_text,
    "login-user": solve_login_user,
    "click-checkboxes": solve_click_checkboxes,
    "choose-list": solve_choose_list,
    "click-tab-2": solve_click_tab_2,
    "use-autocomplete": solve_use_autocomplete,
    "enter-date": solve_enter_date,
    "navigate-tree": solve_navigate_tree,
    "search-engine": solve_search_engine,
    "social-media": solve_social_media,
    "email-inbox-forward-nl": solve_email_inbox_forward_nl,
    "book-flight": solve_book_flight,
}


# ----------------------------------------------------------------------------------------------
# Back-office experts: log in, then work through the admin like a person who knows it. They read
# the task's parameters back out of the instruction (the template turned into a regex) and find
# rows by their cell texts; a target below the fold is scrolled to first.

BACKOFFICE_USER, BACKOFFICE_PASSWORD = "admin", "admin-pass-2026"   # seeded by envs/backoffice


@functools.cache
def backoffice_templates():
    with open(BACKOFFICE_TASKS) as f:
        return json.load(f)


def parse_instruction(task, instruction):
    """The parameters in an instruction, by matching it against its task's template."""
    rx = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+?)", re.escape(backoffice_templates()[task]["instruction"]))
    return re.fullmatch(rx, instruction).groupdict()


async def bo_do(page, op, css, text=None, nth=0, value=None):
    """Yield wheel scrolls until the target's centre is inside the window, then the move itself."""
    for _ in range(10):
        y = await page.evaluate("""([css, text, nth]) => { NORM
            const els = [...document.querySelectorAll(css)].filter(e => text === null || norm(e.textContent) === text);
            const r = els[nth].getBoundingClientRect();
            const cy = r.top + r.height / 2;
            return cy < 0 ? 'up' : cy > window.innerHeight ? 'down' : 'ok';
        }""".replace("NORM", _JS_NORM), [css, text, nth])
        if y == "ok":
            break
        yield Do("scroll", value=y)
    yield Do(op, css=css, text=text, nth=nth, value=value)


# The changelist rows as {field-name: cell text}, in order (the admin gives each cell a field-NAME class).
_JS_ROWS = """() => [...document.querySelectorAll('#result_list tbody tr')].map(tr => Object.fromEntries(
    [...tr.querySelectorAll('[class*=field-]')].map(c => [[...c.classList].find(k => k.startsWith('field-')).slice(6),
                                                         c.textContent.replace(/\\s+/g, ' ').trim()])))"""


async def bo_open_list(page, model, search):
    """From anywhere: log in (the first page is the login form), open a model's list, search it."""
    yield Do("type", css="#id_username", value=BACKOFFICE_USER)
    yield Do("type", css="#id_password", value=BACKOFFICE_PASSWORD)
    yield Do("click", css="#login-form input[type=submit]")
    yield Do("click", css="#content-main th a", text=model)
    yield Do("type", css="#searchbar", value=search)
    yield Do("press", value="Enter")


async def solve_update_customer_contact(page, instruction):
    p = parse_instruction("update-customer-contact", instruction)
    async for d in bo_open_list(page, "Customers", p["name"]):
        yield d
    yield Do("click", css="#result_list th.field-name a", text=p["name"])
    yield Do("type", css="#id_email", value=p["new_email"])
    yield Do("type", css="#id_phone", value=p["new_phone"])
    async for d in bo_do(page, "click", "input[name=_save]"):
        yield d


async def bo_admin_action(page, rows, action):
    """Tick the changelist rows (by index), choose the admin action, press Go."""
    for k in rows:
        async for d in bo_do(page, "click", "#result_list input.action-select", nth=k):
            yield d
    async for d in bo_do(page, "select", "select[name=action]", value=action):
        yield d
    yield Do("click", css="button[name=index]")


async def solve_mark_orders_paid(page, instruction):
    """Search the customer's orders, filter to unpaid, tick each of theirs that is not cancelled, run the action."""
    p = parse_instruction("mark-orders-paid", instruction)
    async for d in bo_open_list(page, "Orders", p["customer"]):
        yield d
    async for d in bo_do(page, "click", "#changelist-filter a", text="No"):   # By paid: No
        yield d
    rows = await page.evaluate(_JS_ROWS)
    # the search also matches other customers' names, emails and notes
    ticks = [k for k, row in enumerate(rows) if row["customer"] == p["customer"] and row["status"] != "Cancelled"]
    async for d in bo_admin_action(page, ticks, "Mark selected orders as paid"):
        yield d


async def solve_close_ticket(page, instruction):
    p = parse_instruction("close-ticket", instruction)
    async for d in bo_open_list(page, "Tickets", p["customer"]):
        yield d
    rows = await page.evaluate(_JS_ROWS)
    k = next(k for k, r in enumerate(rows) if (r["subject"], r["customer"], r["status"]) == (p["subject"], p["customer"], "Open"))
    # the row's checkbox and the bulk action, not the subject link: a long subject wraps in its
    # narrow column, and a wrapped inline link has no mark (its box centre is not on its text)
    async for d in bo_admin_action(page, [k], "Close selected tickets"):
        yield d


async def solve_deactivate_product(page, instruction):
    p = parse_instruction("deactivate-product", instruction)
    async for d in bo_open_list(page, "Products", p["sku"]):
        yield d
    rows = await page.evaluate(_JS_ROWS)
    k = next(k for k, r in enumerate(rows) if r["sku"] == p["sku"])
    async for d in bo_admin_action(page, [k], "Deactivate selected products"):
        yield d


async def solve_count_unpaid_orders(page, instruction):
    p = parse_instruction("count-unpaid-orders", instruction)
    async for d in bo_open_list(page, "Orders", p["customer"]):
        yield d
    async for d in bo_do(page, "click", "#changelist-filter a", text="No"):
        yield d
    rows = await page.evaluate(_JS_ROWS)
    yield Do("stop", value=str(sum(r["customer"] == p["customer"] for r in rows)))


BACKOFFICE_EXPERTS = {
    "update-customer-contact": solve_update_customer_contact,
    "mark-orders-paid": solve_mark_orders_paid,
    "close-ticket": solve_close_ticket,
    "deactivate-product": solve_deactivate_product,
    "count-unpaid-orders": solve_count_unpaid_orders,
}


def find_expert(task):
    """Task names differ between suites, so one lookup serves both (EXPERTS stays MiniWoB's own list)."""
    return EXPERTS.get(task) or BACKOFFICE_EXPERTS.get(task)


# ----------------------------------------------------------------------------------------------
# The episode loop.

def new_episode(env, task, seed, policy, instruction):
    vw, vh = env.viewport
    return {"id": metrics.episode_id(env.suite, task, seed), "suite": env.suite, "task": task, "seed": seed,
            "instruction": instruction, "start_url": env.public_url(env.url(task)),
            "viewport": [vw * env.scale, vh * env.scale],  # the screenshot's size: every coordinate is in its pixels
            "success": False, "reward": 0.0, "steps": [], "error": None,
            "meta": {"policy": policy, "css_viewport": [vw, vh], "device_scale_factor": env.scale,
                     "blocked": [], "collected_by": "collect.py"}}


def image_path(ep_id, k):
    return f"img/{ep_id}/{k}.png"


async def run_episode(page, env, task, seed, policy, args, blocked, partial=None):
    """Play one episode; returns the episode dict (screenshots written to disk as it goes).

    `partial` (a dict) receives the episode as soon as it exists, so a fault mid-episode still
    leaves its steps for the error record.
    """
    ep_id = metrics.episode_id(env.suite, task, seed)
    img_dir = os.path.join(args.out, "img", ep_id)
    shutil.rmtree(img_dir, ignore_errors=True)  # a retried episode starts clean
    os.makedirs(img_dir, exist_ok=True)
    t0 = time.perf_counter()
    # the pointer leaves the page first: where the last episode left it would :hover an element of
    # this one, and the same seed would not give the same screenshot after a different history
    await page.mouse.move(-1, -1)
    instruction, fields = await asyncio.wait_for(env.reset(page, task, seed), args.action_timeout * 3)
    ep = new_episode(env, task, seed, args.policy, instruction)
    if fields:
        ep["meta"]["fields"] = fields
    if partial is not None:
        partial["ep"] = ep
    await settle(page, args.settle_quiet_ms, args.settle_cap_ms)  # images and deferred widgets of the new problem
    done = False
    for k in range(args.max_steps):
        elements, png, url = await asyncio.wait_for(observe(page, env), args.action_timeout)
        with open(os.path.join(img_dir, f"{k}.png"), "wb") as f:
            f.write(png)
        step = {"step": k, "url": env.public_url(url), "screenshot": image_path(ep_id, k), "elements": elements,
                "action": None, "guide": None, "guide_status": None, "guide_alt": None}
        ep["steps"].append(step)
        reply = await policy.act({"episode": ep, "step": k, "png": png, "page": page})
        guide, action = metrics.parse_output(reply, policy.grounding, policy.order, ep["viewport"])
        if action is None:  # an unparseable reply is a wasted step, never a crash; the reply is kept
            step["action"] = metrics.make_action("stop", value=None)
            step["exec_error"], step["reply"] = "unparseable reply", reply
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
                await asyncio.wait_for(execute(page, action, env), args.action_timeout)
            except ActionError as e:
                step["exec_error"] = str(e)
        await settle(page, args.settle_quiet_ms, args.settle_cap_ms, env.settle_floor_ms)
        done, reward, success = await env.status(page)
        if done:
            ep["reward"], ep["success"] = reward, success
            break
    if not done:  # ended by stop() or the step limit: a suite that judges the final state does it now
        last = ep["steps"][-1]["action"] if ep["steps"] else None
        answer = last["value"] if last and last["op"] == "stop" else None
        ep["reward"], ep["success"] = await asyncio.wait_for(env.evaluate(page, task, ep["meta"].get("fields"), answer), args.action_timeout)
    ep["meta"]["seconds"] = round(time.perf_counter() - t0, 3)
    ep["meta"]["blocked"] = list(blocked)  # requests to other origins (navigations answered 204, the rest aborted)
    return ep


def is_fault(e):
    """A page/browser fault worth a retry (crash, hang, closed target) as opposed to a bug."""
    from playwright.async_api import Error as PlaywrightError
    return isinstance(e, (PlaywrightError, asyncio.TimeoutError, ConnectionError))


async def worker(jobs, env, browser, args, out, bar, make=None):
    """Run queued (task, seed) episodes in one browser context, appending each to `out`. `make(name,
    task, seed)` builds an episode's policy: make_policy by default; evaluate.py passes its own."""
    ctx = page = None
    blocked = []
    while True:
        try:
            task, seed = jobs.get_nowait()
        except asyncio.QueueEmpty:
            break
        ep, error, partial = None, None, {}
        for attempt in range(2):  # a fault gets one retry in a fresh context (and browser, if it died)
            try:
                if page is None or page.is_closed():
                    ctx, page = await new_page(await browser.get(), env, blocked)
                blocked.clear()
                ep = await run_episode(page, env, task, seed, (make or make_policy)(args.policy, task, seed), args, blocked,
                                       partial=partial)
                error = None
                break
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as e:  # noqa: BLE001 -- every failure is recorded, never dropped
                error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
                if not is_fault(e):
                    break
                try:  # bounded: a context whose renderer hangs must not hang the whole collection
                    if ctx is not None:
                        await asyncio.wait_for(ctx.close(), args.action_timeout)
                except Exception:  # noqa: BLE001 -- the context may already be gone with its browser
                    pass
                ctx = page = None
        if error is not None:  # recorded with what it got so far, never dropped
            ep = partial.get("ep") or new_episode(env, task, seed, args.policy, "")
            if ep["steps"] and ep["steps"][-1]["action"] is None:
                ep["steps"].pop()  # an observation the fault left without an action
            ep["error"] = error
        metrics.append_episode(out, ep)
        bar.update(1)
    if ctx is not None:
        try:
            await ctx.close()
        except Exception:  # noqa: BLE001
            pass


def select_tasks(spec, env, policy):
    """The task list, checked before any browser starts: unknown tasks and missing experts fail here."""
    experts = {**EXPERTS, **BACKOFFICE_EXPERTS}
    tasks = sorted(t for t in experts if env.has_task(t)) if spec == "all" else [t.strip() for t in spec.split(",") if t.strip()]
    missing = [t for t in tasks if not env.has_task(t)]
    if missing:
        raise SystemExit(f"unknown {env.suite} task(s): {', '.join(missing)}")
    no_expert = [t for t in tasks if t not in experts]
    if policy == "expert" and no_expert:
        raise SystemExit(f"no expert for task(s) {', '.join(no_expert)}; experts: {', '.join(sorted(experts))}")
    return tasks


def summarize(out, ids):
    eps = [e for e in metrics.load_dataset(out) if e["id"] in ids]
    if not eps:
        return {"episodes": 0}
    by_task = {}
    for e in eps:
        by_task.setdefault(e["task"], []).append(e)
    return {"episodes": len(eps), "success_rate": sum(e["success"] for e in eps) / len(eps),
            "mean_steps": sum(len(e["steps"]) for e in eps) / len(eps),
            "errors": sum(1 for e in eps if e.get("error")),
            "by_task": {t: {"n": len(v), "success": sum(e["success"] for e in v) / len(v)} for t, v in sorted(by_task.items())}}


async def collect(args):
    from playwright.async_api import async_playwright
    from tqdm import tqdm
    env = SUITES[args.suite]()
    try:
        tasks = select_tasks(args.tasks, env, args.policy)
        os.makedirs(args.out, exist_ok=True)
        done_ids = set()
        if args.resume:
            note = metrics.repair_dataset(args.out)
            if note:
                print(f"resume: {note}")
            if os.path.exists(os.path.join(args.out, "episodes.jsonl")):
                done_ids = {e["id"] for e in metrics.load_dataset(args.out)}
        elif os.path.exists(os.path.join(args.out, "episodes.jsonl")) and os.path.getsize(os.path.join(args.out, "episodes.jsonl")):
            raise SystemExit(f"{args.out} already holds episodes: pass --resume to continue it, or choose another --out")
        all_ids = set()
        jobs = asyncio.Queue()
        for task in tasks:
            for seed in range(args.seed, args.seed + args.episodes):
                ep_id = metrics.episode_id(env.suite, task, seed)
                all_ids.add(ep_id)
                if ep_id not in done_ids:
                    jobs.put_nowait((task, seed))
        print(f"collect: {jobs.qsize()} episodes to run ({len(all_ids) - jobs.qsize()} already done), "
              f"{len(tasks)} tasks, policy={args.policy}, workers={args.workers} -> {args.out}")
        headless = not (args.headed or args.policy == "human")
        async with async_playwright() as pw:
            browser = Browser(pw, headless)
            with tqdm(total=jobs.qsize(), disable=args.no_progress, unit="ep") as bar:
                try:
                    await asyncio.gather(*(worker(jobs, env, browser, args, args.out, bar) for _ in range(args.workers)))
                finally:
                    await browser.close()
        return summarize(args.out, all_ids)
    finally:
        env.close()


def main(argv=None):
    args = parse_args(argv)
    try:
        summary = asyncio.run(collect(args))
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished episode is in {args.out}/episodes.jsonl; rerun with --resume to continue")
        sys.exit(130)
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
