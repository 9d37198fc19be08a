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
              127.0.0.1; 36 tasks in 12 templates in tasks/backoffice.json (one expert per template), judged
              at the end by WebArena-style evaluators (database, URL, page text, answer). Seeded databases are cached in
              ~/.cache/mag/backoffice/. Example:
              python collect.py --suite backoffice --tasks all --episodes 5 --workers 2 --out data/backoffice
  webarena    WebArena-format task files (task_id, intent, start_url, eval: string_match / url_match /
              program_html) run against sites the user serves elsewhere; --sites NAME=URL maps the
              placeholder __NAME__ and navigation stays on those origins. No experts (random, human, models):
              python collect.py --suite webarena --task-file test.json --sites shopping=http://host:7770 \
                  --sites gitlab=http://host:8023 --policy human --out data/webarena

Left out on purpose: no selenium/BrowserGym layer (plain Playwright is faster and smaller); no
video recording; the model and API policies arrive with evaluate.py and train_sft.py, through
the same `act(obs) -> text` interface as the policies below.
"""
import argparse
import asyncio
import base64
import contextlib
import datetime
import functools
import glob
import hashlib
import html
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
    p.add_argument("--suite", default="miniwob", choices=["miniwob", "backoffice", "webarena"], help="environment suite")
    p.add_argument("--tasks", default="all", help="comma-separated task names, or 'all' (every task of the suite; MiniWoB++: those with an expert)")
    p.add_argument("--task-file", default=None, help="webarena: a WebArena-format config JSON (a list of tasks or one task)")
    p.add_argument("--sites", action="append", default=[], help="webarena: NAME=URL maps the placeholder __NAME__ (repeat, or comma-separate)")
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

    def all_tasks(self):
        """The tasks with an expert: the suite has ~125, most of them not written for here."""
        return sorted(t for t in EXPERTS if self.has_task(t))

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

    def detach(self, ctx):
        """Nothing to give back."""

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


@functools.cache
def backoffice_tasks():
    """tasks/backoffice.json without its "_about" notes (read once: the experts use it too)."""
    with open(BACKOFFICE_TASKS) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


class Backoffice:
    suite = "backoffice"
    viewport, scale = BACKOFFICE_VIEWPORT, 1

    def __init__(self):
        self.tasks = backoffice_tasks()
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

    def all_tasks(self):
        return sorted(self.tasks)

    async def attach(self, ctx):
        """Give a new browser context its server (reusing one whose context has closed) before new_page
        makes the context's allow-list from self.origins. Started lazily by reset()."""
        if self.idle:
            server = self.idle.pop()
        else:
            server = DjangoServer(os.path.join(self.tmp, f"served-{len(self.origins)}.sqlite3"))
            self.origins.append(server.base)
        self.servers[ctx] = server
        ctx.on("close", lambda _: self.detach(ctx))

    def detach(self, ctx):
        """The context's server goes back to the idle pool (idempotent). The worker calls it when it
        drops a context, because a close that failed or timed out never fires the close event."""
        server = self.servers.pop(ctx, None)
        if server is not None:
            self.idle.append(server)

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


# ----------------------------------------------------------------------------------------------
# WebArena-format task files, run against servers the user runs elsewhere (WebArena's Docker sites,
# or any site). A task is WebArena's config object: task_id, intent, start_url with site placeholders
# (__SHOPPING__, __GITLAB__, ...), eval.eval_types among string_match / url_match / program_html.
# `--sites shopping=http://host:7770` maps __SHOPPING__; navigation stays on the mapped origins.
# The evaluators follow web-arena-x/webarena's evaluation_harness/evaluators.py: answers and page
# contents are compared after stripping, unquoting and lowercasing; url_match compares the path
# (GOLD in PRED: the reference's path is contained in the final one; EXACT: equal) and requires each
# reference query value to be present. Left out, with a clear error at load time: fuzzy_match (an
# LLM judge), program_html locators and URLs that call WebArena's Python helpers ("func:..."),
# several start tabs (" |AND| "), localStorage in a storage_state file (its cookies are loaded).

WEBARENA_VIEWPORT = (1280, 720)   # WebArena's own default viewport
WEBARENA_EVAL_TYPES = {"string_match", "url_match", "program_html"}
PLACEHOLDER_RX = re.compile(r"__([A-Z][A-Z0-9_]*?)__")


def parse_sites(specs):
    """['shopping=http://127.0.0.1:7770', 'a=..,b=..'] -> {"__SHOPPING__": "http://127.0.0.1:7770", ...}."""
    sites = {}
    for spec in (s for arg in specs or [] for s in arg.split(",") if s.strip()):
        name, sep, url = spec.partition("=")
        parts = urllib.parse.urlsplit(url.strip())
        if not sep or not name.strip() or parts.scheme not in ("http", "https") or not parts.netloc:
            raise SystemExit(f"--sites {spec!r}: expected NAME=http(s)://host[:port][/path]")
        sites[f"__{name.strip().upper()}__"] = url.strip().rstrip("/")
    return sites


def origin(url):
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def clean_answer(s):
    """WebArena's normalisation of answers and references: strip, drop one pair of quotes, lowercase."""
    s = str(s).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s.lower()


def must_include(ref, got, tokenize=False):
    """ref in got after cleaning; a lone one-character reference ("4") must be a whole token, so "14"
    does not contain it (WebArena tokenizes with nltk's word_tokenize; a regex word split stands in
    for it here, so no nltk dependency)."""
    ref, got = clean_answer(ref), clean_answer(got)
    if tokenize and len(ref) == 1:
        return ref in re.findall(r"\w+(?:[.'-]\w+)*|[^\w\s]", got)
    return ref in got


def url_matches(got, refs, rule):
    """url_match: any of the ` |OR| `-separated references; path by the rule, every reference query
    value present in the final URL's query."""
    got_parts = urllib.parse.urlsplit(got.strip().rstrip("/"))
    got_query = urllib.parse.parse_qs(got_parts.query)
    for ref in refs.split(" |OR| "):
        ref_parts = urllib.parse.urlsplit(ref.strip().rstrip("/"))
        ref_base, got_base = ref_parts.netloc + ref_parts.path, got_parts.netloc + got_parts.path
        path_ok = ref_base == got_base if rule == "EXACT" else ref_base in got_base
        query_ok = all(set(v) <= set(got_query.get(k, [])) for k, v in urllib.parse.parse_qs(ref_parts.query).items())
        if path_ok and query_ok:
            return True
    return False


async def page_content(page, target):
    """The text a program_html target checks: its locator's value on its page (html-unescaped)."""
    if target["url"] != "last":
        await page.goto(target["url"], wait_until="load")
    locator = target.get("locator") or ""
    if not locator.strip():
        content = await page.content()   # WebArena: an empty locator means the whole page's HTML
    else:
        from playwright.async_api import Error as PlaywrightError
        try:
            content = await page.evaluate(f"() => {locator}")
        except PlaywrightError:   # the element is not on this page (querySelector gave null): nothing found
            content = ""
    return html.unescape("" if content is None else str(content))


async def webarena_check(ev, page, answer):
    """Every eval type of one task (placeholders already filled) -> list of (type, passed)."""
    results = []
    for kind in ev["eval_types"]:
        if kind == "string_match":
            refs, got = ev["reference_answers"], answer or ""
            ok = True
            if "exact_match" in refs:
                ok &= clean_answer(refs["exact_match"]) == clean_answer(got)
            if "must_include" in refs:
                items = refs["must_include"]
                ok &= all(must_include(r, got, tokenize=len(items) == 1) for r in items)
            results.append((kind, bool(ok) and answer is not None))
        elif kind == "url_match":
            results.append((kind, url_matches(page.url, ev["reference_url"], ev.get("url_note") or "GOLD in PRED")))
        else:   # program_html: every target, every required content
            ok = True
            for target in ev["program_html"]:
                content = clean_answer(await page_content(page, target))
                req = target["required_contents"]
                if "exact_match" in req:
                    ok &= clean_answer(req["exact_match"]) == content
                for item in req.get("must_include", []):
                    ok &= any(clean_answer(alt) in content for alt in item.split(" |OR| "))
            results.append((kind, bool(ok)))
    return results


def fill_sites(x, sites, where):
    """Replace the site placeholders in every string of x; an unmapped one is an error naming where."""
    if isinstance(x, dict):
        return {k: fill_sites(v, sites, f"{where}.{k}") for k, v in x.items()}
    if isinstance(x, list):
        return [fill_sites(v, sites, f"{where}[{i}]") for i, v in enumerate(x)]
    if not isinstance(x, str):
        return x
    for name in PLACEHOLDER_RX.findall(x):
        key = f"__{name}__"
        if key not in sites:
            raise SystemExit(f"{where}: site placeholder {key} has no mapping: pass --sites {name.lower()}=URL "
                             f"(mapped: {', '.join(sorted(sites)) or 'none'})")
        x = x.replace(key, sites[key])
    return x


def check_webarena_task(t, where):
    """The config fields this suite reads, each checked; an unsupported feature is named."""
    def need(cond, msg):
        if not cond:
            raise SystemExit(f"{where}: {msg}")
    need(isinstance(t, dict), "a task must be a JSON object")
    for field, typ in (("task_id", (int, str)), ("intent", str), ("start_url", str), ("eval", dict)):
        need(isinstance(t.get(field), typ), f"missing or invalid field {field!r}")
    need(" |AND| " not in t["start_url"], "several start tabs (' |AND| ' in start_url) are not supported")
    ev = t["eval"]
    types = ev.get("eval_types")
    need(isinstance(types, list) and types, "eval.eval_types must be a non-empty list")
    need(set(types) <= WEBARENA_EVAL_TYPES, f"unknown eval type(s) {sorted(set(types) - WEBARENA_EVAL_TYPES)}; "
         f"supported: {sorted(WEBARENA_EVAL_TYPES)}")
    if "string_match" in types:
        refs = ev.get("reference_answers")
        need(isinstance(refs, dict) and refs, "string_match needs eval.reference_answers")
        need("fuzzy_match" not in refs, "reference_answers.fuzzy_match needs WebArena's LLM judge: not supported "
             "(rewrite it as exact_match or must_include)")
        need(set(refs) <= {"exact_match", "must_include"}, f"unknown reference_answers key(s) {sorted(set(refs) - {'exact_match', 'must_include'})}")
        need(isinstance(refs.get("must_include", []), list), "reference_answers.must_include must be a list")
    if "url_match" in types:
        need(isinstance(ev.get("reference_url"), str) and ev["reference_url"], "url_match needs eval.reference_url")
        need((ev.get("url_note") or "GOLD in PRED") in ("GOLD in PRED", "EXACT"),
             f"url_note {ev.get('url_note')!r}: supported are 'GOLD in PRED' and 'EXACT'")
    if "program_html" in types:
        targets = ev.get("program_html")
        need(isinstance(targets, list) and targets, "program_html needs a non-empty eval.program_html list")
        for i, target in enumerate(targets):
            need(isinstance(target, dict) and isinstance(target.get("url"), str), f"program_html[{i}] needs a url ('last' or a URL)")
            need(not target["url"].startswith("func:") and not (target.get("locator") or "").startswith("func:"),
                 f"program_html[{i}]: 'func:' helpers call WebArena's Python code: not supported")
            need(not target.get("prep_actions"), f"program_html[{i}]: prep_actions are not supported")
            req = target.get("required_contents")
            need(isinstance(req, dict) and req and set(req) <= {"exact_match", "must_include"},
                 f"program_html[{i}].required_contents needs exact_match and/or must_include")


def load_webarena_tasks(path, sites):
    """task_id -> task (placeholders filled, checked), from a file holding a list or one object."""
    if not path:
        raise SystemExit("--suite webarena needs --task-file (WebArena config JSON: a list of tasks or one task)")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise SystemExit(f"--task-file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"--task-file {path}: not valid JSON: {e}") from None
    tasks = {}
    for i, t in enumerate(data if isinstance(data, list) else [data]):
        where = f"{path}: task #{i}" + (f" (task_id {t.get('task_id')})" if isinstance(t, dict) and "task_id" in t else "")
        check_webarena_task(t, where)
        name = str(t["task_id"])
        if name in tasks:
            raise SystemExit(f"{where}: task_id {name} appears twice")
        t = fill_sites(t, sites, where)
        outside = [u for u in [t["start_url"]] + [p["url"] for p in t["eval"].get("program_html", []) if p["url"] != "last"]
                   if origin(u) not in {origin(s) for s in sites.values()}]
        if outside:
            raise SystemExit(f"{where}: {outside[0]} is on none of the --sites origins (navigation is allowed only there)")
        if t.get("require_login") or t.get("storage_state"):
            t["storage_state"] = resolve_storage_state(t, os.path.dirname(os.path.abspath(path)), where)
        tasks[name] = t
    return tasks


def resolve_storage_state(t, base, where):
    """The cookies a logged-in task starts with: WebArena's storage_state file (auto_login.py writes them)."""
    state = t.get("storage_state")
    if not state:
        raise SystemExit(f"{where}: require_login is set but there is no storage_state file to log in with")
    path = state if os.path.isabs(state) else os.path.join(base, state)
    if not os.path.exists(path):
        raise SystemExit(f"{where}: storage_state {state!r} not found (looked at {path}); "
                         "make it with WebArena's browser_env/auto_login.py against your servers")
    with open(path) as f:
        return json.load(f).get("cookies", [])


class WebArena:
    suite = "webarena"
    viewport, scale = WEBARENA_VIEWPORT, 1

    def __init__(self, task_file, site_specs):
        self.sites = parse_sites(site_specs)
        if not self.sites:
            raise SystemExit("--suite webarena needs --sites NAME=URL for each site its tasks use (e.g. shopping=http://host:7770)")
        self.tasks = load_webarena_tasks(task_file, self.sites)
        self.origins = sorted({origin(u) for u in self.sites.values()})

    def close(self):
        """The servers are the user's: nothing to stop."""

    def url(self, task, base=None):
        return self.tasks[task]["start_url"]

    def public_url(self, url):
        """Each site's address back to its placeholder, the longest first (one may prefix another)."""
        for key, base in sorted(self.sites.items(), key=lambda kv: -len(kv[1])):
            url = url.replace(base, key)
        return url

    def has_task(self, task):
        return task in self.tasks

    def all_tasks(self):
        return list(self.tasks)   # the file's order

    async def attach(self, ctx):
        """Nothing per context: the sites are shared servers."""

    def detach(self, ctx):
        """Nothing to give back."""

    async def reset(self, page, task, seed):
        """No cookies but the task's storage_state ones, then the start page. The seed changes nothing:
        the sites' data is whatever the user's servers hold (WebArena resets them with its own scripts)."""
        t = self.tasks[task]
        await page.context.clear_cookies()
        if t.get("storage_state"):
            await page.context.add_cookies(t["storage_state"])
        await page.goto(t["start_url"], wait_until="load")
        return t["intent"], None

    async def status(self, page):
        return False, 0.0, False

    async def evaluate(self, page, task, params, answer):
        passed = await webarena_check(self.tasks[task]["eval"], page, answer)
        ok = all(p for _, p in passed)
        return float(ok), ok


SUITES = {"miniwob": MiniWoB, "backoffice": Backoffice, "webarena": WebArena}


def make_env(args):
    """The suite of --suite; a WebArena-format one is read from --task-file with --sites."""
    if args.suite == "webarena":
        return WebArena(args.task_file, args.sites)
    return SUITES[args.suite]()


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
    try:
        page = await _open_page(ctx, env, blocked)
    except BaseException:
        env.detach(ctx)
        raise
    return ctx, page


async def _open_page(ctx, env, blocked):
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
    return page


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


LEAVING_MS = 500  # how long a submit or a followed link may take to start its navigation


async def settle(page, quiet_ms, cap_ms):
    """Wait until the DOM has been quiet for quiet_ms, no short timer is pending, no request is in
    flight and the page is not being left (a submit or a followed link whose navigation has not
    started yet: see metrics.INIT_JS), capped at cap_ms.

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
        # a page that says it is being left but shows no navigation after LEAVING_MS is staying
        # (a navigation the browser or our origin guard refused)
        leaving = s.get("leaving") and waited < LEAVING_MS
        busy = s["pending"] or leaving or getattr(page, "mag_inflight", None)
        if (not busy and s["quiet"] >= quiet_ms) or waited >= cap_ms:
            return waited / 1000
        need = 15 if busy else quiet_ms - s["quiet"]
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
            # a listbox (<select multiple>) reports the option under the point: its select is meant
            handle = await page.evaluate_handle("([x, y]) => { const e = document.elementFromPoint(x, y);"
                                                " return e && e.closest('select') || e; }", [x, y])
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
  let top = 0, bottom = innerHeight;               // viewport, then every clipping ancestor
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
# Back-office experts: log in, then work through the admin like a person who knows it. One expert
# per template (tasks/backoffice.json groups its tasks by `template`); it gets the task's name for
# the variant's route and fields. They read the task's parameters back out of the instruction (the
# task's own template turned into a regex), find rows by their cell texts and options by their
# labels, and scroll a target below the fold into view first.

BACKOFFICE_USER, BACKOFFICE_PASSWORD = "admin", "admin-pass-2026"   # seeded by envs/backoffice


def parse_instruction(task, instruction):
    """The parameters in an instruction, by matching it against its task's template (a parameter
    used twice must have the same value both times)."""
    seen = set()

    def group(m):
        name = m[1]
        if name in seen:
            return f"(?P={name})"
        seen.add(name)
        return f"(?P<{name}>.+?)"
    rx = re.sub(r"\\\{(\w+)\\\}", group, re.escape(backoffice_tasks()[task]["instruction"]))
    m = re.fullmatch(rx, instruction)
    if m is None:
        raise ExpertError(f"{task}: the instruction does not match its template: {instruction!r}")
    return m.groupdict()


async def bo_do(page, op, css, text=None, nth=0, value=None):
    """Yield wheel scrolls until the target's centre is inside the window, then the move itself."""
    async for d in reveal(page, css, text, nth, limit=10):
        yield d
    yield Do(op, css=css, text=text, nth=nth, value=value)


# The changelist rows as {field-name: cell text}, in order (the admin gives each cell a field-NAME class).
_JS_ROWS = """() => [...document.querySelectorAll('#result_list tbody tr')].map(tr => Object.fromEntries(
    [...tr.querySelectorAll('[class*=field-]')].map(c => [[...c.classList].find(k => k.startsWith('field-')).slice(6),
                                                         c.textContent.replace(/\\s+/g, ' ').trim()])))"""


async def bo_rows(page):
    return await page.evaluate(_JS_ROWS)


def row_index(rows, **cells):
    """The first changelist row whose cells have these texts."""
    k = next((k for k, r in enumerate(rows) if all(r.get(f) == v for f, v in cells.items())), None)
    if k is None:
        raise ExpertError(f"no row with {cells} among {len(rows)} rows")
    return k


async def bo_login(page):
    """The first page of every episode is the login form (episodes start logged out)."""
    yield Do("type", css="#id_username", value=BACKOFFICE_USER)
    yield Do("type", css="#id_password", value=BACKOFFICE_PASSWORD)
    yield Do("click", css="#login-form input[type=submit]")


async def bo_open_list(page, model, search=None):
    """From anywhere: log in, open a model's list from the index, search it."""
    async for d in bo_login(page):
        yield d
    yield Do("click", css="#content-main th a", text=model)
    if search is not None:
        yield Do("type", css="#searchbar", value=search)
        yield Do("press", value="Enter")


async def bo_open_add_form(page, model):
    """Log in, then the index's Add link of a model (the model's class name, lowercased)."""
    async for d in bo_login(page):
        yield d
    yield Do("click", css=f"#content-main tr.model-{model} a.addlink")


async def bo_filter(page, title, choice):
    """One choice of a list filter in the sidebar ("By status: Open"); choices like "No" repeat across filters."""
    async for d in bo_do(page, "click", f'#changelist-filter details[data-filter-title="{title}"] a', text=choice):
        yield d


async def bo_admin_action(page, rows, action):
    """Tick the changelist rows (by index), choose the admin action, press Go."""
    for k in rows:
        async for d in bo_do(page, "click", "#result_list input.action-select", nth=k):
            yield d
    async for d in bo_do(page, "select", "select[name=action]", value=action):
        yield d
    yield Do("click", css="button[name=index]")


async def bo_save(page, name="_save"):
    async for d in bo_do(page, "click", f"input[name={name}]"):
        yield d


async def bo_confirm_delete(page):
    """The admin's "Are you sure?" page: its form's submit button is "Yes, I'm sure"."""
    async for d in bo_do(page, "click", "#content form input[type=submit]"):
        yield d


async def bo_choose(page, field, label, remove=False):
    """Move one option across a filter_horizontal widget (groups, permissions): narrow the
    'available' list with its filter box, select the option whose label is `label` or ends with
    ' | label' (permissions read "Shop | ticket | Can delete ticket"), press the arrow button."""
    src, button = ("to", "remove") if remove else ("from", "add")
    if not remove:   # the chosen list is short; the available one can be long
        async for d in bo_do(page, "type", f"#id_{field}_input", value=label):
            yield d
    options = await page.evaluate("(css) => [...document.querySelectorAll(css)].map(o => o.textContent)",
                                  f"#id_{field}_{src} option")
    full = next((o for o in options if o == label or o.endswith(" | " + label)), None)
    if full is None:
        raise ExpertError(f"no option {label!r} in #id_{field}_{src}")
    async for d in bo_do(page, "select", f"#id_{field}_{src}", value=full):
        yield d
    async for d in bo_do(page, "click", f"#id_{field}_{button}"):
        yield d


# edit-customer: which form field gets which parameter (None: tick the checkbox).
CUSTOMER_EDITS = {
    "update-customer-contact": [("email", "new_email"), ("phone", "new_phone")],
    "update-customer-email": [("email", "new_email")],
    "make-customer-vip": [("is_vip", None)],
    "move-customer": [("city", "new_city"), ("company", "new_company")],
}


async def solve_edit_customer(page, instruction, task):
    p = parse_instruction(task, instruction)
    async for d in bo_open_list(page, "Customers", p["name"]):
        yield d
    yield Do("click", css="#result_list th.field-name a", text=p["name"])
    for field, param in CUSTOMER_EDITS[task]:
        if param is None:
            async for d in bo_do(page, "click", f"#id_{field}"):
                yield d
        else:
            async for d in bo_do(page, "type", f"#id_{field}", value=p[param]):
                yield d
    async for d in bo_save(page):
        yield d


async def bo_date_drill(page, day):
    """Drill the changelist's date hierarchy down to a day (or a month, when `day` is YYYY-MM). The
    admin skips the levels that have one choice only, so each level is clicked only when it is there."""
    date = datetime.date.fromisoformat(day if len(day) > 7 else day + "-01")
    titles = [str(date.year), f"{_MONTHS[date.month - 1]} {date.year}"]
    if len(day) > 7:
        titles.append(f"{_MONTHS[date.month - 1]} {date.day}")
    for title in titles:
        links = await page.evaluate(js_fn("t", "return [...document.querySelectorAll('nav.toplinks a')]"
                                             ".filter(a => norm(a.textContent) === t).length;"), title)
        if links:
            yield Do("click", css="nav.toplinks a", text=title)


async def solve_pay_orders(page, instruction, task):
    """Find the orders (the customer's by search, or a day's by the date hierarchy), filter to unpaid,
    tick each that is not cancelled, run the action."""
    p = parse_instruction(task, instruction)
    async for d in bo_open_list(page, "Orders", p.get("customer")):
        yield d
    if "day" in p:
        async for d in bo_date_drill(page, p["day"]):
            yield d
    async for d in bo_filter(page, "paid", "No"):
        yield d
    rows = await bo_rows(page)
    # a search also matches other customers' names, emails and notes: keep the customer's own rows
    ticks = [k for k, row in enumerate(rows) if row["status"] != "Cancelled" and ("customer" not in p or row["customer"] == p["customer"])]
    async for d in bo_admin_action(page, ticks, "Mark selected orders as paid"):
        yield d


async def solve_close_ticket(page, instruction, task):
    p = parse_instruction(task, instruction)
    if task == "close-oldest-ticket":   # filter by assignee and status, sort oldest first, take the top row
        async for d in bo_open_list(page, "Tickets"):
            yield d
        async for d in bo_filter(page, "assigned to", p["username"]):
            yield d
        async for d in bo_filter(page, "status", "Open"):
            yield d
        yield Do("click", css="#result_list th.column-created div.text a")   # newest first -> oldest first
        if "ascending" not in await page.evaluate("() => document.querySelector('#result_list th.column-created').className"):
            raise ExpertError("the Created column did not sort ascending")
        k = 0
    else:
        async for d in bo_open_list(page, "Tickets", p["customer"]):
            yield d
        k = row_index(await bo_rows(page), subject=p["subject"], customer=p["customer"], status="Open")
    if task == "close-ticket-form":
        ticket_id = (await bo_rows(page))[k]["id"]
        yield Do("click", css="#result_list th.field-id a", text=ticket_id)
        async for d in bo_do(page, "select", "#id_status", value="Closed"):
            yield d
        async for d in bo_save(page):
            yield d
    else:
        async for d in bo_admin_action(page, [k], "Close selected tickets"):
            yield d


async def solve_product_active(page, instruction, task):
    """Bulk action on the searched row; or the product form, found by search (deactivate) or by the
    Active filter (reactivate), with its Active box toggled."""
    p = parse_instruction(task, instruction)
    if task == "reactivate-product":
        async for d in bo_open_list(page, "Products"):
            yield d
        async for d in bo_filter(page, "active", "No"):
            yield d
    else:
        async for d in bo_open_list(page, "Products", p.get("sku", p["product"])):
            yield d
    rows = await bo_rows(page)
    k = row_index(rows, **({"sku": p["sku"]} if "sku" in p else {"name": p["product"]}))
    if task == "deactivate-product":
        async for d in bo_admin_action(page, [k], "Deactivate selected products"):
            yield d
        return
    yield Do("click", css="#result_list th.field-sku a", text=rows[k]["sku"])
    async for d in bo_do(page, "click", "#id_active"):
        yield d
    async for d in bo_save(page):
        yield d


async def solve_answer(page, instruction, task):
    """Read the answer off the filtered list: a count of rows, or a cell."""
    p = parse_instruction(task, instruction)
    if task == "count-open-tickets":
        async for d in bo_open_list(page, "Tickets"):
            yield d
        async for d in bo_filter(page, "assigned to", p["username"]):
            yield d
        async for d in bo_filter(page, "status", "Open"):
            yield d
        yield Do("stop", value=str(len(await bo_rows(page))))
        return
    async for d in bo_open_list(page, "Orders", p.get("customer") or p.get("id")):
        yield d
    if task == "order-total":   # the search also matches ids that contain this one
        rows = await bo_rows(page)
        yield Do("stop", value=rows[row_index(rows, id=p["id"])]["total"])
        return
    if task == "count-orders-in-month":
        month = _MONTHS.index(p["month"]) + 1
        async for d in bo_date_drill(page, f"{p['year']}-{month:02d}"):
            yield d
        async for d in bo_filter(page, "status", p["status_label"]):
            yield d
        yield Do("stop", value=str(len(await bo_rows(page))))
        return
    async for d in bo_filter(page, "paid", "No"):   # count-unpaid-orders
        yield d
    yield Do("stop", value=str(sum(r["customer"] == p["customer"] for r in await bo_rows(page))))


async def solve_staff_user(page, instruction, task):
    """New users: the add form (username, password twice), then the change form it leads to (names,
    Staff status, groups). Existing users: search, open, move the group across the widget."""
    p = parse_instruction(task, instruction)
    if task.startswith("create-"):
        async for d in bo_open_add_form(page, "user"):
            yield d
        yield Do("type", css="#id_username", value=p["username"])
        yield Do("type", css="#id_password1", value=p["password"])
        yield Do("type", css="#id_password2", value=p["password"])
        async for d in bo_save(page):
            yield d
        for field in ("first", "last", "email"):
            if field in p:
                css = f"#id_{field}_name" if field != "email" else "#id_email"
                async for d in bo_do(page, "type", css, value=p[field]):
                    yield d
        async for d in bo_do(page, "click", "#id_is_staff"):
            yield d
    else:
        async for d in bo_open_list(page, "Users", p["username"]):
            yield d
        yield Do("click", css="#result_list th.field-username a", text=p["username"])
    async for d in bo_choose(page, "groups", p["group"], remove=task.startswith("remove-")):
        yield d
    async for d in bo_save(page):
        yield d


async def solve_group_permissions(page, instruction, task):
    p = parse_instruction(task, instruction)
    if task == "create-group":
        async for d in bo_open_add_form(page, "group"):
            yield d
        yield Do("type", css="#id_name", value=p["group"])
        perms = [f"Can view {p['model']}", f"Can change {p['model']}"]
    else:
        async for d in bo_open_list(page, "Groups"):
            yield d
        yield Do("click", css="#result_list th a", text=p["group"])
        perms = [p["perm"]]
    for perm in perms:
        async for d in bo_choose(page, "permissions", perm, remove=task.startswith("revoke-")):
            yield d
    async for d in bo_save(page):
        yield d


# The order form's inline rows: formset prefix ("lines-0"), the chosen product's label ("Name (SKU)"),
# whether the row is a saved line. The hidden template row (empty-form) is left out.
_JS_LINES = """() => [...document.querySelectorAll('#lines-group tr.form-row:not(.empty-form)')].map(tr => {
    const opt = tr.querySelector('select[name$="-product"] option:checked');
    return {prefix: tr.id, product: opt && opt.value ? opt.textContent.trim() : '', saved: tr.classList.contains('has_original')};
})"""


async def bo_open_order(page, order_id):
    async for d in bo_open_list(page, "Orders", order_id):
        yield d
    yield Do("click", css="#result_list th.field-id a", text=order_id)   # the search also matches ids containing it


async def solve_order_lines(page, instruction, task):
    """The inline: a new line in the empty extra row (the product through its autocomplete box), a
    quantity typed into a saved line, or a saved line's Delete box; then save the order."""
    p = parse_instruction(task, instruction)
    async for d in bo_open_order(page, p["order_id"]):
        yield d
    lines = await page.evaluate(_JS_LINES)
    if task == "add-order-line":
        row = next(r for r in lines if not r["saved"] and not r["product"])["prefix"]
        async for d in bo_do(page, "click", f"#{row} .select2-selection"):
            yield d
        yield Do("type", css=".select2-container--open .select2-search__field", value=p["sku"])
        yield Do("click", css=".select2-container--open .select2-results__option", text=f"{p['product']} ({p['sku']})")
        async for d in bo_do(page, "type", f"#id_{row}-quantity", value=p["qty"]):
            yield d
    else:
        row = next((r["prefix"] for r in lines if r["saved"] and r["product"].startswith(p["product"] + " (")), None)
        if row is None:
            raise ExpertError(f"order #{p['order_id']} has no line of {p['product']!r}")
        if task == "remove-order-line":
            async for d in bo_do(page, "click", f"#id_{row}-DELETE"):
                yield d
        else:
            async for d in bo_do(page, "type", f"#id_{row}-quantity", value=p["qty"]):
                yield d
    async for d in bo_save(page):
        yield d


async def solve_delete(page, instruction, task):
    """A never-sold product from its change form's Delete link; a customer, or a customer's closed
    tickets, with the bulk delete action. Both end on the confirmation page."""
    p = parse_instruction(task, instruction)
    if task == "delete-product":
        async for d in bo_open_list(page, "Products", p["sku"]):
            yield d
        yield Do("click", css="#result_list th.field-sku a", text=p["sku"])
        async for d in bo_do(page, "click", "a.deletelink"):
            yield d
    elif task == "delete-customer":
        async for d in bo_open_list(page, "Customers", p["name"]):
            yield d
        async for d in bo_admin_action(page, [row_index(await bo_rows(page), name=p["name"])], "Delete selected customers"):
            yield d
    else:
        async for d in bo_open_list(page, "Tickets", p["customer"]):
            yield d
        async for d in bo_filter(page, "status", "Closed"):
            yield d
        ticks = [k for k, r in enumerate(await bo_rows(page)) if r["customer"] == p["customer"]]
        async for d in bo_admin_action(page, ticks, "Delete selected tickets"):
            yield d
    async for d in bo_confirm_delete(page):
        yield d


async def solve_order_status(page, instruction, task):
    """Set the status and save. Shipping an unpaid order is refused ("A shipped order must be paid."):
    then tick Paid -- the instruction says it was paid -- and save again."""
    p = parse_instruction(task, instruction)
    async for d in bo_open_order(page, p["order_id"]):
        yield d
    async for d in bo_do(page, "select", "#id_status", value="Shipped" if task == "ship-order" else "Cancelled"):
        yield d
    async for d in bo_save(page):
        yield d
    if await page.locator(".errorlist.nonfield").count():
        async for d in bo_do(page, "click", "#id_paid"):
            yield d
        async for d in bo_save(page):
            yield d


async def solve_product_stock_price(page, instruction, task):
    p = parse_instruction(task, instruction)
    async for d in bo_open_list(page, "Products", p["sku"]):
        yield d
    k = row_index(await bo_rows(page), sku=p["sku"])
    if task == "set-price-in-list":   # the list's editable column, then the list's own Save
        async for d in bo_do(page, "type", "#result_list td.field-price input", nth=k, value=p["new_price"]):
            yield d
        async for d in bo_save(page):
            yield d
        return
    yield Do("click", css="#result_list th.field-sku a", text=p["sku"])
    stock = int(await page.input_value("#id_stock"))   # read what is there, add the delivery
    async for d in bo_do(page, "type", "#id_stock", value=str(stock + int(p["n"]))):
        yield d
    async for d in bo_save(page):
        yield d


async def solve_ticket_edit(page, instruction, task):
    """Open the ticket (by search: its row; by filter: the assignee's newest open one) and set a select."""
    p = parse_instruction(task, instruction)
    if task == "hand-over-ticket":
        async for d in bo_open_list(page, "Tickets"):
            yield d
        async for d in bo_filter(page, "assigned to", p["old"]):
            yield d
        async for d in bo_filter(page, "status", "Open"):
            yield d
        k = 0   # the list's own order: newest first
    else:
        async for d in bo_open_list(page, "Tickets", p["customer"]):
            yield d
        k = row_index(await bo_rows(page), subject=p["subject"], customer=p["customer"], status="Open")
    yield Do("click", css="#result_list th.field-id a", text=(await bo_rows(page))[k]["id"])
    if task == "escalate-ticket":
        async for d in bo_do(page, "select", "#id_priority", value="High"):
            yield d
    else:
        async for d in bo_do(page, "select", "#id_assigned_to", value=p["new"]):
            yield d
    async for d in bo_save(page):
        yield d


BACKOFFICE_EXPERTS = {   # template -> expert(page, instruction, task)
    "edit-customer": solve_edit_customer,
    "pay-orders": solve_pay_orders,
    "close-ticket": solve_close_ticket,
    "product-active": solve_product_active,
    "answer": solve_answer,
    "staff-user": solve_staff_user,
    "group-permissions": solve_group_permissions,
    "order-lines": solve_order_lines,
    "delete": solve_delete,
    "order-status": solve_order_status,
    "product-stock-price": solve_product_stock_price,
    "ticket-edit": solve_ticket_edit,
}


def find_expert(task):
    """MiniWoB's experts by task; a back-office task's by its template (given the task's name)."""
    if task in EXPERTS:
        return EXPERTS[task]
    spec = backoffice_tasks().get(task)
    if spec is not None and spec.get("template") in BACKOFFICE_EXPERTS:
        return functools.partial(BACKOFFICE_EXPERTS[spec["template"]], task=task)
    return None


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
                await asyncio.wait_for(execute(page, action, env), args.action_timeout)
            except ActionError as e:
                step["exec_error"] = str(e)
        await settle(page, args.settle_quiet_ms, args.settle_cap_ms)
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
                if ctx is not None:
                    env.detach(ctx)
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
    """The task list, checked before any browser starts: unknown tasks and missing experts fail here.
    'all' is every task of the suite (MiniWoB++: every task that has an expert)."""
    tasks = env.all_tasks() if spec == "all" else [t.strip() for t in spec.split(",") if t.strip()]
    missing = [t for t in tasks if not env.has_task(t)]
    if missing:
        raise SystemExit(f"unknown {env.suite} task(s): {', '.join(missing)}")
    if policy == "expert" and env.suite == "webarena":
        raise SystemExit("WebArena-format tasks have no experts: use --policy random or human (a model: evaluate.py)")
    no_expert = [t for t in tasks if find_expert(t) is None]
    if policy == "expert" and no_expert:
        raise SystemExit(f"no expert for {env.suite} task(s) {', '.join(no_expert)}")
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
    env = make_env(args)
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
