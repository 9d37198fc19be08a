"""experiments/baseline.py -- MAG-Bench's own baseline (issue 54): make nano's recipe trained on a benchmark's
train split, scored on its test split suite by suite, offline and live, beside the expert and the random policy.

The runs, each a subprocess of a stage script (reproduce.py's runner: a rerun skips what finished and resumes a
training run from its last save):

  data/train, val, test    collect.py --benchmark B --split S: built, then checked byte for byte against the
                           definition (--splits-from DIR: DIR/train, DIR/val, DIR/test built before, linked, checked)
  data/trainval            train and val in one folder (their screenshots hard-linked): the episodes keep their
                           split, so train_sft.py trains on train and scores val
  ckpt/sft                 train_sft.py, make nano's recipe (the 1.4M model, 1,800 steps of 16, lr 2e-3); every
                           --eval-every steps its step success on every val step, suite by suite (the curve)
  replay/sft, gold, random replay.py --benchmark B on the test split (gold: the expert's recorded steps)
  live/sft, expert, random evaluate.py --benchmark B: the test split's episodes, live (--no-live: none)

and then results.json (every number and interval), table.md (README's rows) and curve.png in --out.

Runbook
  python experiments/baseline.py --out runs/baseline_v1.2                 # make baseline: builds the splits
  python experiments/baseline.py --splits-from data/v1.2 --out runs/b    # data/v1.2/{train,val,test} exist
  # main's harness builds and plays v1.2 (its observation); v1.1's splits are v1.1's commit's (docs/benchmark.md)
  python experiments/baseline.py --sft-steps 3600 --out runs/baseline_3600   # a larger budget, same data
"""
import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
import reproduce  # noqa: E402  (its runner: execute, the done records, resume)

import metrics  # noqa: E402

SPLITS = ("train", "val", "test")
OFFLINE = {"sft": ["--ckpt", "ckpt/sft"], "gold": ["--baseline", "gold"], "random": ["--baseline", "random"]}
LIVE = {"sft": ["--policy", "ckpt", "--ckpt", "ckpt/sft"], "expert": ["--policy", "expert"],
        "random": ["--policy", "random"]}
SHOWN = (("step", "step success"), ("joint", "joint step"), ("element", "element accuracy"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benchmark", default="mag-v1.2", help="a definition's name (tasks/<name>.json) or path")
    p.add_argument("--out", default=None, help="the study folder (default runs/baseline_<benchmark>)")
    p.add_argument("--splits-from", default=None,
                   help="a folder holding the splits built before (train/, val/, test/): linked, then checked")
    p.add_argument("--workers", type=int, default=2, help="browser workers of a build or a live run")
    p.add_argument("--jobs", type=int, default=2, help="CPU cores the runs share")
    p.add_argument("--threads", type=int, default=1, help="torch threads of a replay run")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the stage scripts")
    p.add_argument("--no-live", action="store_true", help="offline only: no live runs")
    # make nano's recipe (experiments/reproduce.py RECIPES["nano"]), chosen there on a val split
    p.add_argument("--ckpt", default="tiny:nano", help="starting model (train_sft.py --ckpt)")
    p.add_argument("--elements", default="text", choices=["none", "text"])
    p.add_argument("--sft-steps", type=int, default=1800)
    p.add_argument("--sft-lr", type=float, default=2e-3)
    p.add_argument("--sft-warmup", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=300, help="SFT steps between two points of the val curve")
    p.add_argument("--max-new-tokens", type=int, default=96)
    a = p.parse_args(argv)
    bench = metrics.load_benchmark(a.benchmark)
    if missing := [s for s in SPLITS if s not in bench["splits"]]:
        p.error(f"{a.benchmark} has no {' or '.join(missing)} split: a baseline trains on train, chooses on val")
    a.out = a.out or f"runs/baseline_{bench['benchmark']}"
    return a


def plan(a):
    """Every run, each after the runs it needs."""
    py, stage = a.python, lambda s: str(HERE.parent / s)
    definition = str(Path(metrics.load_benchmark(a.benchmark)["path"]))
    runs = []

    def run(name, cmd, needs=(), threads=a.threads):
        runs.append({"name": name, "cmds": [cmd], "needs": list(needs), "threads": threads})

    for split in SPLITS:   # a build takes the cores its browser workers use
        run(f"data/{split}", [py, stage("collect.py"), "--benchmark", definition, "--split", split, "--out",
                              f"data/{split}", "--workers", str(a.workers), "--resume", "--no-progress"],
            threads=a.jobs)
    run("data/trainval", [py, str(Path(__file__).resolve()), "join", "data/trainval", "data/train", "data/val"],
        ["data/train", "data/val"])
    run("ckpt/sft", [py, stage("train_sft.py"), "--data", "data/trainval", "--ckpt", a.ckpt, "--elements",
                     a.elements, "--lr", str(a.sft_lr), "--warmup", str(a.sft_warmup), "--batch-size",
                     str(a.batch_size), "--max-steps", str(a.sft_steps), "--eval-every", str(a.eval_every),
                     "--eval-gen-n", str(10 ** 9), "--eval-loss-n", "256", "--max-new-tokens",
                     str(a.max_new_tokens), "--save-every", str(min(a.sft_steps, reproduce.SFT_SAVE_EVERY)),
                     "--out", "ckpt/sft", "--no-progress"], ["data/trainval"], threads=a.jobs)
    for name, how in OFFLINE.items():
        run(f"replay/{name}", [py, stage("replay.py"), "--benchmark", definition, *how, "--data", "data/test",
                               "--max-new-tokens", str(a.max_new_tokens), "--out", f"replay/{name}",
                               "--no-progress"], ["data/test"] + (["ckpt/sft"] if name == "sft" else []))
    for name, how in {} if a.no_live else LIVE.items():
        run(f"live/{name}", [py, stage("evaluate.py"), "--benchmark", definition, *how, "--max-new-tokens",
                             str(a.max_new_tokens), "--workers", str(a.workers), "--out", f"live/{name}",
                             "--no-progress"], ["ckpt/sft"] if name == "sft" else [], threads=a.jobs)
    return runs


def join(out, sources):
    """Dataset folders side by side in a new one, `out`: their episodes.jsonl lines one after the other,
    their screenshots hard-linked (copied across file systems); written aside, then renamed into place."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "img").mkdir(parents=True)
    with open(tmp / "episodes.jsonl", "w", encoding="utf-8") as f:
        for src in map(Path, sources):
            for ep in metrics.load_dataset_or_exit(str(src), check_images=True):   # a bad line: named, exit
                f.write(json.dumps({k: v for k, v in ep.items() if not k.startswith("_")}, ensure_ascii=False)
                        + "\n")
                shutil.copytree(src / "img" / ep["id"], tmp / "img" / ep["id"], copy_function=link_or_copy)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_splits(a, out):
    """--splits-from: each split's folder linked as data/<split> (its build run then only checks it)."""
    (out / "data").mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        source, link = Path(a.splits_from).resolve() / split, out / "data" / split
        if not (source / "episodes.jsonl").exists():
            raise SystemExit(f"baseline: --splits-from {a.splits_from}: no {split} split there ({source})")
        if link.is_symlink() and link.resolve() != source:
            link.unlink()
        if not link.exists():
            link.symlink_to(source, target_is_directory=True)


# ----------------------------------------------------------------------------------------------
# The report: every number from the runs' own files, so it can be redone without rerunning anything.

def offline_rows(out):
    """{policy: {suite: {metric: [value, lo, hi]}}} from replay.py's benchmark scores, in percent."""
    rows = {}
    for name in OFFLINE:
        scores = json.loads((out / "replay" / name / "results.json").read_text())["benchmark"]["scores"]
        rows[name] = {suite: {m: None if s[m]["micro"] is None else
                              [100 * s[m]["micro"], *(100 * v for v in s[m]["micro_ci"])]
                              for m, _ in SHOWN} for suite, s in scores.items()}
    return rows


def live_rows(out):
    """{policy: {suite: {"success": [value, lo, hi], "episodes": n}}} from evaluate.py's results, in percent."""
    rows = {}
    for name in LIVE:
        path = out / "live" / name / "results.json"
        if not path.exists():
            continue
        res = json.loads(path.read_text())
        parts = {**res["by_suite"], "overall": res["overall"]}
        rows[name] = {suite: {"success": [100 * o["success"]["micro"], *(100 * v for v in o["success"]["micro_ci"])],
                              "episodes": o["success"]["n"]} for suite, o in parts.items()}
    return rows


def curve(out):
    """[{step, val_step_acc, val_step_by_suite}] from train_sft.py's log: the val points of the SFT run."""
    path = out / "ckpt" / "sft.log.jsonl"
    points = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: r[k] for k in ("step", "val_step_acc", "val_step_by_suite")} for r in points if "val_step_acc" in r]


def table(bench, offline, live, ckpt):
    """README's rows: per suite, offline step success / joint step, and live task success."""
    suites = [*bench["suites"], "overall"]
    fmt = lambda cell: "-" if cell is None else f"{cell[0]:.1f}"   # noqa: E731
    lines = [f"| policy | | {' | '.join(suites[:-1])} | all |", "|---|---|" + "---|" * len(suites)]
    sft = "nano SFT (this baseline)" if ckpt == "tiny:nano" else f"SFT from {ckpt} (this baseline)"
    names = {"sft": sft, "gold": "expert", "expert": "expert", "random": "random"}
    for name, rows in offline.items():
        cells = [f"{fmt(rows[s]['step'])} / {fmt(rows[s]['joint'])}" if s in rows else "-" for s in suites]
        lines.append(f"| {names[name]} | offline | {' | '.join(cells)} |")
    for name, rows in live.items():
        cells = [fmt(rows[s]["success"]) if s in rows else "-" for s in suites]
        lines.append(f"| {names[name]} | live | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def plot(out, points):
    """val step success against SFT step, one line per suite and one for all."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    steps = [p["step"] for p in points]
    for suite in sorted({s for p in points for s in p["val_step_by_suite"]}):
        ax.plot(steps, [100 * p["val_step_by_suite"].get(suite, float("nan")) for p in points], marker=".",
                label=suite)
    ax.plot(steps, [100 * p["val_step_acc"] for p in points], color="black", linewidth=2, label="all")
    ax.set(xlabel="SFT step", ylabel="val step success, %", title="What the SFT budget buys, suite by suite")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=120)
    plt.close(fig)


def report(out, a):
    bench = metrics.load_benchmark(a.benchmark)
    offline, live, points = offline_rows(out), live_rows(out), curve(out)
    res = {"benchmark": bench["benchmark"], "version": bench["version"], "recipe": {
        k: getattr(a, k) for k in ("ckpt", "elements", "sft_steps", "sft_lr", "sft_warmup", "batch_size")},
           "offline": offline, "live": live, "curve": points}
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "table.md").write_text(table(bench, offline, live, a.ckpt))
    if points:
        plot(out, points)
    print((out / "table.md").read_text())
    return res


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["join"]:   # the data/trainval run: join OUT SOURCE...
        return join(argv[1], argv[2:])
    a = parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if a.splits_from:
        link_splits(a, out)
    runs = plan(a)
    t0 = time.time()
    try:
        reproduce.execute(runs, a, out)
    except KeyboardInterrupt:
        raise SystemExit(f"baseline: stopped; finished runs are kept in {out}: the same command continues")
    print(f"baseline: {len(runs)} runs finished ({time.time() - t0:.0f} s this time)", file=sys.stderr)
    return report(out, a)


if __name__ == "__main__":
    main()
