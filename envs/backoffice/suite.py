"""envs/backoffice/suite.py -- the back office: Django's real admin (the app in envs/backoffice/) over
a seeded SQLite file. Every browser context (= worker) gets its own `manage.py runserver` on its own
port and its own database file, so parallel episodes never see each other's changes. Tasks are
templates in tasks/backoffice.json; the seed picks their parameters from the seeded database, and
evaluators judge the final state when the episode ends: a query on the database, or WebArena's own
(url_match, program_html, string_match; envs/webarena.py). Its experts: envs/backoffice/experts.py.
"""
import asyncio
import contextlib
import functools
import glob
import hashlib
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
import time
import urllib.request

from envs import Environment, webarena

APP_DIR = os.path.dirname(os.path.abspath(__file__))
TASKS_FILE = os.path.join(os.path.dirname(os.path.dirname(APP_DIR)), "tasks", "backoffice.json")
HARNESS_FILES = ("suite.py", "experts.py")   # beside the app, not part of it
VIEWPORT = (1280, 800)   # CSS px, scale 1: a laptop screen, where the admin lays out as designed
PLACEHOLDER = "__BACKOFFICE__"
SERVER_READY_S = 30      # runserver imports Django and runs its checks: ~1 s idle, more on a busy machine


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
            cwd=APP_DIR, env={**os.environ, "MAG_BACKOFFICE_DB": self.db}, stdout=log,
            stderr=subprocess.STDOUT)
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
    """A hash of the app's code: cached databases are rebuilt when the models or the seeding change
    (not when the suite or its experts do: they build no database)."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(APP_DIR, "**", "*.py"), recursive=True)):
        if os.path.dirname(path) == APP_DIR and os.path.basename(path) in HARNESS_FILES:
            continue
        with open(path, "rb") as f:
            h.update(path[len(APP_DIR):].encode() + f.read())
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


@functools.cache
def load_tasks():
    """tasks/backoffice.json without its "_about" notes (read once: the experts use it too)."""
    with open(TASKS_FILE) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


class Backoffice(Environment):
    suite = "backoffice"
    viewport, scale = VIEWPORT, 1

    def __init__(self):
        self.tasks = load_tasks()
        cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        self.cache = os.path.join(cache_home, "mag", "backoffice", backoffice_version())
        self.tmp = tempfile.mkdtemp(prefix="mag-backoffice-")   # the served files and server logs
        self.servers, self.idle, self.origins = {}, [], []      # context -> server; servers of closed contexts; bases
        self.build_lock = asyncio.Lock()                       # one build at a time (and never the same seed twice)

    def close(self):
        for server in self.idle + list(self.servers.values()):
            server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, task, base=PLACEHOLDER):
        return base + self.tasks[task]["start_url"]

    def public_url(self, url):
        """The server's address replaced by a placeholder (WebArena style): ports differ between runs."""
        for base in self.origins:
            url = url.replace(base, PLACEHOLDER)
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

    def expert(self, task):
        """The expert of the task's template, told which variant it plays; looked up per call (tests swap
        experts in). Imported here: the experts read this module's task table."""
        from envs.backoffice.experts import EXPERTS
        template = self.tasks.get(task, {}).get("template")
        return functools.partial(EXPERTS[template], task=task) if template in EXPERTS else None

    async def evaluate(self, page, task, params, answer):
        """Every evaluator of the task on the final state -> (reward, success); WebArena's binary reward.
        `params` are the ones reset() picked (kept in the episode's meta.fields). A db evaluator compares
        a query's rows; the others are WebArena's own (envs/webarena.py), with the server's address in
        place of __BACKOFFICE__."""
        server = self.servers[page.context]
        passed = []
        for ev in fill(self.tasks[task]["evaluators"], params):
            if ev["type"] == "db":
                passed.append(query(server.db, ev["sql"], params) == ev["expected"])
            else:
                ev = webarena.fill_sites({**ev, "eval_types": [ev["type"]]}, {PLACEHOLDER: server.base}, task)
                passed += [ok for _, ok in await webarena.evaluate_config(ev, page, answer)]
        return float(all(passed)), all(passed)

