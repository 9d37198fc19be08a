"""Latency baseline: BrowserGym MiniWoB++ reset/step timings, one JSON line on stdout.

Usage: python bg_side.py --task click-button --seeds 0-9 --steps-per-episode 3 \
         [--miniwob-url http://127.0.0.1:PORT/miniwob/ | --html-dir .../miniwob/html]
"""
import argparse
import functools
import http.server
import json
import os
import statistics
import threading
import time
from importlib.metadata import version

import gymnasium as gym
from playwright.sync_api import BrowserType

ap = argparse.ArgumentParser()
ap.add_argument("--task", default="click-button")
ap.add_argument("--seeds", default="0-9", help="'0-9' or '0,3,7'")
ap.add_argument("--steps-per-episode", type=int, default=3)
ap.add_argument("--miniwob-url", help="base URL ending in /miniwob/ (server started by caller)")
ap.add_argument("--html-dir", help="dir holding miniwob/*.html; default: the miniwob package's html/")
ap.add_argument("--chromium", default="/usr/bin/chromium")
args = ap.parse_args()
a, _, b = args.seeds.partition("-")
seeds = list(range(int(a), int(b) + 1)) if b else [int(s) for s in args.seeds.split(",")]

# `playwright install` can't download here. BrowserEnv's pw_chromium_kwargs (official) only
# reaches the task browser; browsergym's Chat opens a 2nd browser via chromium.launch() with
# no way to pass kwargs, so default executable_path for every launch.
_launch = BrowserType.launch
BrowserType.launch = lambda self, **kw: _launch(self, **{"executable_path": args.chromium, **kw})

if not args.miniwob_url:  # serve the HTML ourselves (threaded server in this process)
    if not args.html_dir:
        import miniwob
        args.html_dir = os.path.join(os.path.dirname(miniwob.__file__), "html")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        log_message = lambda *a: None  # keep stderr clean
    handler = functools.partial(Quiet, directory=args.html_dir)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    args.miniwob_url = f"http://127.0.0.1:{srv.server_port}/miniwob/"
# browsergym-miniwob builds the task URL as MINIWOB_URL + "<task>.html", so keep the trailing /
os.environ["MINIWOB_URL"] = args.miniwob_url.rstrip("/") + "/"
import browsergym.miniwob  # noqa: E402,F401  (registers browsergym/miniwob.* envs)

env = gym.make(
    f"browsergym/miniwob.{args.task}",
    headless=True,
    slow_mo=0,  # task default is 100 ms *per Playwright call*
    pre_observation_delay=0,  # default sleeps 0.5 s before every observation
    pw_chromium_kwargs={"executable_path": args.chromium},
    disable_env_checker=True,  # gymnasium's passive checker would validate obs on 1st call
)  # viewport/timeout left at the task defaults (332x214, 5 s)

NOOP = "noop(wait_ms=0)"  # plain noop() waits 1000 ms inside the action


def click_action(obs):
    # Harmless real click: a visible, non-clickable element with an area (e.g. a text div in
    # #area). Clicking a miniwob button would end the episode and regenerate the DOM.
    props = obs["extra_element_properties"]
    cands = [bid for bid, p in props.items() if p["visibility"] > 0.5 and p["bbox"]
             and p["bbox"][2] * p["bbox"][3] > 0 and not p["clickable"]]
    return f"click({max(cands, key=lambda x: int(x) if x.isdigit() else -1)!r})"


def timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return (time.perf_counter() - t) * 1e3, out


# warm-up (not counted): first launch, imports, JIT of CDP paths
obs, _ = env.reset(seed=seeds[0])
env.step(NOOP)

reset_ms, step_ms, click_ms, phases, errors, targets = [], [], [], [], set(), set()
for s in seeds:
    dt, (obs, _) = timed(env.reset, seed=s)
    reset_ms.append(dt)
    for _ in range(args.steps_per_episode):
        dt, (obs, *_rest) = timed(env.step, NOOP)
        step_ms.append(dt)
    for _ in range(args.steps_per_episode):
        act = click_action(obs)  # re-pick from the latest obs: bids are re-marked each step
        targets.add(act)
        dt, (obs, _r, done, _tr, info) = timed(env.step, act)
        click_ms.append(dt)
        errors.add(obs["last_action_error"] or ("episode ended" if done else ""))
        # BrowserEnv.post_step records timestamps for each phase of the step
        phases.append({k: (info[f"{k}_stop"] - info[f"{k}_start"]) * 1e3 for k in
                       ("action_exec", "wait_for_page_loading", "validation", "get_observation")})
env.close()

r = lambda xs: [round(x, 1) for x in xs]
print(json.dumps({
    "reset_ms": r(reset_ms), "step_ms": r(step_ms), "step_click_ms": r(click_ms),
    "median_ms": {k: round(statistics.median(v), 1) for k, v in
                  (("reset", reset_ms), ("step", step_ms), ("step_click", click_ms))},
    "click_phase_median_ms": {k: round(statistics.median(p[k] for p in phases), 1) for k in phases[0]},
    "browsergym_version": version("browsergym-core"), "playwright_version": version("playwright"),
    "notes": f"task={args.task} seeds={args.seeds} steps/ep={args.steps_per_episode}; "
             f"step={NOOP}; click targets={sorted(targets)}; click errors/ends={sorted(errors - {''}) or 'none'}; "
             f"slow_mo=0 pre_observation_delay=0 headless; chromium={args.chromium} "
             f"(launch patched for browsergym's chat browser); url={os.environ['MINIWOB_URL']}",
}))
