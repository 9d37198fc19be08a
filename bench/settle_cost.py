"""bench/settle_cost.py -- what a race-free step costs (issue 38), against the old settle in the same run.

  python bench/settle_cost.py                       (~10 min on 2 cores; writes bench/out/settle_cost.json)
  python bench/settle_cost.py --suites miniwob --seeds 2     (a quick look)

new  the settle also waits for the page's images (complete and decoded), then the step is observed again until
     two consecutive observations agree: screenshot bytes and element list (collect.observe_agreed)
old  the settle of commit cb438b4 (assets/init.js as it was, read with git) and one observation per step

The same expert episodes (every expert task of each suite, or its first --max-tasks; --seeds seeds each) are
collected under both, in alternating rounds (old, new, old, new ...), one worker, so load drifts alike on
both. Printed per suite: seconds per step of each, the ratio new/old, the observations per step under new and
the steps that never agreed (meta.unsettled). Both runs should record the same data: a differing episode is
listed.
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import collect  # noqa: E402
import metrics  # noqa: E402

OLD = "cb438b4"   # main before issue 38: the settle without the image wait, one observation per step


def old_init_js():
    text = subprocess.run(["git", "-C", ROOT, "show", f"{OLD}:assets/init.js"], capture_output=True, text=True,
                          check=True).stdout
    knobs = metrics.OBSERVATION_JS["INIT_JS"][1]
    return __import__("string").Template(text).substitute({k: json.dumps(v) for k, v in knobs.items()})


def collect_once(suite, tasks, seeds, out, mode, counts):
    """One round: the suite's expert episodes into `out` under `mode` -> (seconds, steps)."""
    new_js, agreed = metrics.INIT_JS, collect.observe_agreed
    if mode == "old":
        metrics.INIT_JS = OLD_JS

        async def once(page, env, cap_ms, quiet_ms):
            return (*await collect.observe(page, env), True)
        collect.observe_agreed = once
    else:
        async def counted(page, env, cap_ms, quiet_ms):
            real = collect.observe
            async def observe(page, env):   # noqa: E306 -- counts the observations of this step
                counts["observations"] += 1
                return await real(page, env)
            collect.observe = observe
            try:
                return await agreed(page, env, cap_ms, quiet_ms)
            finally:
                collect.observe = real
        collect.observe_agreed = counted
    env = collect.make_env(suite)
    try:
        t0 = time.perf_counter()
        asyncio.run(collect.run_episodes(env, [(t, s) for t in tasks for s in seeds],
                                         lambda task, seed: collect.make_policy("expert", env, task, seed), out,
                                         **collect.RUN_DEFAULTS, progress=False))
        dt = time.perf_counter() - t0
    finally:
        env.close()
        metrics.INIT_JS, collect.observe_agreed = new_js, agreed
    episodes = metrics.load_dataset(out)
    return dt, sum(len(ep["steps"]) for ep in episodes), episodes


def bench_suite(suite, seeds, rounds, tmp, max_tasks=None):
    env = collect.make_env(suite)
    tasks = [t for t in env.all_tasks() if env.expert(t)][:max_tasks]
    env.close()
    row = {"suite": suite, "episodes": len(tasks) * len(seeds)}
    counts = {"observations": 0}
    time_of = {"old": 0.0, "new": 0.0}
    steps_of = {"old": 0, "new": 0}
    data = {}
    collect_once(suite, tasks[:1], seeds, os.path.join(tmp, f"{suite}-warm"), "new", dict(counts))  # data, caches
    for r in range(rounds):
        for mode in ("old", "new"):
            dt, steps, episodes = collect_once(suite, tasks, seeds, os.path.join(tmp, f"{suite}-{mode}-{r}"),
                                               mode, counts)
            time_of[mode] += dt
            steps_of[mode] += steps
            data[mode, r] = ({ep["id"]: {k: v for k, v in ep.items() if k not in ("meta", "_root")}
                              for ep in episodes}, sum(len(ep["meta"].get("unsettled", [])) for ep in episodes))
    old = {i for r in range(rounds) for i, ep in data["old", r][0].items() if ep != data["old", 0][0][i]}
    new = {i for r in range(rounds) for i, ep in data["new", r][0].items() if ep != data["old", 0][0][i]}
    row.update(steps=steps_of["new"] // rounds,
               old_s_per_step=round(time_of["old"] / steps_of["old"], 4),
               new_s_per_step=round(time_of["new"] / steps_of["new"], 4),
               observations_per_step=round(counts["observations"] / steps_of["new"], 3),
               unsettled_steps=sum(data["new", r][1] for r in range(rounds)),
               differing_episodes_old=sorted(old), differing_episodes_new=sorted(new - old))
    row["ratio"] = round(row["new_s_per_step"] / row["old_s_per_step"], 3)
    return row


def main():
    global OLD_JS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", default="miniwob,backoffice")
    p.add_argument("--seeds", type=int, default=1, help="seeds per task (4100, 4101, ...)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds of old and new")
    p.add_argument("--max-tasks", type=int, default=None, help="the first N expert tasks of each suite")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "settle_cost.json"))
    a = p.parse_args()
    OLD_JS = old_init_js()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for suite in a.suites.split(","):
            rows.append(bench_suite(suite, range(4100, 4100 + a.seeds), a.rounds, tmp, a.max_tasks))
            r = rows[-1]
            print(f"{suite:<11} {r['episodes']:>4} episodes {r['steps']:>5} steps  old {r['old_s_per_step']:.3f} "
                  f"s/step  new {r['new_s_per_step']:.3f} s/step  ratio {r['ratio']:.2f}x  "
                  f"{r['observations_per_step']:.2f} observations/step  {r['unsettled_steps']} unsettled  "
                  f"differ: old runs {r['differing_episodes_old']}, new only {r['differing_episodes_new']}",
                  flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"baseline": f"settle of {OLD}, one observation", "rows": rows}, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
