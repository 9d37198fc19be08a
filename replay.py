"""replay.py -- the deterministic offline benchmark (WebMRE protocol) and its comparison table.

Every step of a split is replayed from its recorded screenshot and the gold history: the model
writes its reply greedily and metrics.py scores it against the gold step. Same checkpoint + same
data + same options -> byte-identical results.json: greedy decoding, fixed preprocessing, a
fixed batch composition (steps sorted by episode id and step), deterministic algorithms, and no
timestamps in the file.

Runbook
  # CPU, the checkpoint train_sft.py wrote (grounding/order/elements default to its training config):
  python replay.py --ckpt ckpt/sft --data demo/miniwob --split test --out runs/replay_sft
  # stopped (Ctrl-C, a kill, a lost machine)? the same command continues from the last whole batch
  # decoding orders: the mutual-reinforcement comparison is a guide order against action_only
  python replay.py --ckpt ckpt/sft --data data/X --order action_only --out runs/replay_ao
  # mediation probes: force a guide as the decoding prefix, let the model write the action
  python replay.py --ckpt ckpt/sft --data data/X --probe gold|other_step|paraphrase --out runs/replay_gold
  # one GPU (bf16, FlashAttention-2 when installed); several GPUs: one replay per GPU, different --split
  CUDA_VISIBLE_DEVICES=0 python replay.py --ckpt ckpt/sft --data data/X --batch-size 32 --out runs/replay_gpu
  # two runs side by side, with paired bootstrap confidence intervals:
  python replay.py compare runs/replay_sft runs/replay_ao
  # several checkpoints in one table (offline scores, and live success from evaluate.py runs):
  python replay.py table SFT:runs/replay_sft:runs/live_sft GRPO:runs/replay_grpo:runs/live_grpo
  # MAG-Bench: the benchmark's test split as collect.py --benchmark built it (refused if it is not that data)
  python replay.py --benchmark mag-v1.1 --ckpt ckpt/sft --data data/v1.1-test --out runs/v1.1_sft
  # reference rows, no model: the recorded guide and action (ceiling), the random policy's draw (floor)
  python replay.py --benchmark mag-v1.1 --baseline gold|random --data data/v1.1-test --out runs/v1.1_random

Scores per step (metrics.score_step): element accuracy, operation F1, step success, guide
BLEU/ROUGE-L/chrF against the gold guide, guide grounding, joint step success; per episode the
offline task success (every step succeeds). Micro (over steps) and macro (over tasks) averages.

The offline guide reward: log p(gold action | the predicted guide) - log p(gold action | an
empty guide), teacher-forced in the same prompt and format. The empty guide keeps everything but
the guide's words fixed; it is out of distribution for a guide-first model, so the absolute
value reads best as a difference between checkpoints or probes, and GRPO uses it only within a
group (where the baseline term cancels). train_grpo.py reuses its first term, `action_logprobs`.

torchrun is not used: decoding is per-step independent, so shard by split or by task instead.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time

import metrics

PROTOCOL_VERSION = 1
PROBES = ("none", "gold", "other_step", "paraphrase")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default=None, help="a Hugging Face folder (e.g. what train_sft.py wrote)")
    p.add_argument("--baseline", default=None, choices=["gold", "random"],
                   help="in place of --ckpt, no model: gold replays the recorded guide and action (the "
                        "expert's row), random the random policy's draw per step (the chance floor)")
    p.add_argument("--data", required=True, help="dataset folder")
    p.add_argument("--split", default="test", help="episodes whose 'split' is this; 'all' = every episode")
    p.add_argument("--benchmark", default=None, metavar="NAME",
                   help="score a benchmark (tasks/NAME.json, or a path): --data must be its test split, byte "
                        "for byte (its fingerprint); results.json adds per-suite scores with intervals")
    p.add_argument("--other-browser", action="store_true",
                   help="with --benchmark: score data built on another Chromium (or observation snippets, or "
                        "that depart from the split) anyway; the results say they are not comparable")
    p.add_argument("--grounding", default=None, choices=metrics.GROUNDINGS,
                   help="default: the checkpoint's training config, else som")
    p.add_argument("--order", default=None, choices=metrics.ORDERS,
                   help="default: the checkpoint's, else guide_first")
    p.add_argument("--elements", default=None, choices=["none", "text"],
                   help="default: the checkpoint's, else none")
    p.add_argument("--probe", default="none", choices=PROBES,
                   help="force a guide prefix (guide_first order only)")
    p.add_argument("--guide-reward", default="auto", choices=["auto", "on", "off"],
                   help="auto: on for guide_first")
    p.add_argument("--batch-size", type=int, default=8,
                   help="steps decoded together (part of the protocol: fixed batches)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--limit", type=int, default=0, help="replay only the first N steps (smoke runs)")
    p.add_argument("--out", required=True, help="run folder: results.json, predictions.jsonl")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if (args.ckpt is None) == (args.baseline is None):
        p.error("give a checkpoint (--ckpt) or a baseline (--baseline gold|random)")
    if args.baseline and args.probe != "none":
        p.error("--probe forces a guide into a model's reply: a baseline has no model")
    if args.baseline == "random" and (args.grounding or args.order or args.elements):
        p.error("--baseline random is the live random policy: Set-of-Mark, action only, no other options")
    return args


# ----------------------------------------------------------------------------------------------
# Steps and probes.

def replay_steps(episodes, split):
    """Every step with a gold action, sorted by (episode id, step): the fixed order of the protocol."""
    items = [(ep, k) for ep in episodes if split == "all" or ep.get("split") == split
             for k, s in enumerate(ep["steps"]) if s["action"] is not None and not s.get("exec_error")]
    return sorted(items, key=lambda it: (it[0]["id"], it[1]))


def stable_index(key, n):
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % n


def probe_guide(probe, ep, k, pool):
    """The guide forced as the decoding prefix (None: no probe, or nothing to force for this step)."""
    step = ep["steps"][k]
    if probe == "gold":
        return step.get("guide") if step.get("guide_status") != "rejected" else None
    if probe == "paraphrase":
        return (step.get("guide_alt") or {}).get("paraphrase")
    if probe == "other_step":  # a guide from another episode, the same one on every run
        others = [g for (eid, _), g in pool if eid != ep["id"]]
        return others[stable_index(f"{ep['id']}:{k}", len(others))] if others else None
    return None


def guide_prefix(guide):
    """The reply's beginning when a guide is forced (guide_first order): the model writes the action."""
    return f"Guide: {guide}\nAction:" if guide else "Guide:\nAction:"


# ----------------------------------------------------------------------------------------------
# The replay.

def rounded(x):
    if isinstance(x, float):
        return round(x, 6)
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def replay_options(args):
    """The prompt options (the checkpoint's unless given) and the run's protocol options, checked."""
    trained = {"grounding": "som", "order": "action_only"} if args.baseline == "random" else \
        metrics.trained_options(args.ckpt) if args.ckpt else {}
    opts = metrics.prompt_options(args.grounding, args.order, args.elements, trained)
    opts.update(probe=args.probe, split=args.split, batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens, limit=args.limit)
    if args.probe != "none" and opts["order"] != "guide_first":
        raise SystemExit(
            f"--probe {args.probe} forces a guide before the action: it needs --order guide_first "
            f"(got {opts['order']})")
    if args.baseline:
        opts["baseline"], opts["guide_reward"] = args.baseline, False   # the reward needs a model
    elif args.guide_reward == "auto":   # on where the guide comes first
        opts["guide_reward"] = opts["order"] == "guide_first"
    else:
        opts["guide_reward"] = args.guide_reward == "on"
    if opts["guide_reward"] and opts["order"] != "guide_first":
        raise SystemExit("--guide-reward on needs --order guide_first "
                         "(the reward conditions the action on a guide written first)")
    return opts


def replay_items(args):
    """The (episode, step) pairs to replay and the guide each one is forced to start with (None: no probe)."""
    episodes = metrics.load_dataset_or_exit(args.data, check_images=True)
    items = replay_steps(episodes, args.split)
    if args.limit:
        items = items[:args.limit]
    if not items:
        raise SystemExit(f"{args.data}: no steps in split {args.split!r} "
                         "(annotate.py split assigns them; or --split all)")
    pool = [((ep["id"], k), ep["steps"][k]["guide"]) for ep, k in items if ep["steps"][k].get("guide")]
    forced = [probe_guide(args.probe, ep, k, pool) for ep, k in items]
    if args.probe != "none":
        skipped = sum(g is None for g in forced)
        items, forced = [it for it, g in zip(items, forced) if g], [g for g in forced if g]
        if not items:
            raise SystemExit(f"--probe {args.probe}: no step of split {args.split!r} has a guide to force")
        if skipped:
            print(f"probe {args.probe}: {skipped} steps have no guide to force and are left out",
                  file=sys.stderr)
    return items, forced


def predict(model, processor, batch, guides, opts, args):
    """One batch: the replies (after the forced guide, when probing), their scores, their guide rewards."""
    if args.baseline:
        outs = baseline_replies(batch, opts)
        return [scored(ep, k, None, out, None, opts) for (ep, k), out in zip(batch, outs)]
    prompts, images = map(list, zip(*(metrics.chat_prompt(processor, ep, k, opts) for ep, k in batch)))
    if args.probe != "none":
        prefixes = [guide_prefix(g) for g in guides]
        replies = generate(model, processor, [p + pre for p, pre in zip(prompts, prefixes)], images,
                           args.max_new_tokens)
        outs = [pre + o for pre, o in zip(prefixes, replies)]
    else:
        outs = generate(model, processor, prompts, images, args.max_new_tokens)
    rewards = [None] * len(batch)
    if opts["guide_reward"]:
        parsed = [metrics.parse_output(o, opts["grounding"], opts["order"], ep["viewport"])[0]
                  for o, (ep, _) in zip(outs, batch)]
        gold = [metrics.format_action(ep["steps"][k]["action"], opts["grounding"], ep["viewport"])
                for ep, k in batch]
        rewards = guide_reward(model, processor, prompts, images, [g or "" for g in parsed], gold)
    return [scored(ep, k, g, out, r, opts) for (ep, k), out, g, r in zip(batch, outs, guides, rewards)]


def scored(ep, k, forced_guide, out, reward, opts):
    """One step's prediction record: the reply and its scores against the gold step."""
    scores = metrics.score_step(out, ep["steps"][k], opts["grounding"], opts["order"], ep["viewport"])
    return {"id": ep["id"], "task": ep["task"], "step": k, "forced_guide": forced_guide, "output": out,
            "scores": scores, "guide_reward": reward}


def baseline_replies(batch, opts):
    """A reference policy's replies, no model: `gold` the recorded guide and action (what the expert did,
    so the scorer's ceiling), `random` the random policy's draw (metrics.random_action, seeded by the step
    so every run draws the same: the chance floor)."""
    outs = []
    for ep, k in batch:
        step = ep["steps"][k]
        if opts["baseline"] == "gold":
            guide, action = step.get("guide"), step["action"]
        else:
            rng = random.Random(f"{ep['id']}:{k}")
            guide, action = None, metrics.random_action(rng, [e["mark"] for e in step["elements"]])
        outs.append(metrics.format_output(guide, action, opts["grounding"], opts["order"], ep["viewport"]))
    return outs


# ----------------------------------------------------------------------------------------------
# A benchmark (metrics.py: MAG-Bench): only its own test split is scored, per suite and overall, with
# intervals from episodes resampled within their task (metrics.bootstrap, as evaluate.py's).

BENCHMARK_METRICS = ("step", "element", "op_f1", "guide_grounding", "joint")   # per step, then task_success


def data_protocol(args, bench):
    """Before any work: the browser and observation snippets the data were built with (its benchmark.json,
    where the build recorded them) against the definition's -> the problems (only under --other-browser)."""
    try:
        with open(os.path.join(args.data, "benchmark.json"), encoding="utf-8") as f:
            built = json.load(f)
    except (OSError, ValueError):   # an older build's folder: the fingerprint is the judge
        built = {}
    problems = metrics.protocol_problems(bench, built.get("browser"), built.get("observation"))
    if problems and not args.other_browser:
        raise SystemExit(f"--benchmark: {args.data} was built where {'; '.join(problems)}: its scores are "
                         f"not {bench['benchmark']}'s (--other-browser scores it anyway, marked so)")
    return problems


def check_benchmark(args):
    """The benchmark's definition and the data's fingerprint; exits unless --data is its test split (or
    --other-browser says to score it anyway: then the results say they are not comparable)."""
    if args.split != "test" or args.limit:
        raise SystemExit("--benchmark scores the whole test split: leave --split and --limit out")
    try:
        bench = metrics.load_benchmark(args.benchmark)
        problems = data_protocol(args, bench)
        manifest = metrics.data_manifest(args.data)
        digest, found = metrics.check_benchmark_data(bench, "test", manifest)
        _, part = metrics.check_benchmark_data(bench, "test", manifest, partial=True)
    except metrics.DatasetError as e:
        raise SystemExit(f"--benchmark: {e}") from None
    total = len(metrics.benchmark_jobs(bench, "test"))
    if found and len(manifest) < total:   # a shard, or a build cut short: never scored as the split
        state = f"all {len(manifest)} match" if not part else metrics.describe_differences(part)
        raise SystemExit(f"--benchmark: {args.data} holds {len(manifest)} of the {total} episodes of "
                         f"{bench['benchmark']}'s test split ({state}): merge the shards (python metrics.py "
                         "merge) or build the rest (collect.py --benchmark ... --resume)")
    if found and not args.other_browser:
        raise SystemExit(f"--benchmark: {args.data} is not {bench['benchmark']}'s test split "
                         f"({metrics.describe_differences(found)}); "
                         f"build it with: python collect.py --benchmark {args.benchmark} --split test "
                         "--out DIR")
    problems += [f"the data depart from the split ({metrics.describe_differences(found)})"] if found else []
    return {"name": bench["benchmark"], "version": bench["version"], "split": "test", "fingerprint": digest,
            "comparable": not problems, "problems": problems}


def benchmark_scores(preds, suite_of, n_boot=1000):
    """{"overall" and each suite: {episodes, steps, metric: {micro, micro_ci, macro, macro_ci}}}: the step
    metrics as (sum, count) per episode and the offline task success (every step right) per episode."""
    groups = {"overall": preds}
    for p in preds:
        groups.setdefault(suite_of[p["id"]], []).append(p)
    out = {}
    for name, group in groups.items():
        episodes = {}
        for p in group:
            episodes.setdefault((p["task"], p["id"]), []).append(p["scores"])
        scores = {}
        for metric in BENCHMARK_METRICS + ("task_success",):
            by_task = {}
            for (task, _), steps in episodes.items():
                if metric == "task_success":
                    pair = (int(all(s["step"] for s in steps)), 1)
                else:
                    values = [s[metric] for s in steps if s.get(metric) is not None]
                    pair = (sum(values), len(values))
                by_task.setdefault(task, []).append(pair)
            scores[metric] = metrics.bootstrap(by_task, n_boot)
        out[name] = {"episodes": len(episodes), "steps": len(group), **scores}
    return out


def run(args):
    import torch
    torch.use_deterministic_algorithms(True)
    benchmark = check_benchmark(args) if args.benchmark else None
    opts = replay_options(args)
    items, forced = replay_items(args)
    if args.baseline:
        model = processor = None
        what = f"baseline {args.baseline}, no model"
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        # None: load_model's rule
        dtype = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
        model, processor, attn = load_model(args.ckpt, device, dtype)
        what = f"model {type(model).__name__} from {args.ckpt}; attention {attn}; {model.dtype}"
    print(f"replay: {len(items)} steps of {args.data} ({args.split}); {what}; options {json.dumps(opts)}",
          file=sys.stderr)
    checkpoint = {"baseline": args.baseline} if args.baseline else \
        {"path": args.ckpt, "sha256": checkpoint_fingerprint(args.ckpt)}
    data = {"path": args.data, "sha256": data_fingerprint(items), "steps": len(items),
            "episodes": len({ep["id"] for ep, _ in items})}
    header = {"protocol": PROTOCOL_VERSION, "options": opts, "checkpoint": checkpoint, "data": data,
              "model": f"{model.device.type} {model.dtype}" if model else None}
    preds, dt = replay_batches(model, processor, items, forced, opts, args, header)

    results = {"protocol": PROTOCOL_VERSION, "options": opts, "checkpoint": checkpoint, "data": data,
               "metrics": summarize(preds)}
    if benchmark:
        suite_of = {ep["id"]: ep["suite"] for ep, _ in items}
        results["benchmark"] = {**benchmark, "scores": benchmark_scores(preds, suite_of)}
    metrics.write_atomic(os.path.join(args.out, "predictions.jsonl"),
                         "".join(json.dumps(rounded(p), sort_keys=True) + "\n" for p in preds))
    metrics.write_atomic(os.path.join(args.out, "results.json"),
                         json.dumps(rounded(results), indent=1, sort_keys=True) + "\n")
    os.remove(os.path.join(args.out, PARTIAL))
    print(f"replay: {dt:.1f} s; wrote {args.out}/results.json", file=sys.stderr)
    print_table({"": results["metrics"]})
    if benchmark:
        print_benchmark(results["benchmark"])
    return results


PARTIAL = "predictions.partial.jsonl"   # an unfinished run's predictions, batch by batch


def replay_batches(model, processor, items, forced, opts, args, header):
    """Every step's prediction, batch by batch, each batch appended to OUT/predictions.partial.jsonl as
    it is done: the same command, run again after a kill, continues from the last whole batch. The
    batches are the same ones (same start, same size), so a resumed run's files are byte-identical."""
    path = os.path.join(args.out, PARTIAL)
    preds = resumed_predictions(path, header, items, args.batch_size)
    os.makedirs(args.out, exist_ok=True)
    metrics.write_atomic(path, "".join(json.dumps(line, sort_keys=True) + "\n"
                                       for line in [{"run": header}] + preds))
    if preds:
        print(f"replay: resuming {args.out}: {len(preds)} of {len(items)} steps done", file=sys.stderr)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=len(items), initial=len(preds), desc="replay", dynamic_ncols=True, file=sys.stderr)
    t0, start = time.perf_counter(), len(preds)
    try:
        for b in range(start, len(items), args.batch_size):
            batch, guides = items[b:b + args.batch_size], forced[b:b + args.batch_size]
            new = predict(model, processor, batch, guides, opts, args)
            for p in new:   # json floats round-trip exactly: a resumed run sums the same numbers
                metrics.append_jsonl(path, p)
            preds += new
            if bar:
                bar.update(len(batch))
    except KeyboardInterrupt:
        print(f"\nreplay: interrupted; {len(preds)} of {len(items)} steps kept in {path}: "
              "the same command continues", file=sys.stderr)
        raise
    if bar:
        bar.close()
    dt = time.perf_counter() - t0
    print(f"replay: {(len(items) - start) / max(dt, 1e-9):.2f} steps/s", file=sys.stderr)
    return preds, dt


def resumed_predictions(path, header, items, batch_size):
    """The whole batches an interrupted run of this same replay left in `path` ([] when there is none);
    the rest of a batch a kill cut short is done again."""
    if not os.path.exists(path):
        return []
    torn = metrics.repair_dataset(path)   # a kill during a write: the torn line set aside, to .torn
    if torn:
        print(f"replay: {torn}", file=sys.stderr)
    try:
        with open(path) as f:
            had, *preds = [json.loads(line) for line in f]
        had = had["run"]
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"{path}: not an unfinished replay's predictions (an unreadable line, or no "
                         "header); delete it to start afresh") from None
    if had != header:
        differ = ", ".join(k for k in header if had.get(k) != header[k])
        raise SystemExit(f"{path}: an unfinished replay whose {differ} differ from this one's: rerun "
                         "its own command to finish it, or delete the file to start afresh")
    done = len(preds) if len(preds) == len(items) else len(preds) // batch_size * batch_size
    preds = preds[:done]
    if [(p["id"], p["step"]) for p in preds] != [(ep["id"], k) for ep, k in items[:done]]:
        raise SystemExit(f"{path}: its steps are not this replay's first {done}; delete it to start afresh")
    return preds


def print_benchmark(bench):
    """Per suite and overall: each benchmark metric's micro average and its interval, in percent."""
    print(f"\n{bench['name']} {bench['version']} test ({bench['fingerprint'][:12]})"
          + ("" if bench["comparable"] else " -- NOT comparable: " + "; ".join(bench["problems"])))
    print(f"{'':<12}{'episodes':>9}" + "".join(f"{m:>22}" for m in BENCHMARK_METRICS + ("task_success",)))
    for name, row in bench["scores"].items():
        cells = []
        for m in BENCHMARK_METRICS + ("task_success",):
            value, ci = row[m]["micro"], row[m]["micro_ci"]
            cells.append(f"{'-':>22}" if value is None else
                         f"{100 * value:>8.1f} [{100 * ci[0]:5.1f}, {100 * ci[1]:5.1f}]")
        print(f"{name:<12}{row['episodes']:>9}" + "".join(cells))


def summarize(preds):
    """Step metrics (micro/macro), the offline task success per episode, the mean guide reward."""
    out = metrics.aggregate([p["scores"] for p in preds], [p["task"] for p in preds])
    by_ep = {}
    for p in preds:
        by_ep.setdefault(p["id"], (p["task"], []))[1].append(p["scores"]["step"])
    ep_rows = [{"task_success": int(all(v))} for _, v in by_ep.values()]
    out.update(metrics.aggregate(ep_rows, [t for t, _ in by_ep.values()]))
    rewarded = [p for p in preds if p["guide_reward"] is not None]
    out.update(metrics.aggregate([{"guide_reward": p["guide_reward"]} for p in rewarded],
                                 [p["task"] for p in rewarded]))
    return out


TABLE_METRICS = ("element", "op_f1", "step", "task_success", "valid", "format", "guide_bleu", "guide_rouge_l",
                 "guide_chrf", "guide_grounding", "joint", "guide_reward")


def print_table(runs):
    """One row per metric, micro and macro per run."""
    names = list(runs)
    prefix = lambda n: n + " " if n else ""
    print(f"{'metric':<16}" + "".join(f"{prefix(n) + 'micro':>16}{prefix(n) + 'macro':>16}" for n in names))
    for m in TABLE_METRICS:
        cells = []
        for n in names:
            r = runs[n].get(m)
            cells.append(f"{r['micro']:>16.4f}" if r else f"{'-':>16}")
            cells.append(f"{r['macro']:>16.4f}" if r and r["macro"] is not None else f"{'-':>16}")
        print(f"{m:<16}" + "".join(cells))


# ----------------------------------------------------------------------------------------------
# compare: paired differences between two runs on the steps (and episodes) they share.

def load_predictions(run_dir):
    path = os.path.join(run_dir, "predictions.jsonl")
    if not os.path.exists(path):
        raise SystemExit(f"{run_dir}: no predictions.jsonl (not a replay run folder)")
    with open(path) as f:
        return {(p["id"], p["step"]): p for p in map(json.loads, f)}


def compare(a_dir, b_dir, n_boot=1000):
    a, b = load_predictions(a_dir), load_predictions(b_dir)
    keys = sorted(a.keys() & b.keys())
    if not keys:
        raise SystemExit(f"{a_dir} and {b_dir} share no steps")
    if len(keys) != len(a) or len(keys) != len(b):
        print(f"compare: {len(keys)} shared steps ({len(a)} in A, {len(b)} in B); only shared steps count")
    rows = []
    print(f"{'metric':<16}{'A':>10}{'B':>10}{'B-A':>10}{'95% CI':>22}{'n':>7}")
    for m in TABLE_METRICS:
        if m == "task_success":
            eps = sorted({k[0] for k in keys})
            va = [int(all(a[k]["scores"]["step"] for k in keys if k[0] == e)) for e in eps]
            vb = [int(all(b[k]["scores"]["step"] for k in keys if k[0] == e)) for e in eps]
        else:
            get = (lambda p: p["guide_reward"]) if m == "guide_reward" else (
                lambda p, m=m: p["scores"].get(m))
            pairs = [(get(a[k]), get(b[k])) for k in keys if get(a[k]) is not None and get(b[k]) is not None]
            va, vb = [x for x, _ in pairs], [y for _, y in pairs]
        if not va:
            continue
        boot = metrics.paired_bootstrap(vb, va, n_boot=n_boot)
        mean = lambda v: sum(v) / len(v)
        rows.append({"metric": m, "a": mean(va), "b": mean(vb), **boot, "n": len(va)})
        ci = f"[{boot['lo']:+.4f}, {boot['hi']:+.4f}]"
        print(f"{m:<16}{mean(va):>10.4f}{mean(vb):>10.4f}{boot['diff']:>+10.4f}{ci:>22}{len(va):>7}")
    return rows


# ----------------------------------------------------------------------------------------------
# table: several checkpoints side by side, offline (this script's runs) and live (evaluate.py's).

def summary_row(replay_dir, live_dir=None):
    with open(os.path.join(replay_dir, "results.json")) as f:
        m = json.load(f)["metrics"]
    get = lambda k: m[k]["micro"] if m.get(k) else None
    row = {
        "step": get("step"), "element": get("element"), "guide_rouge_l": get("guide_rouge_l"),
        "joint": get("joint"), "task_offline": get("task_success"), "live_success": None
    }
    if live_dir:
        with open(os.path.join(live_dir, "results.json")) as f:
            row["live_success"] = json.load(f)["overall"]["success"]["micro"]
    return row


def table(specs):
    """Each spec is NAME:REPLAY_DIR[:LIVE_DIR]; prints one row per checkpoint."""
    cols = ("step", "element", "guide_rouge_l", "joint", "task_offline", "live_success")
    print(f"{'':<16}" + "".join(f"{c:>15}" for c in cols))
    rows = {}
    for spec in specs:
        name, replay_dir, live_dir = (spec.split(":") + [None])[:3]
        rows[name] = summary_row(replay_dir, live_dir)
        cells = (f"{rows[name][c]:>15.4f}" if rows[name][c] is not None else f"{'-':>15}" for c in cols)
        print(f"{name:<16}" + "".join(cells))
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["table"]:
        if len(argv) < 2:
            raise SystemExit("usage: replay.py table NAME:REPLAY_DIR[:LIVE_DIR] ...")
        return table(argv[1:])
    if argv[:1] == ["compare"]:
        p = argparse.ArgumentParser(prog="replay.py compare",
                                    description="paired differences B - A with bootstrap CIs")
        p.add_argument("a")
        p.add_argument("b")
        p.add_argument("--n-boot", type=int, default=1000)
        c = p.parse_args(argv[1:])
        return compare(c.a, c.b, c.n_boot)
    return run(parse_args(argv))


# ----------------------------------------------------------------------------------------------
# The model, after the replay: loading (the same text in every model stage), batched greedy generation,
# teacher-forced log-probs.

def load_model(path, device, dtype=None, attn=None):
    """A checkpoint folder -> (model, processor, attention) on `device`: bf16 on CUDA and fp32 on CPU
    unless `dtype` says; FlashAttention-2 on CUDA when flash-attn is installed, PyTorch SDPA otherwise.
    The same text in every stage that loads a model (tests/test_layout.py holds them equal)."""
    import importlib.util

    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForImageTextToText, AutoProcessor
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise SystemExit(f"--ckpt {path}: not a Hugging Face checkpoint folder (no config.json)")
    cuda = device.type == "cuda"
    attn = attn or ("flash_attention_2" if cuda and importlib.util.find_spec("flash_attn") else "sdpa")
    try:
        processor = AutoProcessor.from_pretrained(path, local_files_only=True)
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=dtype or (torch.bfloat16 if cuda else torch.float32), attn_implementation=attn,
            local_files_only=True)
    # a truncated weights file, a config without a model type
    except (OSError, ValueError, SafetensorError) as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise SystemExit(f"--ckpt {path}: cannot load the checkpoint ({why})") from None
    return model.to(device).eval(), processor, attn


def generate(model, processor, prompts, images, max_new_tokens):
    """Greedy, KV-cached, left-padded batch generation; returns the decoded continuations."""
    import torch
    enc = processor(text=prompts, images=metrics.images_arg(processor, images), return_tensors="pt",
                    padding=True, padding_side="left")
    enc = {k: v.to(model.device) for k, v in enc.items()}
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
    return processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def continuation_logprobs(model, processor, prompts, images, continuations):
    """Sum of log p(continuation tokens + end of turn | prompt) per row, teacher-forced.

    The processor encodes prompt + continuation in one piece (so every model-specific tensor,
    such as Qwen's mm_token_type_ids, covers the continuation too); the continuation's tokens
    are found at the end of each right-padded row and checked.
    """
    import torch
    tok = processor.tokenizer
    conts = [tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in continuations]
    texts = [p + c + tok.eos_token for p, c in zip(prompts, continuations)]
    enc = processor(text=texts, images=metrics.images_arg(processor, images), return_tensors="pt",
                    padding=True, padding_side="right")
    enc = {k: v.to(model.device) for k, v in enc.items()}
    lengths = enc["attention_mask"].sum(1).tolist()
    first = min(n - len(c) for n, c in zip(lengths, conts))
    keep = torch.arange(first - 1, enc["input_ids"].shape[1] - 1, device=model.device)
    with torch.no_grad():
        logp = model(**enc, logits_to_keep=keep).logits.float().log_softmax(-1)
    out = []
    for i, (n, c) in enumerate(zip(lengths, conts)):
        ids = enc["input_ids"][i, n - len(c):n]
        if ids.tolist() != c:
            raise ValueError(f"continuation {continuations[i]!r} does not tokenize the same after its prompt")
        rows = torch.arange(n - len(c) - first, n - first, device=model.device)
        out.append(float(logp[i, rows, ids].sum()))
    return out


def action_logprobs(model, processor, prompts, images, guides, gold_actions):
    """log p(gold action | guide) per row: the action teacher-forced after the forced guide (guide_first
    format). `prompts` are chat-templated prompts ending where the reply starts; `gold_actions` are the
    action strings (metrics.format_action). train_grpo.py's offline guide reward is this term."""
    return continuation_logprobs(model, processor, [p + guide_prefix(g) for p, g in zip(prompts, guides)],
                                 images, [" " + a for a in gold_actions])


def guide_reward(model, processor, prompts, images, guides, gold_actions):
    """log p(gold action | guide) - log p(gold action | empty guide), per row (see action_logprobs)."""
    with_guide = action_logprobs(model, processor, prompts, images, guides, gold_actions)
    without = action_logprobs(model, processor, prompts, images, [""] * len(prompts), gold_actions)
    return [a - b for a, b in zip(with_guide, without)]


# ----------------------------------------------------------------------------------------------
# Fingerprints: what results.json was computed from.

INFERENCE_FILES = (".safetensors", ".json", ".jinja", ".txt", ".model")  # not trainer_state.pt, not logs
TRAINING_ONLY = (metrics.TRAIN_CONFIG, "sft_config.json")  # the run's config (paths, steps): not the model


def fingerprint_files(paths):
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def checkpoint_fingerprint(folder):
    names = sorted(n for n in os.listdir(folder) if n.endswith(INFERENCE_FILES) and n not in TRAINING_ONLY)
    return fingerprint_files([os.path.join(folder, n) for n in names])


def data_fingerprint(items):
    """The replayed steps' JSON (gold actions, guides, elements) and their screenshots."""
    h = hashlib.sha256()
    for ep, k in items:
        step = {key: v for key, v in ep["steps"][k].items() if key != "guide_meta"}
        h.update(json.dumps([ep["id"], ep["instruction"], ep["viewport"], step], sort_keys=True).encode())
        with open(os.path.join(ep["_root"], step["screenshot"]), "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()

if __name__ == "__main__":
    main()
