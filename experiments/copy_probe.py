"""experiments/copy_probe.py -- does an agent copy what the task says? Offline, teacher-forced, in a minute.

  python experiments/copy_probe.py runs/nano/sft runs/nano/grpo --data runs/nano/data --split val

On the steps that type a value the task names (as a whole word), the share of that value's tokens in the
target (its guide and its action) that the model predicts right, teacher-forced on the prompt of SFT:

  recorded   the values as recorded; a model may remember them (MiniWoB++'s name pools are small)
  fresh      the same steps with fresh random values of the same shape (train_sft's --fresh-values swap),
             which only copying gets right
  repeat     copy_warmup.py's task (random word pieces, a span of them twice): the bare induction circuit
  in prompt  the same task after each step's prompt (screenshot and all), where a value is typed: a
             circuit learnt on the bare task alone scores well above and 0 here (docs/training.md)

Live, 70 episodes barely tell 10 % from 20 % task success; this counts every value token of the split's
typing steps, without a browser. A value's first token is counted too: which quoted value the step needs
is read from the task, as it is live.
"""
import argparse
import json
import random
import re
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import copy_warmup  # noqa: E402

import metrics  # noqa: E402
import train_sft  # noqa: E402


def typing_steps(episodes, split, order):
    """(episode, k) of the split's usable steps that type a value of 2+ characters the task names."""
    def names(ep, k):
        value = ep["steps"][k]["action"].get("value") or ""
        return len(value) > 1 and re.search(train_sft.whole(value), ep["instruction"])
    return [(ep, k) for ep, k in metrics.usable_steps(episodes, split, "verified,edited,auto", order)
            if ep["steps"][k]["action"]["op"] == "type" and names(ep, k)]


def value_tokens(tokenizer, target, value):
    """Indices of the target's tokens that lie inside a quoted occurrence of `value` ('"value"')."""
    spans = [(m.start() + 1, m.end() - 1) for m in re.finditer(re.escape(f'"{value}"'), target)]
    offsets = tokenizer(target, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [j for j, (a, b) in enumerate(offsets) if b > a and any(s <= a and b <= e for s, e in spans)]


def copy_accuracy(model, processor, items, opts):
    """(right, counted): the value tokens predicted right, teacher-forced, over (episode, k) items."""
    args = types.SimpleNamespace(**opts)
    right = counted = 0
    for ep, k in items:
        enc = train_sft.encode_batch(processor, [(ep, k)], args)
        target = train_sft.target_text(ep, k, args.grounding, args.order)
        wanted = value_tokens(processor.tokenizer, target, ep["steps"][k]["action"]["value"])
        labels = enc.pop("labels")[0]
        first = int((labels != -100).nonzero()[0])   # the target's first token in the row
        with torch.no_grad():
            predicted = model(**enc).logits[0].argmax(-1)
        for j in wanted:
            right += int(predicted[first + j - 1] == enc["input_ids"][0, first + j])
            counted += 1
    return right, counted


def repeat_in_prompt(model, processor, items, opts, rng, words):
    """(right, counted): copy_warmup's task placed after each (episode, k)'s prompt, its labelled tokens."""
    right = counted = 0
    for ep, k in items:
        prompt, image = metrics.chat_prompt(processor, ep, k, opts)
        enc = processor(text=[prompt], images=metrics.images_arg(processor, [image]), return_tensors="pt")
        ids, labels = copy_warmup.copy_sequence(rng, words, 64)
        n, extra = enc["input_ids"].shape[1], torch.tensor([ids])
        for key, value in enc.items():   # the rows of n: input_ids, attention_mask, the token types (text: 0)
            if torch.is_tensor(value) and value.shape[:2] == (1, n):
                more = {"input_ids": extra, "attention_mask": torch.ones_like(extra)}.get(key)
                enc[key] = torch.cat([value, torch.zeros_like(extra) if more is None else more], 1)
        with torch.no_grad():
            predicted = model(**enc).logits[0, n:].argmax(-1)
        wanted = [j for j, label in enumerate(labels) if label != -100]
        right += sum(int(predicted[j - 1] == ids[j]) for j in wanted)
        counted += len(wanted)
    return right, counted


def probe(path, items, n, seed):
    """One checkpoint's row: the four accuracies, and what the first two counted."""
    model, processor, _ = train_sft.load_model(path, torch.device("cpu"), dtype=torch.float32)
    opts = metrics.prompt_options(trained=metrics.trained_options(path))
    sample = random.Random(seed).sample(items, min(n, len(items)))
    rng = random.Random(f"{seed}:fresh")
    fresh = [train_sft.with_fresh_values(ep, k, rng) for ep, k in sample]
    row = {"ckpt": path, "steps": len(sample)}
    for name, chosen in (("recorded", sample), ("fresh", fresh)):
        right, counted = copy_accuracy(model, processor, chosen, opts)
        row[name], row[f"{name}_tokens"] = (right / counted if counted else None), counted
    words = copy_warmup.word_tokens(processor.tokenizer, 3)
    row["repeat"] = copy_warmup.copy_accuracy(model, random.Random(f"{seed}:repeat"), words, 64,
                                              start=[processor.tokenizer.bos_token_id])
    right, counted = repeat_in_prompt(model, processor, sample, opts, random.Random(f"{seed}:in"), words)
    row["in_prompt"] = right / counted
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ckpts", nargs="+", help="checkpoint folders")
    p.add_argument("--data", required=True, help="a dataset folder (collect.py's format, with splits)")
    p.add_argument("--split", default="val")
    p.add_argument("--n", type=int, default=100, help="typing steps drawn from the split (all if fewer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="also write the rows here")
    args = p.parse_args(argv)
    episodes = metrics.load_dataset_or_exit(args.data)
    rows = []
    for path in args.ckpts:
        order = metrics.prompt_options(trained=metrics.trained_options(path))["order"]
        items = typing_steps(episodes, args.split, order)
        if not items:
            raise SystemExit(f"{args.data}: no step of split {args.split!r} types a value its task names")
        rows.append(probe(path, items, args.n, args.seed))
    print(f"{'checkpoint':40} {'steps':>6} {'recorded':>9} {'fresh':>7} {'repeat':>7} {'in prompt':>9}")
    for r in rows:
        cells = [f"{r[c]:.3f}" if r[c] is not None else "-" for c in ("recorded", "fresh", "repeat", "in_prompt")]
        print(f"{r['ckpt'][-40:]:40} {r['steps']:>6} {cells[0]:>9} {cells[1]:>7} {cells[2]:>7} {cells[3]:>9}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
