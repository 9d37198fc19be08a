"""bench/env_step.py -- MiniWoB++ environment latency against BrowserGym, and collection throughput.

  make bench                                   (builds .venv-bench for BrowserGym on first use)
  python bench/env_step.py --skip-browsergym   (ours only)

In one run, on the same task and seeds:
  reset   our env.reset + settle + first observation  vs  BrowserGym env.reset (which observes too)
  step    a harmless click + observation (screenshot + Set-of-Mark elements); our settle is
          timed separately, so the comparison is like for like with BrowserGym's tuned step
          (slow_mo=0, pre_observation_delay=0: action, page-load wait, observation)
  breakdown   one step's CPU by phase (action, settle, observation JS and its stable-marks re-reads, screenshot
              capture, status) and by process (Python, Playwright's driver, Chromium's browser, renderer, GPU and
              utility processes), read from /proc (Linux) around each phase of the harmless-click steps
  throughput  expert collection on every expert task, in steps/s (resets included), with 1, 2 and 4 workers,
              and its CPU per step by process
Targets: step latency <= 0.35x BrowserGym's (issue 2); >= 20 steps/s with 4 workers on 2 cores (issue 14).
"""
import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import collect  # noqa: E402

BENCH_VENV = os.path.join(ROOT, ".venv-bench")
HARMLESS = (80, 20)  # CSS px inside MiniWoB's instruction box (#query): a click there changes nothing
CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_kind(pid):
    """python / driver (Playwright's node) / browser, renderer, gpu, utility (Chromium's processes) / other;
    None when it cannot be told now (gone, or a zombie: its command line is empty while it exits)."""
    if pid == os.getpid():
        return "python"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    if not argv[0]:
        return None
    if b"run-driver" in argv or os.path.basename(argv[0]) == b"node":
        return "driver"
    kind = re.search(rb"--type=([\w-]+)", b" ".join(argv))   # a forked child's argv is one rewritten string
    if kind:
        return {b"gpu-process": "gpu", b"renderer": "renderer", b"utility": "utility"}.get(kind.group(1), "other")
    return "browser" if b"chrom" in argv[0] else "other"


class ProcessCPU:
    """CPU seconds by process kind for this process and all its descendants, from /proc/<pid>/stat.
    A process that exits between two readings keeps the last CPU seen for it (sample often)."""

    def __init__(self):
        self.kinds, self.last = {}, {}
        self.rescan()

    def rescan(self):
        parent = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        tree, todo = [], [os.getpid()]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += [c for c, p in parent.items() if p == pid]
        for pid in tree:   # classified again each time: a child's argv is its parent's until it execs
            # (Chromium's launcher is a shell script until it execs the browser); an exiting process keeps its kind
            self.kinds[pid] = process_kind(pid) or self.kinds.get(pid, "other")

    def read(self):
        """{kind: cumulative CPU seconds} over every process seen so far."""
        for pid in self.kinds:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                self.last[pid] = (int(fields[11]) + int(fields[12])) / CLK
            except (OSError, IndexError, ValueError):
                pass
        total = {}
        for pid, sec in self.last.items():
            total[self.kinds[pid]] = total.get(self.kinds[pid], 0.0) + sec
        return total


def machine_ticks():
    """(busy, idle) CPU seconds of the whole machine so far, from /proc/stat (every process, ours or not)."""
    with open("/proc/stat") as f:
        v = [int(x) / CLK for x in f.readline().split()[1:8]]
    return v[0] + v[1] + v[2] + v[5] + v[6], v[3] + v[4]


def cpu_delta(before, after):
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


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


PHASES = ("action", "settle", "observe_js", "screenshot", "status")
RESET_PHASES = ("reset", "reset_settle", "reset_observe")
KINDS = ("python", "driver", "browser", "renderer", "gpu", "utility", "other")


async def breakdown(task, seeds, steps_per_episode):
    """The harmless-click step again, each phase timed and its CPU read by process kind -> per step, in ms.

    observe_js is collect.observe without its screenshot (the CDP capture is timed on its own by wrapping
    the page's CDP session); one_read is one extra reading of the marks with no re-read, taken after the
    step and not counted in it, so observe_js minus one_read is what the stable-marks re-reads cost."""
    from playwright.async_api import async_playwright
    env = collect.make_env("miniwob")
    args = collect.parse_args([])
    cpu = ProcessCPU()
    cpu_ms = {ph: dict.fromkeys(KINDS, 0.0) for ph in (*PHASES, "one_read", *RESET_PHASES)}
    wall_ms = dict.fromkeys((*PHASES, "one_read", *RESET_PHASES), 0.0)
    counting, n, episodes, in_step = False, 0, 0, [False]

    async def timed(phase, coro):
        c, t = cpu.read(), time.perf_counter()
        result = await coro
        if counting:
            wall_ms[phase] += 1000 * (time.perf_counter() - t)
            for kind, sec in cpu_delta(c, cpu.read()).items():
                cpu_ms[phase][kind] = cpu_ms[phase].get(kind, 0.0) + 1000 * sec
        return result
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path),
                                               args=collect.CHROMIUM_ARGS)
            _, page = await collect.new_page(browser, env, [])
            send = page.mag_cdp.send
            page.mag_cdp.send = lambda method, params=None: (timed("screenshot", send(method, params)) if in_step[0]
                                                             else send(method, params))
            point = [HARMLESS[0] * env.scale, HARMLESS[1] * env.scale]
            for i, seed in enumerate([seeds[0]] + list(seeds)):   # the first episode warms up, uncounted
                counting = bool(i)
                episodes += counting
                await timed("reset", env.reset(page, task, seed))
                await timed("reset_settle", collect.settle(page, args.settle_quiet_ms, args.settle_cap_ms))
                await timed("reset_observe", collect.observe(page, env))
                cpu.rescan()   # a navigation can start a new renderer
                in_step[0] = True
                for _ in range(steps_per_episode):
                    await timed("action", collect.execute(page, {"op": "click", "mark": None, "point": point,
                                                                 "value": None}, env))
                    await timed("settle", collect.settle(page, args.settle_quiet_ms, args.settle_cap_ms))
                    await timed("observe_js", collect.observe(page, env))
                    await timed("status", env.status(page))
                    await timed("one_read", page.evaluate(collect.metrics.OBSERVE_JS, [env.scale, 0]))
                    n += counting
                in_step[0] = False
            await browser.close()
    finally:
        env.close()
    for kind in KINDS:   # observe_js was timed with the screenshot inside it (the reset's observe keeps it)
        cpu_ms["observe_js"][kind] -= cpu_ms["screenshot"][kind]
    wall_ms["observe_js"] -= wall_ms["screenshot"]
    div = {ph: episodes if ph in RESET_PHASES else n for ph in wall_ms}
    return {"steps": n, "episodes": episodes, "wall_ms": {k: round(v / div[k], 2) for k, v in wall_ms.items()},
            "cpu_ms": {ph: {k: round(v / div[ph], 2) for k, v in row.items() if round(v / div[ph], 2)}
                       for ph, row in cpu_ms.items()},
            "cpu_ms_step_total": round(sum(sum(cpu_ms[ph].values()) for ph in PHASES) / n, 2),
            "cpu_ms_reset_total": round(sum(sum(cpu_ms[ph].values()) for ph in RESET_PHASES) / episodes, 2)}


def print_breakdown(b):
    kinds = [k for k in KINDS if any(k in row for row in b["cpu_ms"].values())]
    print(f"breakdown of one harmless-click step ({b['steps']} steps), ms per step:")
    print(f"  {'phase':12s} {'wall':>7s} " + " ".join(f"{k:>9s}" for k in kinds) + f" {'cpu all':>9s}")
    for ph in (*PHASES, "one_read", *RESET_PHASES):
        row = b["cpu_ms"][ph]
        print(f"  {ph:12s} {b['wall_ms'][ph]:7.1f} " + " ".join(f"{row.get(k, 0):9.2f}" for k in kinds)
              + f" {sum(row.values()):9.2f}" + ("   (not in the step: one reading, no re-read)" if ph == "one_read"
                                                 else ""))
    print(f"  CPU per step, all processes: {b['cpu_ms_step_total']} ms; per reset (per episode, the last three rows): "
          f"{b['cpu_ms_reset_total']} ms")


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
    """Expert collection on every expert task; CPU per step by process kind, sampled from /proc in a thread
    (Chromium's processes come and go with the run)."""
    cpu, stop = ProcessCPU(), threading.Event()

    def sample():
        while not stop.wait(0.1):
            cpu.rescan()
            cpu.read()
    before, (busy0, idle0) = cpu.read(), machine_ticks()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        summary = collect.main(["--tasks", "all", "--episodes", str(episodes), "--seed", "1000",
                                "--workers", str(workers), "--out", out, "--no-progress"])
        wall = time.perf_counter() - t
    stop.set()
    sampler.join()
    steps = summary["episodes"] * summary["mean_steps"]
    used, (busy1, idle1) = cpu_delta(before, cpu.read()), machine_ticks()
    busy = busy1 - busy0   # the cores' own count: were they saturated? (child-process accounting misses the
                           # Chromium processes that exit unreaped, so /usr/bin/time of a run reads low)
    return {"workers": workers, "episodes": summary["episodes"], "steps": int(steps), "seconds": round(wall, 1),
            "steps_per_s": round(steps / wall, 1), "success_rate": summary["success_rate"],
            "cpu_ms_per_step": {k: round(1000 * v / steps, 1) for k, v in sorted(used.items()) if v > 0},
            "cpu_ms_per_step_total": round(1000 * sum(used.values()) / steps, 1),
            "machine_busy": round(busy / (busy + idle1 - idle0), 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="click-button")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--steps-per-episode", type=int, default=3)
    p.add_argument("--throughput-episodes", type=int, default=3, help="episodes per expert task per worker setting")
    p.add_argument("--skip-browsergym", action="store_true")
    p.add_argument("--only", choices=["breakdown", "throughput"], help="run one part only")
    a = p.parse_args()
    seeds = list(range(a.seeds))
    report = {"task": a.task, "seeds": f"0-{a.seeds - 1}", "cpus": os.cpu_count()}
    if a.only != "throughput":
        report["breakdown"] = asyncio.run(breakdown(a.task, seeds, a.steps_per_episode))
        print_breakdown(report["breakdown"])
    if a.only:
        a.skip_browsergym = True
    if not a.only:
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
    report["throughput"] = [throughput(w, a.throughput_episodes) for w in (1, 2, 4)] if a.only != "breakdown" else []
    for row in report["throughput"]:
        print(f"throughput: {row['workers']} workers  {row['steps_per_s']} steps/s  ({row['steps']} steps in "
              f"{row['seconds']} s, success {row['success_rate']:.2f})  [target >= 20 steps/s at 4 workers]; "
              f"CPU per step {row['cpu_ms_per_step_total']} ms: {row['cpu_ms_per_step']}; "
              f"cores busy {row['machine_busy']:.0%}")
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "env_step.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
