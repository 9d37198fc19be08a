"""bench/env_step.py -- MiniWoB++ environment latency against BrowserGym, and collection throughput.

  make bench                                   (builds .venv-bench for BrowserGym on first use)
  python bench/env_step.py --skip-browsergym   (ours only)

In one run, on the same task and seeds:
  reset   our env.reset + settle + first observation  vs  BrowserGym env.reset (which observes too)
  step    a harmless click + observation (screenshot + Set-of-Mark elements); our settle is
          timed separately, so the comparison is like for like with BrowserGym's tuned step
          (slow_mo=0, pre_observation_delay=0: action, page-load wait, observation)
  throughput  expert collection on every expert task, in steps/s, with 1, 2 and 4 workers
Targets (issue 2): step latency <= 0.35x BrowserGym's; >= 25 steps/s with 4 workers on 2 cores.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import collect  # noqa: E402

BENCH_VENV = os.path.join(ROOT, ".venv-bench")
HARMLESS = (80, 20)  # CSS px inside MiniWoB's instruction box (#query): a click there changes nothing


async def ours(task, seeds, steps_per_episode):
    from playwright.async_api import async_playwright
    env = collect.make_env("miniwob")
    args = collect.parse_args([])
    reset, step, settle = [], [], []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path),
                                               args=collect.CHROMIUM_ARGS)
            _, page = await collect.new_page(browser, env, [])
            point = [HARMLESS[0] * env.scale, HARMLESS[1] * env.scale]
            for i, seed in enumerate([seeds[0]] + list(seeds)):   # the first episode warms up, uncounted
                t = time.perf_counter()
                await env.reset(page, task, seed)
                await collect.settle(page, args.settle_quiet_ms, args.settle_cap_ms)
                await collect.observe(page, env)
                if i:
                    reset.append(time.perf_counter() - t)
                for _ in range(steps_per_episode):
                    t = time.perf_counter()
                    await collect.execute(page, {"op": "click", "mark": None, "point": point, "value": None}, env)
                    t_act = time.perf_counter() - t
                    s = await collect.settle(page, args.settle_quiet_ms, args.settle_cap_ms)
                    t = time.perf_counter()
                    await collect.observe(page, env)
                    if i:
                        step.append(t_act + time.perf_counter() - t)
                        settle.append(s)
            await browser.close()
    finally:
        env.close()
    ms = lambda xs: round(1000 * statistics.median(xs), 1)  # noqa: E731
    return {"reset": ms(reset), "step": ms(step), "settle": ms(settle), "n_steps": len(step)}


def browsergym(task, seeds, steps_per_episode):
    """BrowserGym in its own venv (it pins an older Playwright); None, with a reason, if unavailable."""
    py = os.path.join(BENCH_VENV, "bin", "python")
    if not os.path.exists(py):
        print("bench: building .venv-bench with browsergym-miniwob (one-time)...", flush=True)
        install = f"{sys.executable} -m venv {BENCH_VENV} && {py} -m pip install -q browsergym-miniwob miniwob"
        r = subprocess.run(install, shell=True, capture_output=True, text=True)
        if r.returncode:
            return None, "could not install browsergym-miniwob: " + r.stderr.strip()[-300:]
    own = collect.playwright_chromium()   # BrowserGym's side launches the same Chromium as ours
    cmd = [py, os.path.join(ROOT, "bench", "browsergym_side.py"), "--task", task, "--seeds", f"{seeds[0]}-{seeds[-1]}",
           "--steps-per-episode", str(steps_per_episode), "--chromium", collect.find_chromium(own) or own]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode:
        return None, "browsergym run failed: " + r.stderr.strip()[-500:]
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def throughput(workers, episodes):
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        summary = collect.main(["--tasks", "all", "--episodes", str(episodes), "--seed", "1000",
                                "--workers", str(workers), "--out", out, "--no-progress"])
        wall = time.perf_counter() - t
    steps = summary["episodes"] * summary["mean_steps"]
    return {"workers": workers, "episodes": summary["episodes"], "steps": int(steps), "seconds": round(wall, 1),
            "steps_per_s": round(steps / wall, 1), "success_rate": summary["success_rate"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="click-button")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--steps-per-episode", type=int, default=3)
    p.add_argument("--throughput-episodes", type=int, default=3, help="episodes per expert task per worker setting")
    p.add_argument("--skip-browsergym", action="store_true")
    a = p.parse_args()
    seeds = list(range(a.seeds))
    report = {"task": a.task, "seeds": f"0-{a.seeds - 1}", "cpus": os.cpu_count()}
    report["ours_ms"] = asyncio.run(ours(a.task, seeds, a.steps_per_episode))
    print("ours (median ms):", report["ours_ms"], flush=True)
    if not a.skip_browsergym:
        bg, why = browsergym(a.task, seeds, a.steps_per_episode)
        if bg is None:
            print("browsergym baseline unavailable:", why)
        else:
            report["browsergym_ms"] = bg["median_ms"]
            report["browsergym_versions"] = {"browsergym": bg["browsergym_version"],
                                             "playwright": bg["playwright_version"]}
            o, b = report["ours_ms"], bg["median_ms"]
            report["ratio"] = {"reset": round(o["reset"] / b["reset"], 3),
                               "step_vs_noop": round(o["step"] / b["step"], 3),
                               "step_vs_click": round(o["step"] / b["step_click"], 3)}
            print("browsergym (median ms):", b)
            print(f"ratio ours/browsergym: reset {report['ratio']['reset']}x, step {report['ratio']['step_vs_click']}x "
                  f"(vs its click step; {report['ratio']['step_vs_noop']}x vs its noop step)  [target step <= 0.35x]")
    report["throughput"] = [throughput(w, a.throughput_episodes) for w in (1, 2, 4)]
    for row in report["throughput"]:
        print(f"throughput: {row['workers']} workers  {row['steps_per_s']} steps/s  ({row['steps']} steps in "
              f"{row['seconds']} s, success {row['success_rate']:.2f})  [target >= 25 steps/s at 4 workers]")
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "env_step.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
