"""experiments/live_faults.py -- the two faults that keep a small agent under the random policy live (issue 52),
counted in evaluate.py runs: typed values the task never names (the agent types a name it remembers instead of
the one the task gives), and episodes stuck on one action (the same action three times in a row).

  python experiments/live_faults.py runs/nano/live/sft_guide_first_s0 runs/nano/live/floor/random

Per run: episodes and success, the typed values and the share found in the task's instruction (as typed, case
and all), the episodes stuck and the invalid replies. --json writes the same as one JSON object per run.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import metrics  # noqa: E402

STUCK = 3   # the same action this many times in a row: the page did not move on and neither did the agent


def action_key(action):
    return action["op"], action.get("mark"), tuple(action.get("point") or ()), action.get("value")


def stuck(steps):
    """True when some action repeats STUCK times in a row (an unparseable reply never counts as one)."""
    run, last = 0, None
    for s in steps:
        key = None if s.get("exec_error") == metrics.UNPARSEABLE else action_key(s["action"])
        run = run + 1 if key is not None and key == last else 1
        last = key
        if key is not None and run >= STUCK:
            return True
    return False


def faults(episodes):
    typed = [(ep["instruction"], s["action"]["value"]) for ep in episodes for s in ep["steps"]
             if s["action"]["op"] == "type" and s["action"].get("value")]
    steps = [s for ep in episodes for s in ep["steps"]]
    n = len(episodes)
    return {"episodes": n, "success": sum(bool(ep["success"]) for ep in episodes) / max(1, n),
            "typed": len(typed), "copied": sum(v in i for i, v in typed) / len(typed) if typed else None,
            "stuck": sum(stuck(ep["steps"]) for ep in episodes) / max(1, n),
            "invalid": sum(s.get("exec_error") == metrics.UNPARSEABLE for s in steps) / max(1, len(steps))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="evaluate.py --out folders")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = {run: faults(metrics.load_dataset_or_exit(run)) for run in args.runs}
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"{'run':48} {'episodes':>8} {'success':>8} {'typed':>6} {'copied':>7} {'stuck':>6} {'invalid':>8}")
    for run, r in rows.items():
        copied = "-" if r["copied"] is None else f"{r['copied']:.1%}"
        print(f"{run[-48:]:48} {r['episodes']:>8} {r['success']:>8.1%} {r['typed']:>6} {copied:>7} "
              f"{r['stuck']:>6.1%} {r['invalid']:>8.1%}")
    return rows


if __name__ == "__main__":
    main()
