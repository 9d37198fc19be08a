"""experiments/copy_warmup.py -- a short synthetic copy task before SFT, so that a small agent types what the task
says (issue 52: make nano's agent typed names it remembered, 2 of 42 values copied live).

  python experiments/copy_warmup.py --ckpt tiny:nano --out runs/nano/copy --steps 800
  python train_sft.py --ckpt runs/nano/copy ...         # SFT starts from the warmed model

The induction-head trick: text-only sequences of random word pieces in which a span of them comes twice; the
loss is on the repeat after its first token, which only a head that finds the earlier occurrence of the
current token and reads the token after it can predict. MiniWoB++'s values are a few BPE pieces each
('"kasie"' is `"`, `k`, `as`, `ie`, `"`), so typing one is this copy, started after its opening quote. The
pieces are the vocabulary's short words (no special tokens, no digits, which the prompt uses for marks).

What a small model learns from it depends on the layout (docs/training.md, experiments/copy_probe.py): with
the repeat always half a sequence back, `tiny:nano` learns "read the token 31 back" in 200 steps and copies
nothing after a prompt; with the offset drawn anew it learns the copy itself, in about 500 steps (lr 1e-3,
64 tokens). Sequences start with the chat's first token, without which the circuit stays off after it; it
still stays off after a real prompt (copy_probe's `in prompt`), so SFT does not find it there either.
The folder written is a checkpoint like any other (the processor beside the weights), with
copy_warmup.json recording the run.
"""
import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_sft  # noqa: E402  (the model builder and loader: the same model SFT starts from)


def word_tokens(tokenizer, max_letters):
    """The ids of the vocabulary's short word pieces: 1 to `max_letters` ASCII letters, with or without the
    leading-space mark. A value the model never saw is typed in such pieces ('kasie': `k`, `as`, `ie`)."""
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    return sorted(i for t, i in tokenizer.get_vocab().items() if i not in special
                  and t.lstrip("Ġ").isalpha() and t.lstrip("Ġ").isascii() and len(t.lstrip("Ġ")) <= max_letters)


def copy_sequence(rng, words, length):
    """One sequence of `length` random word pieces and its labels (-100 where nothing is to be predicted): a
    span of 8 to 32 pieces appears twice, at an offset drawn anew each time (with one offset, a model learns
    "read the token 31 back", which copies nothing anywhere else). The repeat's first token is not labelled
    (nothing says where the copy starts), the rest are: each is the piece after the earlier occurrence of
    the one before it."""
    span = rng.randint(min(8, length // 2), min(32, length // 2))
    ids = [rng.choice(words) for _ in range(length - span)]
    first = rng.randrange(len(ids) - span + 1)
    again = rng.randrange(first + span, len(ids) + 1)   # the repeat starts after the first copy ends
    ids = ids[:again] + ids[first:first + span] + ids[again:]
    labels = [-100] * length
    labels[again + 1:again + span] = ids[again + 1:again + span]
    return ids, labels


def batch(rng, words, size, length, start=()):
    """`size` sequences as (ids, labels) tensors, each after `start`: the chat's first token, for a circuit
    learnt without it stays off after it."""
    seqs = [copy_sequence(rng, words, length) for _ in range(size)]
    return (torch.tensor([list(start) + ids for ids, _ in seqs]),
            torch.tensor([[-100] * len(start) + labels for _, labels in seqs]))


def copy_accuracy(model, rng, words, length, n=64, start=()):
    """Share of the labelled (copyable) tokens the model predicts right, greedy, on fresh sequences."""
    ids, labels = batch(rng, words, n, length, start)
    with torch.no_grad():
        pred = model(input_ids=ids).logits.argmax(-1)
    mask = labels[:, 1:] != -100
    return float((pred[:, :-1] == labels[:, 1:])[mask].float().mean())


def train(model, words, start, args):
    rng = random.Random(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup))
    log = []
    t0 = time.time()
    for step in range(1, args.steps + 1):
        ids, labels = batch(rng, words, args.batch_size, args.length, start)
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % args.log_every == 0 or step == args.steps:
            model.eval()
            acc = copy_accuracy(model, random.Random(f"{args.seed}:eval"), words, args.length, start=start)
            model.train()
            log.append({"step": step, "loss": round(loss.item(), 4), "copy_accuracy": round(acc, 4),
                        "seconds": round(time.time() - t0, 1)})
            print(json.dumps(log[-1]), flush=True)
    return log


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", default="tiny:nano", help="the model SFT would start from (train_sft.py --ckpt)")
    p.add_argument("--out", required=True, help="the warmed checkpoint's folder")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=128, help="tokens per sequence")
    p.add_argument("--max-letters", type=int, default=3, help="longest word piece drawn, in letters")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    model, processor, _ = train_sft.load_model(train_sft.resolve_ckpt(args.ckpt), torch.device("cpu"),
                                               dtype=torch.float32)
    words = word_tokens(processor.tokenizer, args.max_letters)
    model.train()
    log = train(model, words, [processor.tokenizer.bos_token_id], args)
    model.eval()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / "copy_warmup.json").write_text(json.dumps({"args": vars(args), "word_tokens": len(words),
                                                      "log": log}, indent=1))
    return log


if __name__ == "__main__":
    main()
