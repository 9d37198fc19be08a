"""bench/django_suites.py -- the Django suites side by side, the back office as the baseline, in one run.

  python bench/django_suites.py              (~15 min on 2 idle cores; writes bench/out/django_suites.json)
  python bench/django_suites.py --suites helpdesk --resets 5 --workers 1    (a quick look)

For each suite, on the first task of each of its templates (expert policy, one data seed, its database
built before any timing):
  reset        DjangoSuite.reset in a page that is already open, after the server is up: the copy of the
               seed's database, clearing cookies and page storage, the start page with its redirect to
               the login form -- the median of --resets, in ms
  throughput   collect.py end to end (a subprocess: browser, one server per worker, episodes written) at
               each --workers, in episodes and steps per minute, and as a ratio to the back office's
  cpu/step     CPU seconds (user + sys) of that collect.py and everything it started (Chromium, the Django
               servers), per step: what a step costs on a machine with spare cores
Targets (issue 21): reset <= 150 ms; every suite's episodes/min >= 1/1.5 of the back office's. Episode
lengths differ between suites, so steps/min is printed beside episodes/min. The annotation studio (Label
Studio, a single-page app; make labelstudio) runs with its tests' settle cap (COLLECT_ARGS).
"""
import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import collect  # noqa: E402
import metrics  # noqa: E402

SEED = 4100   # the data seed of every measurement (its databases are built before any timing)
# a suite's own collect.py options: Label Studio's pages wait on several API answers in turn, later than the
# protocol's 2 s settle cap on two busy cores (tests/test_labelstudio_suite.py's expert_run)
COLLECT_ARGS = {"labelstudio": ["--settle-cap-ms", "8000"]}


def first_task_per_template(env):
    first = {}
    for name in env.all_tasks():
        first.setdefault(env.tasks[name]["template"], name)
    return sorted(first.values())


async def time_resets(env, task, n):
    """Median ms of n resets of `task` in one open page (the first, which starts the server, left out)."""
    from playwright.async_api import async_playwright
    await env.database(SEED)
    async with async_playwright() as pw:
        browser = collect.Browser(pw, headless=True)
        ctx, page = await collect.new_page(await browser.get(), env, [])
        await env.reset(page, task, SEED)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await env.reset(page, task, SEED)
            times.append((time.perf_counter() - t0) * 1000)
        await ctx.close()
        await browser.close()
    return round(statistics.median(times), 1)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_collect(suite, tasks, workers, out):
    """collect.py in a subprocess: its wall time, and the CPU of it and of every process it started."""
    cmd = [sys.executable, os.path.join(ROOT, "collect.py"), "--suite", suite, "--tasks", ",".join(tasks),
           "--episodes", "1", "--seed", str(SEED), "--workers", str(workers), "--out", out, "--no-progress",
           *COLLECT_ARGS.get(suite, [])]
    cpu0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{suite}: collect.py failed:\n{proc.stderr[-2000:]}")
    eps = metrics.load_dataset(out)
    steps = sum(len(e["steps"]) for e in eps)
    return {"workers": workers, "episodes": len(eps), "steps": steps, "seconds": round(wall, 1),
            "episodes_per_min": round(60 * len(eps) / wall, 2), "steps_per_min": round(60 * steps / wall, 1),
            "cpu_s_per_step": round(cpu / steps, 3), "success": sum(e["success"] for e in eps) / len(eps)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suites", default="backoffice,helpdesk,shop,cms,labelstudio",
                   help="comma-separated, the first the baseline")
    p.add_argument("--workers", default="1,2", help="worker counts of the throughput runs")
    p.add_argument("--resets", type=int, default=20, help="timed resets per suite")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "django_suites.json"))
    a = p.parse_args()
    suites, report = a.suites.split(","), {}
    for suite in suites:
        env = collect.make_env(suite)
        try:
            tasks = first_task_per_template(env)
            reset_ms = asyncio.run(time_resets(env, tasks[0], a.resets))
        finally:
            env.close()
        runs = []
        for w in (int(x) for x in a.workers.split(",")):
            with tempfile.TemporaryDirectory() as out:
                runs.append(run_collect(suite, tasks, w, os.path.join(out, "data")))
        report[suite] = {"tasks": tasks, "reset_ms": reset_ms, "runs": runs}
    base = report[suites[0]]["runs"]
    print(f"{'suite':<12} {'reset ms':>9} {'workers':>7} {'ep/min':>7} {'vs ' + suites[0]:>15} "
          f"{'steps/min':>9} {'cpu s/step':>10} {'success':>7}")
    for suite, r in report.items():
        for run, b in zip(r["runs"], base):
            run["ratio_to_baseline"] = round(run["episodes_per_min"] / b["episodes_per_min"], 2)
            print(f"{suite:<12} {r['reset_ms']:>9} {run['workers']:>7} {run['episodes_per_min']:>7} "
                  f"{run['ratio_to_baseline']:>15} {run['steps_per_min']:>9} {run['cpu_s_per_step']:>10} "
                  f"{run['success']:>7.2f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
