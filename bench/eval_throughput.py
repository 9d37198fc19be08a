"""bench/eval_throughput.py -- live evaluation throughput on the back office, and evaluate.py's own overhead.

  python bench/eval_throughput.py                      (~3 min on 2 idle cores; writes bench/out/eval_throughput.json)
  python bench/eval_throughput.py --tasks close-ticket,deactivate-product --repeats 1   (a quick look)

In one run, on the same tasks and seeds (expert policy; seeded databases built before any timing):
  throughput   evaluate.py end to end (browser, one Django server per worker, episodes, results.json,
               report.html) with 1, 2 and 4 workers, in episodes per minute
  overhead     the same episodes with collect.py, one worker: the baseline (alternated with evaluate.py's
               one-worker run, --repeats times, the fastest of each counting: the machine may be shared).
               (evaluate - collect) / steps is what evaluate.py adds per step beyond the environment loop
               it shares with collect.py; the scoring and report writing are also timed on their own
  api path     what a model policy costs per step besides the model: Set-of-Mark drawing, the prompt
               (metrics.build_messages), PNG + base64 data URL, one HTTP round trip to an instant local
               endpoint, parsing -- over the recorded steps, against the median environment step time
"""
import argparse
import asyncio
import http.server
import json
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import collect  # noqa: E402
import evaluate  # noqa: E402
import metrics  # noqa: E402


def warm_databases(seeds):
    """Build (or find cached) the seeded databases, so no timed run pays for a build."""
    env = collect.make_env("backoffice")

    async def build():
        for s in seeds:
            await env.database(s)
    try:
        asyncio.run(build())
    finally:
        env.close()


def timed(fn, argv):
    t = time.perf_counter()
    out = fn(argv)
    return out, time.perf_counter() - t


def run_eval(tasks, episodes, seed, workers, out):
    res, wall = timed(evaluate.main, ["--suite", "backoffice", "--policy", "expert", "--tasks", tasks,
                                      "--episodes", str(episodes), "--seed", str(seed), "--workers", str(workers),
                                      "--out", out, "--no-progress"])
    return {"workers": workers, "episodes": res["episodes"], "steps": res["steps"], "seconds": round(wall, 2),
            "episodes_per_min": round(60 * res["episodes"] / wall, 1), "steps_per_s": round(res["steps"] / wall, 2),
            "success": res["overall"]["success"]["micro"], "errors": res["errors"],
            "error_messages": [f"{r['id']}: {r['error']}" for r in res["per_episode"] if r["error"]]}


class InstantAPI:
    """A local OpenAI-compatible endpoint that answers at once: the round trip is all transport."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                reply = "Guide: Click **Save**.\nAction: click(3)"
                body = json.dumps({"choices": [{"message": {"content": reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def api_path(run_dir, grounding, max_steps):
    """Median ms per step of each part of the api policy's work, over the run's recorded steps."""
    api = InstantAPI()
    parts = {"som_and_prompt": [], "data_url": [], "http_round_trip": [], "parse": []}
    try:
        steps = list(metrics.iter_steps(metrics.load_dataset(run_dir)))[:max_steps]
        for ep, k in steps:
            with open(os.path.join(ep["_root"], ep["steps"][k]["screenshot"]), "rb") as f:
                png = f.read()  # what the policy gets from the browser
            t0 = time.perf_counter()
            img = metrics.step_image(ep, k, grounding, png)
            msgs = metrics.build_messages(ep, k, grounding, "guide_first", image=img)
            t1 = time.perf_counter()
            msgs = metrics.openai_messages(msgs)
            t2 = time.perf_counter()
            text = metrics.chat_completion(api.base, "bench", msgs, retries=0)
            t3 = time.perf_counter()
            metrics.parse_output(text, grounding, "guide_first", ep["viewport"])
            t4 = time.perf_counter()
            for name, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                parts[name].append(1000 * dt)
    finally:
        api.close()
    out = {k: round(statistics.median(v), 2) for k, v in parts.items()}
    out["total"] = round(sum(out.values()), 2)
    out["n_steps"] = len(steps)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", help="back-office tasks (comma-separated, or all: 36 tasks, a long run)",
                   default="update-customer-contact,mark-orders-paid,close-ticket,deactivate-product,count-unpaid-orders")
    p.add_argument("--episodes", type=int, default=1, help="seeds per task in every setting")
    p.add_argument("--seed", type=int, default=2000, help="first seed (unseen by the experts' authors)")
    p.add_argument("--workers", default="1,2,4", help="worker counts to time")
    p.add_argument("--repeats", type=int, default=2,
                   help="alternated collect/evaluate runs with one worker (the fastest counts)")
    p.add_argument("--api-steps", type=int, default=60, help="recorded steps to time the api path on")
    a = p.parse_args()
    report = {"tasks": a.tasks, "episodes_per_task": a.episodes, "seeds": f"{a.seed}-{a.seed + a.episodes - 1}",
              "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}
    warm_databases(range(a.seed, a.seed + a.episodes))
    workers = [int(x) for x in a.workers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        # baseline and evaluate with one worker, alternated and repeated: on a shared machine the load
        # moves between runs, and the fastest of each is the closest to its own cost
        base, ones = [], []
        for i in range(a.repeats):
            summary, wall = timed(collect.main, ["--suite", "backoffice", "--policy", "expert", "--tasks", a.tasks,
                                                 "--episodes", str(a.episodes), "--seed", str(a.seed), "--workers", "1",
                                                 "--out", os.path.join(tmp, f"collect-{i}"), "--no-progress"])
            base.append({"episodes": summary["episodes"], "steps": round(summary["episodes"] * summary["mean_steps"]),
                         "seconds": round(wall, 2), "episodes_per_min": round(60 * summary["episodes"] / wall, 1)})
            row = run_eval(a.tasks, a.episodes, a.seed, 1, os.path.join(tmp, f"eval-1-{i}"))
            ones.append(row | {"dir": f"eval-1-{i}"})
        c, one = min(base, key=lambda r: r["seconds"]), min(ones, key=lambda r: r["seconds"])
        report["collect_1_worker"] = c
        report["throughput"] = [{k: v for k, v in one.items() if k != "dir"}] if 1 in workers else []
        for w in workers:
            if w != 1:
                report["throughput"].append(run_eval(a.tasks, a.episodes, a.seed, w, os.path.join(tmp, f"eval-{w}")))
        run1 = os.path.join(tmp, one["dir"])
        eps = metrics.load_dataset(run1)
        env_step_ms = statistics.median(1000 * e["meta"]["seconds"] / len(e["steps"]) for e in eps if e["steps"])
        cfg = json.load(open(os.path.join(run1, "run.json")))
        t = time.perf_counter()
        evaluate.write_results(argparse.Namespace(out=run1, n_boot=1000), cfg, [e["id"] for e in eps])
        write_ms = 1000 * (time.perf_counter() - t)
        report["overhead"] = {"episode_seconds_per_step_median_ms": round(env_step_ms, 1),
                              "results_and_report_ms": round(write_ms, 1),
                              "results_and_report_ms_per_step": round(write_ms / max(1, one["steps"]), 2),
                              "eval_vs_collect_wall_ratio": round(one["seconds"] / c["seconds"], 3),
                              "eval_minus_collect_ms_per_step":
                                  round(1000 * (one["seconds"] - c["seconds"]) / one["steps"], 1)}
        report["api_path_ms"] = {g: api_path(run1, g, a.api_steps) for g in ("som", "coord")}
    report["loadavg_end"] = os.getloadavg()[0]
    o, c = report["overhead"], report["collect_1_worker"]
    for row in report["throughput"]:
        print(f"evaluate: {row['workers']} worker(s)  {row['episodes_per_min']} episodes/min  "
              f"({row['episodes']} episodes, "
              f"{row['steps']} steps in {row['seconds']} s, success {row['success']:.2f}, errors {row['errors']})"
              + ("  [target >= 40 episodes/min at 2 workers, issue 14]" if row["workers"] == 2 else "")
              + "".join(f"\n    error {m}" for m in row["error_messages"]))
    print(f"baseline collect.py, 1 worker: {c['episodes_per_min']} episodes/min "
          f"({c['steps']} steps in {c['seconds']} s); evaluate/collect wall {o['eval_vs_collect_wall_ratio']}x "
          f"({o['eval_minus_collect_ms_per_step']:+} ms per step)")
    print(f"scoring + results.json + report.html: {o['results_and_report_ms']} ms in all, "
          f"{o['results_and_report_ms_per_step']} ms per step")
    for g, v in report["api_path_ms"].items():
        print(f"api path ({g}), median ms per step: {v}  = {v['total'] / o['episode_seconds_per_step_median_ms']:.2f}x "
              f"the environment's time per step ({o['episode_seconds_per_step_median_ms']} ms)")
    print(f"load average (1 min) {report['loadavg_start']:.1f} at the start, {report['loadavg_end']:.1f} at the end, "
          f"on {report['cpus']} cpus")
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "eval_throughput.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
