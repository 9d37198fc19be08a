"""Shared test setup: the repo root on sys.path, no model hub, a local Chromium."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import contextlib  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

TOY_LABELS = ["OK", "Cancel", "Submit", "Next", "Search", "Save", "Login", "Delete", "Open", "Close", "Yes", "No"]


def make_toy_dataset(path, n_episodes=8, size=(160, 120), seed=0):
    """A small dataset in the collect.py format, with guides filled in (status 'auto') and splits.

    Episode i shows three buttons; step 0 clicks one of them (chosen by i), step 1 types a word
    into a text field, the last step stops. Images are drawn with Pillow so every stage that
    reads screenshots has real files to read.
    """
    import random

    from PIL import Image, ImageDraw
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    lines = []
    for i in range(n_episodes):
        ep_id = f"toy.buttons.{i}"
        os.makedirs(os.path.join(path, "img", ep_id), exist_ok=True)
        labels = rng.sample(TOY_LABELS, 3)
        target = labels[i % 3]
        word = rng.choice(["alpha", "bravo", "delta", "echo"])
        elements = [{"mark": j + 1, "tag": "button", "role": "button", "text": lab,
                     "bbox": [10 + 48 * j, 20, 54 + 48 * j, 44]} for j, lab in enumerate(labels)]
        elements.append({"mark": 4, "tag": "input", "role": "textbox", "text": "Name", "bbox": [10, 70, 150, 94]})
        steps = []
        click = {"op": "click", "mark": labels.index(target) + 1, "value": None}
        actions = [(click, f"Click the **{target}** button."),
                   ({"op": "type", "mark": 4, "value": word}, f"Type \"{word}\" into the **Name** field."),
                   ({"op": "stop", "mark": None, "value": ""}, "The task is done.")]
        for k, (act, guide) in enumerate(actions):
            img = Image.new("RGB", size, "white")
            d = ImageDraw.Draw(img)
            for e in elements:
                d.rectangle(e["bbox"], outline="black")
                d.text((e["bbox"][0] + 3, e["bbox"][1] + 5), e["text"], fill="black")
            shot = f"img/{ep_id}/{k}.png"
            img.save(os.path.join(path, shot))
            el = next((e for e in elements if e["mark"] == act["mark"]), None)
            point = [(el["bbox"][0] + el["bbox"][2]) / 2, (el["bbox"][1] + el["bbox"][3]) / 2] if el else None
            steps.append({"step": k, "url": "http://toy/", "screenshot": shot, "elements": elements,
                          "action": dict(act, point=point), "guide": guide, "guide_status": "auto",
                          "guide_alt": {"paraphrase": guide.replace(f"**{target}**", "the highlighted")}})
        split = "test" if i % 4 == 3 else "val" if i % 4 == 2 else "train"
        lines.append({"id": ep_id, "suite": "toy", "task": f"buttons-{i % 2}", "seed": i,
                      "instruction": f"Press {target}, then enter {word} as the name.", "start_url": "http://toy/",
                      "viewport": list(size), "success": True, "reward": 1.0, "steps": steps, "meta": {},
                      "split": split})
    with open(os.path.join(path, "episodes.jsonl"), "w") as f:
        for ep in lines:
            f.write(json.dumps(ep) + "\n")
    return path


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    return make_toy_dataset(str(tmp_path_factory.mktemp("toy")))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Tiny random models of each architecture, built with train_sft.build_tiny (saved, then
    loaded back by the scripts through the Auto classes like any real checkpoint)."""
    import train_sft
    root = tmp_path_factory.mktemp("tiny")
    return {arch: train_sft.build_tiny(str(root / arch), arch, size="test") for arch in train_sft.TINY_ARCHS}


@pytest.fixture
def broken_checkpoints(tiny_models, tmp_path):
    """Two copies of a tiny checkpoint a loader must refuse by name: one without config.json, one
    whose weights file is cut short."""
    import shutil
    no_config, truncated = tmp_path / "no_config", tmp_path / "truncated"
    for folder in (no_config, truncated):
        shutil.copytree(tiny_models["qwen2_5_vl"], folder)
    os.remove(no_config / "config.json")
    with open(truncated / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    return no_config, truncated


@contextlib.contextmanager
def serving(handler):
    """A stand-in site: the http.server handler class served on 127.0.0.1 in a thread -> its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.asynccontextmanager
async def live_page(suite):
    """A page of `suite` made as collect.py makes one (its init scripts, its allow-list), in a browser of
    its own -> (env, page); the browser and the suite's servers stop after."""
    from playwright.async_api import async_playwright

    import collect
    env = collect.make_env(suite)
    try:
        async with async_playwright() as pw:
            browser = collect.Browser(pw, headless=True)
            try:
                _, page = await collect.new_page(await browser.get(), env, [])
                yield env, page
            finally:
                await browser.close()
    finally:
        env.close()


class FakeAPI:
    """An OpenAI-compatible endpoint on 127.0.0.1 playing a script, one item per request: a reply
    text, a function of the request body returning one, an HTTP status, 'hang' (answers after the
    client's timeout), 'badjson' (a 200 that is not JSON), (status, body, headers) answered as is (a
    redirect, an error page), bytes written raw (a broken status line). With `key`, requests without
    it get 401. Every request is recorded, a GET too (what a client that follows a 302 sends)."""

    def __init__(self, script, key=None, hang_s=1.5, port=0):
        self.script, self.requests = list(script), []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def answer(self, status, payload=b""):
                try:   # the client may have given up on a hung request already
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass

            def do_GET(self):
                api.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": None,
                                     "method": "GET"})
                self.answer(405)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body,
                                     "method": "POST"})
                if key and self.headers.get("Authorization") != f"Bearer {key}":
                    return self.answer(401, b'{"error": {"message": "missing or bad key"}}')
                what = api.script.pop(0) if api.script else "lol ok"
                what = what(body) if callable(what) else what
                if isinstance(what, int):
                    return self.answer(what)
                if isinstance(what, bytes):
                    return self.wfile.write(what)
                if isinstance(what, tuple):
                    status, payload, headers = what
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    return self.wfile.write(payload.encode())
                if what == "hang":
                    time.sleep(hang_s)
                    what = "Action: stop()"
                reply = {"choices": [{"message": {"content": what}}]}
                payload = b"{not json" if what == "badjson" else json.dumps(reply).encode()
                self.answer(200, payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)   # port: a server back up
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def die(self):
        """Stop answering at once, from inside a request: new connections are refused (the server killed)."""
        self.server.shutdown()
        self.server.socket.close()


@pytest.fixture
def display(monkeypatch):
    """A headed browser needs a screen: a private Xvfb display for the test (skipped without Xvfb)."""
    if not shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed (make test installs it)")
    for n in range(90, 120):
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and not os.path.exists(f"/tmp/.X{n}-lock"):
            break
    proc = subprocess.Popen(["Xvfb", f":{n}", "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while not os.path.exists(f"/tmp/.X11-unix/X{n}") and time.time() < deadline:
        time.sleep(0.05)
    monkeypatch.setenv("DISPLAY", f":{n}")
    yield f":{n}"
    proc.terminate()
    proc.wait(timeout=10)


def browser_missing():
    """Why a test that needs a browser cannot run here, or None: Playwright is not installed, or no
    Chromium is where collect.find_chromium looks ($MAG_CHROMIUM, Playwright's own, a system one)."""
    global _BROWSER_MISSING
    if _BROWSER_MISSING is None:
        try:
            import collect
            collect.find_chromium(collect.playwright_chromium())
            _BROWSER_MISSING = ""
        except ImportError as e:
            _BROWSER_MISSING = f"Playwright is not installed ({e})"
        except SystemExit as e:
            _BROWSER_MISSING = str(e)
    return _BROWSER_MISSING or None


_BROWSER_MISSING = None


# ----------------------------------------------------------------------------------------------
# The Django suites (envs/django_suite.py): a fresh database cache, the servers started, an expert that
# does nothing, an expert whose server is killed mid-episode.

@pytest.fixture(scope="module")
def django_cache(tmp_path_factory):
    """Seeded databases are cached under $XDG_CACHE_HOME: a fresh one here, shared by the test module."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture
def started(monkeypatch):
    """Every DjangoServer.start() call, as the server it started."""
    from envs import django_suite
    servers, start = [], django_suite.DjangoServer.start

    def spy(self):
        start(self)
        servers.append(self)
    monkeypatch.setattr(django_suite.DjangoServer, "start", spy)
    return servers


async def do_nothing(page, instruction, task):
    return
    yield   # an async generator with no moves: the policy stops at once, with no answer


async def aenumerate(agen):
    k = 0
    async for x in agen:
        yield k, x
        k += 1


def killing(expert, kills, servers, at=3):
    """The expert, but before its move number `at` (the 4th: the first click after logging in) the
    suite's server is SIGKILLed, `kills[0]` times in all."""
    import signal

    import envs

    async def solve(page, instruction, task):
        async for k, move in aenumerate(envs.flatten(expert(page, instruction, task))):
            if k == at and kills[0] > 0:
                kills[0] -= 1
                for s in servers:
                    if s.alive():
                        os.kill(s.proc.pid, signal.SIGKILL)
                        s.proc.wait()
            yield move
    return solve


# A suite's experts on every template and its evaluators on every task take minutes per suite on two cores:
# `make test` runs every third template end to end and one task of each on untouched data; `make sweep`
# (MAG_SWEEP=1) runs them all, as a change to a suite's experts or evaluators should before it lands.
SWEEP = os.environ.get("MAG_SWEEP") == "1"


def first_of_each_template(suite):
    """The first task (by name) of each of a suite module's templates."""
    first = {}
    for name, task in sorted(suite.load_tasks().items()):
        first.setdefault(task["template"], name)
    return sorted(first.values())


def tasks_to_run(suite, also=()):
    """The tasks a suite's experts run end to end: every template's first task under `make sweep`, every
    third template's in `make test`; and the tasks `also` names (those a test checks further)."""
    first = first_of_each_template(suite)
    return sorted({*(first if SWEEP else first[::3]), *also})


def tasks_to_judge(suite):
    """The tasks whose evaluators a test runs on untouched data: every task under `make sweep`, each
    template's first in `make test`."""
    return sorted(suite.load_tasks()) if SWEEP else first_of_each_template(suite)


def assert_same_screenshots(one, two, min_steps, tasks=None):
    """Two collection folders of the same jobs (their episodes of `tasks`, a set, when given): the same
    episodes, all successful, with byte-identical screenshots at every step."""
    import metrics
    a_eps, b_eps = ([e for e in metrics.load_dataset(d) if tasks is None or e["task"] in tasks] for d in (one, two))
    assert a_eps and [e["id"] for e in a_eps] == [e["id"] for e in b_eps] and all(e["success"] for e in a_eps + b_eps)
    for a, b in zip(a_eps, b_eps):
        assert len(a["steps"]) == len(b["steps"]) >= min_steps
        for s in a["steps"]:
            shots = [os.path.join(folder, s["screenshot"]) for folder in (one, two)]
            with open(shots[0], "rb") as f1, open(shots[1], "rb") as f2:
                assert f1.read() == f2.read(), (a["id"], s["step"])



def assert_dap_guides(episodes):
    """Every expert move but a scroll or a stop says why ("to ..."), and the template drafter's guide of each
    step names its target rightly (annotate.py lint's first kind: no placeholder, no bare number, no value a
    control shows, no position alone while the target has a name)."""
    import annotate
    import metrics
    for ep in episodes:
        for k, (s, guide) in enumerate(zip(ep["steps"], metrics.template_guides(ep))):
            if s["action"]["op"] not in ("scroll", "stop"):
                assert (s.get("purpose") or "").startswith("to "), (ep["id"], k, s["action"], s.get("purpose"))
            wrong = set(annotate.guide_problems(guide, s)) & set(annotate.WRONG)
            assert not wrong, (ep["id"], k, guide, wrong)
