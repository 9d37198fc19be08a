"""envs/django_suite.py -- the one mechanism every Django suite configures: the back office (Django's
admin over our own models) and the real open-source applications installed from PyPI (django-helpdesk,
django-oscar, Wagtail). A suite is a folder envs/<suite>/ holding a small Django project that uses its app
as installed (settings, urls, a `seed` management command) plus the harness's suite.py and experts.py;
tasks/<suite>.json holds its task templates.

What a suite gets from here:
  - a seeded SQLite file per data seed, built once (a copy of the suite's migrated database, made once
    with `manage.py migrate`, then `manage.py seed --seed N`, in child processes, written atomically) and
    cached under ~/.cache/mag/<suite>/<hash of the project's code and the app's version>/, with the folder
    of files that belongs to it for a suite that has one (Oscar's images and search index);
  - one `manage.py runserver` per browser context (= worker) on its own port and its own database file,
    so parallel episodes never see each other's changes; a server that died is restarted on its port;
  - a fresh copy of the seed's database (and files) for every episode (the server opens the file on every
    request);
  - task templates: a `pick` query chooses the seed's parameters, `set` derives more, the instruction and
    the evaluators are filled with them; evaluators are a query on the final database (`db`) or
    WebArena's own (url_match, program_html, string_match: envs/webarena.py), __SUITE__ being the server.

The child processes find their database in $MAG_DJANGO_DB. Build one by hand:
    python -m envs.django_suite backoffice /tmp/bo.sqlite3 --seed 0
"""
import argparse
import asyncio
import contextlib
import fcntl
import functools
import glob
import hashlib
import importlib
import importlib.metadata
import importlib.util
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

import metrics
from envs import Environment, ExpertError, Move, webarena

ENVS_DIR = os.path.dirname(os.path.abspath(__file__))
TASKS_DIR = os.path.join(os.path.dirname(ENVS_DIR), "tasks")
HARNESS_FILES = ("suite.py", "experts.py")   # beside the app, not part of it: no rebuild when they change
SERVER_READY_S = 30   # runserver imports Django and runs its checks: ~1 s idle, more on a busy machine
MANAGE_TIMEOUT_S = 1800   # one manage.py command of a build (migrate: ~30 s): a hung one is an error


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(app_dir, db, *args, python=sys.executable):
    """Run `manage.py ARGS` of the project in app_dir against the SQLite file `db`; return its stdout."""
    env = {**os.environ, "MAG_DJANGO_DB": os.path.abspath(db)}
    return subprocess.run([python, "manage.py", *args], env=env, cwd=app_dir, check=True,
                          capture_output=True, text=True, timeout=MANAGE_TIMEOUT_S).stdout


def built_atomically(path, make, files=None):
    """Run make(tmp) to write the file `path` under a temporary name, then rename it into place, so no
    reader ever sees half a database. With `files` (a suffix), the folder `<tmp><files>` that make writes
    beside it is moved to `<path><files>` first: a database that exists has its files. Builds of one cache
    folder take turns across processes (two collect.py shards on one machine share the cache)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(os.path.join(os.path.dirname(os.path.abspath(path)), ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):   # another process built it while this one waited
            return
        try:
            make(tmp)
            if files:
                shutil.rmtree(path + files, ignore_errors=True)   # a folder whose database never landed
                os.replace(tmp + files, path + files)
            os.replace(tmp, path)
        except subprocess.CalledProcessError as e:
            command = " ".join(e.cmd[1:])
            raise RuntimeError(f"building {path}: {command} exited with {e.returncode}:\n"
                               f"{e.stderr.strip()[-2000:]}") from None
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"building {path}: {' '.join(e.cmd[1:])} ran past {e.timeout:.0f} s") from None
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
            if files:
                shutil.rmtree(tmp + files, ignore_errors=True)


def migrate_db(app_dir, path, python=sys.executable):
    """A freshly migrated, empty database at `path`. Made once per suite and code version and copied for
    every seed: the apps' migrations take seconds (the back office) to tens of seconds (Oscar's ~150,
    Wagtail's ~200)."""
    built_atomically(path, lambda tmp: manage(app_dir, tmp, "migrate", "--noinput", "-v", "0", python=python))


def build_db(app_dir, path, seed=0, migrated=None, after=(), files=None, python=sys.executable):
    """Write a database seeded with `seed` to `path`: a copy of the migrated database `migrated` (migrated
    here without one), then `manage.py seed --seed N` and the suite's `after` commands (argument tuples),
    in child processes; atomic (built_atomically). Returns the seconds it took."""
    t0 = time.perf_counter()

    def make(tmp):
        if migrated:
            shutil.copyfile(migrated, tmp)
        else:
            manage(app_dir, tmp, "migrate", "--noinput", "-v", "0", python=python)
        manage(app_dir, tmp, "seed", "--seed", str(seed), python=python)
        for args in after:
            manage(app_dir, tmp, *args, python=python)
    built_atomically(path, make, files)
    return time.perf_counter() - t0


def app_version(app_dir, packages=(), python=sys.executable):
    """A hash of the project's code and of the installed versions of Django and the suite's `packages`
    (in the environment of `python`, the interpreter that runs the project): cached databases are rebuilt
    when the models, settings, seeding or the application's migrations change (not when the suite or its
    experts do: they build no database)."""
    h = hashlib.sha256()
    if python == sys.executable:
        versions = [importlib.metadata.version(dist) for dist in ("django", *packages)]
    else:   # a suite with a venv of its own: asked there
        code = "import importlib.metadata as m, sys; print(*(m.version(d) for d in sys.argv[1:]))"
        versions = subprocess.run([python, "-c", code, "django", *packages], check=True, capture_output=True,
                                  text=True).stdout.split()
    for dist, version in zip(("django", *packages), versions):
        h.update(f"{dist}=={version}".encode())
    for path in sorted(glob.glob(os.path.join(app_dir, "**", "*.py"), recursive=True)):
        if os.path.dirname(path) == app_dir and os.path.basename(path) in HARNESS_FILES:
            continue
        with open(path, "rb") as f:
            h.update(path[len(app_dir):].encode() + f.read())
    return h.hexdigest()[:12]


class DjangoServer:
    """One runserver over one SQLite file. The port is fixed at creation, so a restart after a crash
    comes back where its browser context's allow-list expects it."""

    def __init__(self, app_dir, db, ready_path, name, python=sys.executable, args=("--insecure",)):
        self.app_dir, self.db, self.ready_path, self.name = app_dir, db, ready_path, name
        self.python, self.args = python, args
        self.port, self.proc = free_port(), None
        self.base = f"http://127.0.0.1:{self.port}"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        """Start and wait until GET ready_path answers 200 (blocking: call it in a thread)."""
        log = open(self.db + ".log", "wb")   # a file, not a pipe: a full pipe would stall the server
        # --insecure (the default `args`) serves the apps' static files with DEBUG off (no collectstatic, no
        # web server); --noreload keeps it one process that terminate() stops.
        cmd = [self.python, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload", *self.args]
        # MAG_DJANGO_HOST: the address the server is reached at, for apps that write absolute links
        env = {**os.environ, "MAG_DJANGO_DB": self.db, "MAG_DJANGO_HOST": f"127.0.0.1:{self.port}"}
        self.proc = subprocess.Popen(cmd, cwd=self.app_dir, env=env,
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        t0 = time.monotonic()
        while self.proc.poll() is None and time.monotonic() - t0 < SERVER_READY_S:
            try:
                if urllib.request.urlopen(self.base + self.ready_path, timeout=1).status == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        with open(self.db + ".log", errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{self.name} server {self.base} not ready within {SERVER_READY_S} s; "
                           f"its output:\n{tail}")

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ----------------------------------------------------------------------------------------------
# Task templates: parameters from the seeded database, filled into the instruction and evaluators.

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
def load_tasks(suite):
    """tasks/<suite>.json without its "_about" notes (read once: the experts use it too)."""
    with open(os.path.join(TASKS_DIR, f"{suite}.json")) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def parse_instruction(suite, task, instruction):
    """The parameters in an instruction, by matching it against its task's template (a parameter used
    twice must have the same value both times). Experts read their task's parameters this way, as a
    person reads them off the instruction."""
    seen = set()

    def group(m):
        name = m[1]
        if name in seen:
            return f"(?P={name})"
        seen.add(name)
        return f"(?P<{name}>.+?)"
    rx = re.sub(r"\\\{(\w+)\\\}", group, re.escape(load_tasks(suite)[task]["instruction"]))
    m = re.fullmatch(rx, instruction, flags=re.S)
    if m is None:
        raise ExpertError(f"{task}: the instruction does not match its template: {instruction!r}")
    return m.groupdict()


async def admin_login(page, user, password):
    """An expert's first moves on Django's admin login form (episodes start logged out)."""
    yield Move("type", css="#id_username", value=user, why="to sign in to the admin site")
    yield Move("type", css="#id_password", value=password, why="to sign in to the admin site")
    yield Move("click", css="#login-form input[type=submit]", why="to sign in to the admin site")


# ----------------------------------------------------------------------------------------------
# The suite.

class DjangoSuite(Environment):
    """A Django project in envs/<suite>/ served per worker. A subclass sets `suite` (the folder, the
    task file and the experts module envs.<suite>.experts), `ready_path` (a page that answers 200 once
    the server is up) and its viewport."""
    suite = "django"
    ready_path = "/"
    app = None        # (import name, pip requirement) of the application served; None: the project's code
    files = None      # a folder `<database><files>` that belongs to each database (Oscar's images and search
                      # index): built with it, copied with it at every reset
    after_seed = ()   # manage.py commands (argument tuples) run on a new database after `seed`
    viewport, scale = (1280, 800), 1   # CSS px, scale 1: a laptop screen, where the apps lay out as designed
    python = sys.executable   # the interpreter of the project's manage.py: a suite's own venv if its app pins
                              # another Django stack than .venv's
    server_args = ("--insecure",)   # runserver's options besides the address and --noreload
    requirements = "requirements.txt"   # where the app's pip requirement is

    @classmethod
    def missing(cls):
        """How to install the application when it is not installed, in one line; None when it is."""
        if cls.app is None or importlib.util.find_spec(cls.app[0]) is not None:
            return None
        return f"pip install '{cls.app[1]}' (or pip install -r {cls.requirements})"
    browser_now = None   # a datetime: the browser's clock stands still there too (dates a page computes)

    def __init__(self):
        self.app_dir = os.path.join(ENVS_DIR, self.suite)
        self.placeholder = f"__{self.suite.upper()}__"
        self.tasks = load_tasks(self.suite)
        cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        packages = [re.match(r"[\w.-]+", self.app[1])[0]] if self.app else []
        self.cache = os.path.join(cache_home, "mag", self.suite, app_version(self.app_dir, packages, self.python))
        self.migrated = os.path.join(self.cache, "migrated.sqlite3")   # copied by every seed's build
        self.builds = {}   # "migrated" or a seed -> its build, shared by everyone who waits for it
        self.tmp = tempfile.mkdtemp(prefix=f"mag-{self.suite}-")   # the served files and server logs
        self.servers = {}        # browser context -> its server
        self.idle = []           # servers of closed contexts, reused by the next context
        self.origins = []        # every server's base URL: the allow-list of every context
        self.build_lock = asyncio.Lock()   # one build at a time: they share the migrated database

    def close(self):
        for server in self.idle + list(self.servers.values()):
            server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, task, base=None):
        return (base or self.placeholder) + self.tasks[task]["start_url"]

    def public_url(self, url):
        """The server's address replaced by a placeholder (WebArena style): ports differ between runs."""
        for base in self.origins:
            url = url.replace(base, self.placeholder)
        return url

    def has_task(self, task):
        return task in self.tasks

    def all_tasks(self):
        return sorted(self.tasks)

    async def attach(self, ctx):
        """Give a new browser context its server (reusing one whose context has closed) before new_page
        makes the context's allow-list from self.origins. Started lazily by reset(). The migrated database
        is made here, before the first episode: a new context has no time limit, a reset has."""
        if not os.path.exists(self.migrated):
            await self.build("migrated", migrate_db, self.app_dir, self.migrated, self.python)
        if self.idle:
            server = self.idle.pop()
        else:
            db = os.path.join(self.tmp, f"served-{len(self.origins)}.sqlite3")
            server = DjangoServer(self.app_dir, db, self.ready_path, self.suite, self.python, self.server_args)
            self.origins.append(server.base)
        self.servers[ctx] = server
        ctx.on("close", lambda _: self.detach(ctx))
        if self.browser_now is not None:   # Date.now() and new Date() in the page; timers run on
            ms = str(int(self.browser_now.timestamp() * 1000))
            await ctx.add_init_script(metrics.read_asset("fixed_date.js").replace("$NOW_MS", ms))

    def detach(self, ctx):
        """The context's server goes back to the idle pool (idempotent). The worker calls it when it
        drops a context, because a close that failed or timed out never fires the close event."""
        server = self.servers.pop(ctx, None)
        if server is not None:
            self.idle.append(server)

    async def build(self, key, make, *args):
        """Run make(*args) in a thread, one build at a time and one per key. Shielded: the build goes on
        when the reset waiting for it times out (collect.py gives a reset three action timeouts, a seed's
        first build may take longer), and the retried reset waits for the same build, not a second one."""
        task = self.builds.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self.builds[key] = asyncio.ensure_future(self.take_turn(make, *args))
        await asyncio.shield(task)

    async def take_turn(self, make, *args):
        async with self.build_lock:
            os.makedirs(self.cache, exist_ok=True)
            await asyncio.to_thread(make, *args)

    async def database(self, seed):
        """The cached seeded database of `seed` (its files beside it), built on first use: seconds, Django in
        child processes."""
        path = os.path.join(self.cache, f"seed-{seed}.sqlite3")
        if not os.path.exists(path):
            await self.build("migrated", migrate_db, self.app_dir, self.migrated, self.python)
            await self.build(seed, build_db, self.app_dir, path, seed, self.migrated, self.after_seed,
                             self.files, self.python)
        return path

    async def prepare(self, page, seed):
        """What a reset waits for the first time: the seed's database built, the context's server up (on
        that data). collect.py calls it before the reset's time limit starts: a first build takes seconds,
        longer on a busy machine or behind other seeds' builds; reset() does both when called alone."""
        server = self.servers[page.context]
        db = await self.database(seed)
        if not server.alive():
            await self.restore(server, db)
            await asyncio.to_thread(server.start)

    async def restore(self, server, db):
        """The served database replaced by a fresh copy of `db` (and its files' folder)."""
        if self.files:   # the seed's folder first, fresh: the last episode may have written into it
            await asyncio.to_thread(shutil.rmtree, server.db + self.files, True)
            await asyncio.to_thread(shutil.copytree, db + self.files, server.db + self.files)
        tmp = server.db + ".new"
        shutil.copyfile(db, tmp)
        os.replace(tmp, server.db)   # atomic: a request sees the old file or the new one, never half

    async def reset(self, page, task, seed):
        """Fresh data (the seed's database copied over the served file), a server that is up, no
        cookies (every episode starts logged out), the start page; returns (instruction, parameters)."""
        server, template = self.servers[page.context], self.tasks[task]
        db = await self.database(seed)
        await self.restore(server, db)
        if not server.alive():       # first episode, or it died since the last one
            await asyncio.to_thread(server.start)
        await page.context.clear_cookies()
        if page.url.startswith(server.base):
            # the last episode's page: what it kept in the page's storage (a table's saved sort, a folded
            # sidebar) must not reach this episode
            await page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
        params = task_params(template, db, seed)
        await page.goto(self.url(task, server.base), wait_until="load")
        return fill(template["instruction"], params), params

    async def status(self, page):
        """Never done during the episode (the policy says stop); a dead server is a fault, so the
        worker retries the episode in a fresh context and reset() restarts the server."""
        server = self.servers[page.context]
        if not server.alive():
            raise ConnectionError(f"{self.suite} server {server.base} died (exit code {server.proc.poll()})")
        return False, 0.0, False

    def expert(self, task):
        """The expert of the task's template, told which variant it plays; looked up per call (tests swap
        experts in). Imported here: the experts read this module's task table."""
        experts = importlib.import_module(f"envs.{self.suite}.experts").EXPERTS
        template = self.tasks.get(task, {}).get("template")
        return functools.partial(experts[template], task=task) if template in experts else None

    async def evaluate(self, page, task, params, answer):
        """Every evaluator of the task on the final state -> (reward, success); WebArena's binary reward.
        `params` are the ones reset() picked (kept in the episode's meta.fields). A db evaluator compares
        a query's rows; the others are WebArena's own (envs/webarena.py), with the server's address in
        place of the suite's placeholder."""
        server = self.servers[page.context]
        passed = []
        for ev in fill(self.tasks[task]["evaluators"], params):
            if ev["type"] == "db":
                passed.append(query(server.db, ev["sql"], params) == ev["expected"])
            else:
                sites = {self.placeholder: server.base}
                ev = webarena.fill_sites({**ev, "eval_types": [ev["type"]]}, sites, task)
                passed += [ok for _, ok in await webarena.evaluate_config(ev, page, answer)]
        return float(all(passed)), all(passed)


def suite_class(suite):
    """The DjangoSuite subclass of envs/<suite>/suite.py."""
    module = importlib.import_module(f"envs.{suite}.suite")
    base = importlib.import_module("envs.django_suite").DjangoSuite   # not __main__'s copy (python -m)
    return next(c for c in vars(module).values()
                if isinstance(c, type) and issubclass(c, base) and c.suite == suite)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Build a seeded database of a Django suite (migrate + seed).")
    ap.add_argument("suite", help="the suite's folder under envs/ (backoffice, helpdesk, shop, cms)")
    ap.add_argument("path", help="the SQLite file to write (and its files' folder, for a suite with files)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cls = suite_class(args.suite)
    seconds = build_db(os.path.join(ENVS_DIR, args.suite), args.path, args.seed, after=cls.after_seed,
                       files=cls.files, python=cls.python)
    print(f"built {args.path} ({args.suite}, seed {args.seed}) in {seconds:.2f}s")
