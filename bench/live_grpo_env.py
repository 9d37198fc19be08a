"""bench/live_grpo_env.py -- the environment's share of a live-mode GRPO step (issue 14).

  python bench/live_grpo_env.py [--steps 4]

train_grpo.py --env live with the tiny model on four MiniWoB++ tasks (4 prompts x G=4 per step, episodes
of up to 4 steps). The time inside the model's sample() is the model's; the rest of the rollout
(live_episodes) is the environment's: browser contexts, resets, actions, settles, observations (and the
sampler's 20 ms batching waits). Prints per-step seconds and the environment's share of the whole step;
writes bench/out/live_grpo_env.json. Run it on two commits to compare them.
"""
import argparse
import contextlib
import inspect
import io
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import collect  # noqa: E402
import metrics  # noqa: E402
import train_grpo  # noqa: E402
import train_sft  # noqa: E402

TASKS = "click-button,enter-text,login-user,click-checkboxes"
spent = {"model": 0.0, "rollout": 0.0}


def timed(fn, key):
    """fn (a function or a coroutine function) wrapped to add its wall time to spent[key]."""
    if inspect.iscoroutinefunction(fn):
        async def run(*a, **k):
            t = time.perf_counter()
            try:
                return await fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
        return run

    def sync(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    return sync


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=4, help="GRPO steps")
    a = p.parse_args()
    train_grpo.sample = timed(train_grpo.sample, "model")
    train_grpo.live_episodes = timed(train_grpo.live_episodes, "rollout")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = train_sft.build_tiny(os.path.join(tmp, "tiny"), "qwen2_5_vl", size="test")
        data = os.path.join(tmp, "miniwob")
        with contextlib.redirect_stdout(io.StringIO()):
            collect.main(["--tasks", TASKS, "--episodes", "2", "--seed", "3", "--out", data, "--no-progress"])
        eps = metrics.load_dataset(data)
        for ep in eps:   # usable steps for GRPO: any guide, auto-verified
            for s in ep["steps"]:
                s["guide"], s["guide_status"] = "Do the next step.", "auto"
        metrics.write_dataset(data, eps)
        out = os.path.join(tmp, "grpo")
        with contextlib.redirect_stdout(io.StringIO()):
            train_grpo.main(["--ckpt", ckpt, "--data", data, "--out", out, "--no-progress", "--split", "all",
                             "--env", "live", "--suite", "miniwob", "--prompts-per-step", "4", "--group-size", "4",
                             "--episode-steps", "4", "--max-new-tokens", "12", "--max-steps", str(a.steps)])
        with open(out + ".log.jsonl") as f:
            log = [json.loads(line) for line in f]
    n, step_s = len(log), sum(r["dt"] for r in log)
    env_s = spent["rollout"] - spent["model"]
    report = {"steps": n, "step_s": round(step_s / n, 2), "rollout_s": round(spent["rollout"] / n, 2),
              "model_sample_s": round(spent["model"] / n, 2), "env_s": round(env_s / n, 2),
              "env_share": round(env_s / step_s, 3), "cpus": os.cpu_count()}
    print(f"live GRPO step: {report['step_s']} s, of which environment {report['env_s']} s "
          f"({100 * report['env_share']:.0f}%), model sampling {report['model_sample_s']} s")
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "live_grpo_env.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
