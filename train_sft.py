r"""train_sft.py -- supervised fine-tuning of a vision-language model on MAG steps.

Each usable step of a dataset becomes one example: the prompt is metrics.build_messages (the
screenshot, with marks for Set-of-Mark grounding, the task and the history) and the target is
metrics.format_output (a Guide line and an Action line in the chosen order). The loss is on the
target tokens only; the prompt, the image tokens and the padding are masked.

Runbook
  # CPU smoke run on the embedded default (a small random-init model built here, no hub):
  python train_sft.py --data demo/miniwob --ckpt tiny --elements text --max-steps 60 --out ckpt/sft
  # one GPU, a real checkpoint (any Hugging Face image-text-to-text folder or hub id):
  python train_sft.py --data data/X --ckpt Qwen/Qwen2.5-VL-3B-Instruct --batch-size 4 --grad-accum 8 \
      --out ckpt/sft
  # eight GPUs (DDP; add --fsdp when the model does not fit one GPU):
  torchrun --standalone --nproc_per_node=8 train_sft.py --data data/X --ckpt PATH --out ckpt/sft
  # continue an interrupted run (bit-exact on CPU):
  python train_sft.py ... --out ckpt/sft --resume

`--ckpt tiny[:ARCH][:SIZE]` (ARCH: qwen2_5_vl, the default, qwen3_vl or idefics3; SIZE: demo, the
default, or nano) builds a small model from config with a byte-level BPE tokenizer trained offline;
tests build their fixtures with the same `build_tiny`. Such a model cannot read pixels after minutes
of CPU training, so the demo adds the marks' text to the prompt (`--elements text`, off by default:
MAG is screenshot-only).

The checkpoint is one folder: the Hugging Face model and processor (so replay.py, evaluate.py and
train_grpo.py load it with the Auto classes), train_config.json (the options, prompt ones included) and
trainer_state.pt (optimizer, step, RNG states, config). It is written to a temporary folder and put in
place by metrics.publish_dir, so a kill never leaves half of one (--resume puts the previous checkpoint
back if the kill fell between publish_dir's two renames).

Left out on purpose: packing (images make packed attention masks model-specific), LoRA (use
peft on the loaded model if you need it), and mixed-length curriculum tricks.
"""
import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import string
import time

import torch
import torch.nn.functional as F

import metrics

# ----------------------------------------------------------------------------------------------
# Config: every knob with its default; the parsed dict is printed and saved with each checkpoint.

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # data and prompt
    p.add_argument("--data", required=True, help="dataset folder (episodes.jsonl + img/)")
    p.add_argument("--split", default="train", help="episodes whose 'split' is this; 'all' = every episode")
    p.add_argument("--val-split", default="val", help="split used for evaluation ('' = none)")
    p.add_argument("--statuses", default="verified,edited,auto",
                   help="guide statuses that make a step usable")
    p.add_argument("--grounding", default="som", choices=metrics.GROUNDINGS)
    p.add_argument("--order", default="guide_first", choices=metrics.ORDERS)
    p.add_argument("--elements", default="none", choices=["none", "text"],
                   help="'text' lists the marks in the prompt")
    p.add_argument("--fresh-values", type=float, default=0.0,
                   help="share of the steps typing a quoted value that get a fresh random one (fresh_values)")
    p.add_argument("--limit", type=int, default=0,
                   help="use only the first N usable training steps (overfitting checks)")
    # model
    p.add_argument("--ckpt", required=True,
                   help="Hugging Face folder or hub id, or tiny[:ARCH][:SIZE] (built here)")
    p.add_argument("--device", default="", help="default: cuda:LOCAL_RANK when CUDA is available, else cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="autocast dtype; auto = bfloat16 on CUDA, float32 on CPU (weights stay float32)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's bf16 dense peak, for MFU (default on CUDA: 989, an H100/H200; 0 = no MFU)")
    p.add_argument("--grad-checkpointing", action="store_true",
                   help="recompute activations: less memory, ~30%% slower")
    p.add_argument("--fsdp", action="store_true",
                   help="shard the model over the ranks (FSDP2) instead of DDP")
    # optimisation
    p.add_argument("--max-steps", type=int, default=1000, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=4, help="examples per micro-batch per rank")
    p.add_argument("--grad-accum", type=int, default=1,
                   help="micro-batches per optimizer step (split over ranks)")
    p.add_argument("--lr", type=float, default=1e-5,
                   help="peak learning rate (tiny random models want ~1e-3)")
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine decays to lr * this")
    p.add_argument("--warmup", type=int, default=20, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW decay on matrices only")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0 = off)")
    p.add_argument("--bucket", type=int, default=16,
                   help="batches per length bucket (similar lengths pad less)")
    p.add_argument("--seed", type=int, default=0)
    # evaluation, logging, checkpoints
    p.add_argument("--eval-every", type=int, default=100,
                   help="steps between evaluations (0 = only at the end)")
    p.add_argument("--eval-loss-n", type=int, default=64, help="val steps for the loss")
    p.add_argument("--eval-gen-n", type=int, default=16, help="val steps decoded greedily for step accuracy")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--save-every", type=int, default=200,
                   help="steps between checkpoints (and at the end); 0: none")
    p.add_argument("--out", required=True, help="checkpoint folder")
    p.add_argument("--resume", action="store_true", help="continue from --out's trainer_state.pt")
    p.add_argument("--wandb", default="", help="wandb project name (off unless given)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar (logs only)")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# Distributed in a few lines (nanoGPT style): torchrun sets RANK/WORLD_SIZE; everything else is rank 0.

RANK, WORLD = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))
MASTER = RANK == 0


def print0(*a, **k):
    if MASTER:
        print(*a, **k, flush=True)


def pick_device(name):
    """--device: '' = cuda:LOCAL_RANK when CUDA is available, else cpu; 'cpu' forces the CPU (CPU ranks
    on a GPU)."""
    name = name or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.split(":")[0] not in ("cpu", "cuda") or name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: not cpu, cuda or cuda:N, or no CUDA on this machine")
    return torch.device(f"cuda:{LOCAL_RANK}" if name == "cuda" else name)


# ----------------------------------------------------------------------------------------------
# Data: usable steps -> (prompt, target) -> one padded batch with the prompt masked.

def target_text(ep, k, grounding, order):
    step = ep["steps"][k]
    return metrics.format_output(step.get("guide"), step["action"], grounding, order, ep["viewport"])


def encode_batch(processor, items, args):
    """Prompt + target + end-of-turn, right-padded; labels are -100 except on target tokens.

    The processor sees the whole text (it expands image placeholders and builds every extra
    tensor the model needs); the target's tokens are found again at the end of each row and
    checked, so a tokenizer that merged across the prompt/target boundary fails loudly here.
    """
    tok = processor.tokenizer
    texts = []
    images = []
    targets = []
    for ep, k in items:
        prompt, image = metrics.chat_prompt(processor, ep, k, vars(args))
        target = target_text(ep, k, args.grounding, args.order)
        texts.append(prompt + target + tok.eos_token)
        images.append(image)
        targets.append(tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    enc = processor(text=texts, images=metrics.images_arg(processor, images), return_tensors="pt",
                    padding=True, padding_side="right")
    labels = torch.full_like(enc["input_ids"], -100)
    lengths = enc["attention_mask"].sum(1).tolist()
    for i, (n, t) in enumerate(zip(lengths, targets)):
        row = enc["input_ids"][i, n - len(t):n].tolist()
        if row != t:
            raise ValueError(
                f"{items[i][0]['id']} step {items[i][1]}: the target does not tokenize the same inside "
                f"the prompt ({tok.decode(row)!r} vs {tok.decode(t)!r}); the chat template's end must be "
                "a token boundary")
        labels[i, n - len(t):n] = enc["input_ids"][i, n - len(t):n]
    enc["labels"] = labels
    return enc


def length_proxy(item):
    """Cheap sort key for bucketing (no tokenizing): text the prompt and target will carry."""
    ep, k = item
    elements = sum(len(e.get("text") or "") + len(e.get("value") or "") + 12
                   for e in ep["steps"][k]["elements"])
    return len(ep["instruction"]) + 40 * min(k, metrics.MAX_HISTORY) + elements


def batches(items, batch_size, bucket, seed):
    """Endless deterministic stream of batches (lists of items): per epoch, shuffle, sort inside
    buckets of `bucket` batches by length (less padding), shuffle the batches."""
    epoch = 0
    while True:
        rng = random.Random(f"{seed}:{epoch}")
        order = list(range(len(items)))
        rng.shuffle(order)
        chunk = batch_size * bucket
        out = []
        for c in range(0, len(order), chunk):
            part = sorted(order[c:c + chunk], key=lambda i: length_proxy(items[i]))
            out += [part[b:b + batch_size] for b in range(0, len(part), batch_size)]
        rng.shuffle(out)
        for b in out:
            yield [items[i] for i in b]
        epoch += 1


def fresh_values(stream, share, seed):
    """--fresh-values: in `share` of the steps that type a value the task names, that value (and every other
    typed value the task names) becomes a fresh random string of the same shape -- in the task, the history,
    the elements' text and the target -- so the agent learns to copy what the task says: MiniWoB++'s small
    name pools let a small model type the names it remembers instead (type(1, "michel") for "kasie"). The
    screenshot keeps the recorded value: this is for prompts that list the marks' text (--elements text)."""
    for n, batch in enumerate(stream):
        rng = random.Random(f"{seed}:fresh:{n}")  # a resumed run draws the same strings
        yield [with_fresh_values(ep, k, rng) if share and rng.random() < share else (ep, k)
               for ep, k in batch]


def whole(value):  # a value as a whole word: "Ann" is not the start of "Anna"
    return r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])"


def with_fresh_values(ep, k, rng):
    """(episode, step) -> the same with the typed values the task names swapped (fresh_values); unchanged when
    step k types nothing the task names. Letters become random letters of the same case, digits digits."""
    typed = {s["action"].get("value") or "" for s in ep["steps"][:k + 1] if s["action"]["op"] == "type"}
    named = sorted((v for v in typed if len(v) > 1 and re.search(whole(v), ep["instruction"])),
                   key=len, reverse=True)
    action = ep["steps"][k]["action"]
    if action["op"] != "type" or action.get("value") not in named:
        return ep, k
    fresh = {v: "".join(rng.choice(string.ascii_uppercase if c.isupper() else string.ascii_lowercase)
                        if c.isalpha() else str(rng.randrange(10)) if c.isdigit() else c for c in v)
             for v in named}
    pattern = re.compile("|".join(f"({whole(v)})" for v in named))

    def swap(text):
        return pattern.sub(lambda m: fresh[m.group(0)], text) if text else text

    steps = [dict(s, guide=swap(s.get("guide"))) for s in ep["steps"][:k + 1]]
    for s in steps:
        s["action"] = dict(s["action"], value=swap(s["action"].get("value")))
    steps[k]["elements"] = [dict(e, text=swap(e.get("text")), value=swap(e.get("value")))
                            for e in steps[k]["elements"]]
    return dict(ep, instruction=swap(ep["instruction"]), steps=steps), k


# ----------------------------------------------------------------------------------------------
# Loss: summed token cross-entropy over the target tokens; the caller divides by the token count
# of the whole optimizer step, so every target token weighs the same however it was batched.

def target_logprob_sum(model, enc, autocast):
    labels = enc["labels"]
    inputs = {k: v for k, v in enc.items() if k != "labels"}
    # logits only where a label can be (from the first target position on): the full-vocabulary
    # logits of the prompt would be most of the activation memory of a real model
    first = int((labels != -100).float().argmax(1).min())
    keep = torch.arange(first - 1, labels.shape[1] - 1, device=labels.device)
    with autocast:
        logits = model(**inputs, logits_to_keep=keep).logits.float()
    target = labels[:, first:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100,
                           reduction="sum")


def to_device(enc, device):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in enc.items()}


# ----------------------------------------------------------------------------------------------
# Generation for the eval's step accuracy (replay.py does the same, batched, for the benchmark).

@torch.no_grad()
def generate(model, processor, items, args, device, autocast):
    texts, images = zip(*(metrics.chat_prompt(processor, ep, k, vars(args)) for ep, k in items))
    enc = processor(text=list(texts), images=metrics.images_arg(processor, list(images)), return_tensors="pt",
                    padding=True, padding_side="left")
    enc = to_device(enc, device)
    with autocast:
        out = model.generate(**enc, max_new_tokens=args.max_new_tokens, do_sample=False)
    return processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


@torch.no_grad()
def evaluate(model, processor, val, args, device, autocast):
    model.eval()
    loss_items, gen_items = val[:args.eval_loss_n], val[:args.eval_gen_n]
    total, count = 0.0, 0
    for b in range(0, len(loss_items), args.batch_size):
        enc = to_device(encode_batch(processor, loss_items[b:b + args.batch_size], args), device)
        total += float(target_logprob_sum(model, enc, autocast))
        count += int((enc["labels"] != -100).sum())
    rows = []
    for b in range(0, len(gen_items), args.batch_size):
        chunk = gen_items[b:b + args.batch_size]
        for (ep, k), text in zip(chunk, generate(model, processor, chunk, args, device, autocast)):
            rows.append(metrics.score_step(text, ep["steps"][k], args.grounding, args.order, ep["viewport"]))
    model.train()
    mean = lambda key: sum(r[key] for r in rows) / len(rows) if rows else None
    by_suite = {}   # a benchmark's val split spans suites: the curve suite by suite (experiments/baseline.py)
    for (ep, _), r in zip(gen_items, rows):
        by_suite.setdefault(ep["id"].split(".")[0], []).append(r["step"])
    return {"val_loss": total / max(count, 1), "val_step_acc": mean("step"), "val_valid": mean("valid"),
            "val_step_by_suite": {suite: sum(v) / len(v) for suite, v in sorted(by_suite.items())}}


# ----------------------------------------------------------------------------------------------
# Checkpoints: a Hugging Face folder + trainer_state.pt, written aside and renamed into place.

def rng_states():
    """Every rank's RNG state (each rank samples its own stream: seed + rank), gathered for rank 0."""
    mine = {"python": random.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
    if WORLD == 1:
        return [mine]
    states = [None] * WORLD
    torch.distributed.all_gather_object(states, mine)
    return states


def restore_rng(states):
    mine = states[RANK] if len(states) == WORLD else states[0]  # resumed on another number of ranks: rank 0's
    random.setstate(mine["python"])
    torch.set_rng_state(mine["torch"])
    if mine["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(mine["cuda"])


def load_state(out):
    """trainer_state.pt of the checkpoint being resumed: tensors and plain values only (weights_only:
    a crafted file cannot run code), after undoing a save that a kill cut short."""
    metrics.recover_dir(out)
    path = os.path.join(out, "trainer_state.pt")
    if not os.path.exists(path):
        raise SystemExit(f"--resume: {path} does not exist (nothing to resume)")
    try:
        state = torch.load(path, weights_only=True)
        if not (isinstance(state, dict) and {"optimizer", "step", "rng", "config"} <= state.keys()):
            raise ValueError("not a trainer state of train_sft.py or train_grpo.py")
    except Exception as e:  # noqa: BLE001 -- any unreadable or foreign file is the same problem for the user
        raise SystemExit(
            f"--resume: {path} is unreadable ({type(e).__name__}: {(str(e).splitlines() or [''])[0]}); "
            "start a new --out or restore a backup") from None
    return state


def save_checkpoint(out, model, processor, optimizer, step, config):
    raw = model.module if hasattr(model, "module") else model
    rng = rng_states()  # every rank takes part
    state, optim = None, optimizer.state_dict
    if config["fsdp"] and WORLD > 1:  # gather the shards: every rank takes part, rank 0 writes
        import torch.distributed.checkpoint.state_dict as sharded
        full = sharded.StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = sharded.get_model_state_dict(raw, options=full)
        for key in getattr(raw, "all_tied_weights_keys", {}):  # a tied copy is not a weight of its own
            state.pop(key, None)
        gathered = sharded.get_optimizer_state_dict(raw, optimizer, options=full)
        optim = lambda: gathered
    if not MASTER:
        return
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    raw.save_pretrained(tmp, state_dict=state)
    processor.save_pretrained(tmp)
    torch.save({"optimizer": optim(), "step": step, "rng": rng, "config": config},
               os.path.join(tmp, "trainer_state.pt"))
    with open(os.path.join(tmp, metrics.TRAIN_CONFIG), "w") as f:  # the prompt options, for replay/evaluate
        json.dump(config, f, indent=1)
    metrics.publish_dir(tmp, out)


def make_optimizer(model, args, device):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")


def lr_at(step, args):
    """Linear warmup, then cosine from lr down to lr * min_lr_ratio at max_steps."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.max_steps - args.warmup)
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 *
                      (1 + math.cos(math.pi * min(t, 1.0))))


# ----------------------------------------------------------------------------------------------
# The training loop, then what it calls once: the setup and the run's log.

def main(argv=None):
    args = parse_args(argv)
    device, dtype = setup_device(args)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    train, val = load_data(args)  # data first: a bad dataset should fail before minutes of model loading
    sizes = (len(train), len(val))
    model, raw, processor, optimizer, step, config = load_training(args, device, dtype, sizes)
    # every rank walks the same batch stream and takes its own share of each optimizer step
    stream = batches(train, args.batch_size, args.bucket, args.seed)
    stream = fresh_values(stream, args.fresh_values, args.seed)  # --fresh-values: copy, not remember
    micro = max(1, args.grad_accum // WORLD)
    for _ in range(step * micro * WORLD):  # fast-forward the data to where the run stopped
        next(stream)
    log = RunLog(args, step, config, sum(p.numel() for p in model.parameters()), device)
    model.train()
    while step < args.max_steps:
        t0 = time.perf_counter()
        group = [next(stream) for _ in range(micro * WORLD)][RANK::WORLD]
        encs = [to_device(encode_batch(processor, b, args), device) for b in group]
        n_tokens = torch.tensor(sum(int((e["labels"] != -100).sum()) for e in encs), device=device)
        if WORLD > 1:
            torch.distributed.all_reduce(n_tokens)
        lr = lr_at(step, args)
        for g in optimizer.param_groups:
            g["lr"] = lr
        loss_sum = 0.0
        for i, enc in enumerate(encs):
            # DDP averages gradients over ranks; scaling by WORLD turns that back into a sum, so the
            # loss is the mean over every target token of the step, on every rank alike
            sync = WORLD == 1 or args.fsdp or i == len(encs) - 1
            with contextlib.nullcontext() if sync else model.no_sync():
                loss = target_logprob_sum(model, enc, autocast) * WORLD / n_tokens.float()
                loss.backward()
            loss_sum += loss.item() / WORLD
        if WORLD > 1:  # each rank summed its own share of the step's mean; the log shows the whole
            loss_sum = torch.tensor(loss_sum, device=device)
            torch.distributed.all_reduce(loss_sum)
            loss_sum = loss_sum.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                              args.clip) if args.clip > 0 else torch.tensor(0.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if device.type == "cuda":
            torch.cuda.synchronize()  # the optimizer step has run, not only been queued
        record = log.record(step, loss_sum, lr, norm, n_tokens, encs, time.perf_counter() - t0)
        if step % args.eval_every == 0 if args.eval_every else step == args.max_steps:
            if val and (MASTER or args.fsdp):  # a sharded model decodes on every rank together
                record.update(evaluate(raw, processor, val, args, device, autocast))
        log.write(record)
        if args.save_every and (step % args.save_every == 0 or step == args.max_steps):
            save_checkpoint(args.out, model, processor, optimizer, step, config)
    log.close()
    print0(f"saved {args.out}" if args.save_every else "done (--save-every 0: no checkpoint)")
    if WORLD > 1:
        torch.distributed.barrier()  # every rank past rank 0's last save before any tears the group down
        torch.distributed.destroy_process_group()


def setup_device(args):
    """The device (and the process group under torchrun), each rank's seed. -> (device, autocast dtype)."""
    device = pick_device(args.device)
    if WORLD > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    random.seed(args.seed + RANK)
    torch.manual_seed(args.seed + RANK)
    return device, dtype


def load_data(args):
    """The training split's usable steps (--limit: the first N) and the validation split's, in a fixed order.
    -> (train, val)."""
    episodes = metrics.load_dataset_or_exit(args.data, check_images=True)
    train = metrics.usable_steps(episodes, args.split, args.statuses, args.order)
    val = []
    if args.val_split:
        val = sorted(metrics.usable_steps(episodes, args.val_split, args.statuses, args.order),
                     key=lambda x: (x[0]["id"], x[1]))
    if args.limit:
        train = train[:args.limit]
    if not train:
        raise SystemExit(
            f"{args.data}: no usable steps in split {args.split!r} with guide status in {args.statuses!r} "
            f"(run annotate.py draft/verify/split first, or pass --split all / --statuses)")
    return train, val


def load_training(args, device, dtype, sizes):
    """The model (--ckpt, or --out when resuming), wrapped for DDP or FSDP, its optimizer, and a resumed run's
    state restored. -> (model, the unwrapped model, processor, optimizer, optimizer steps done, config)."""
    config = vars(args).copy()
    state = None
    metrics.refuse_overwrite(args.out, args.resume)
    if args.resume:
        state = load_state(args.out)
        args.ckpt = args.out  # the weights come from the checkpoint being resumed
        config["ckpt"] = state["config"]["ckpt"]  # the run's own starting point, as its first part saved it
    try:
        path = resolve_ckpt(args.ckpt)
    except FileNotFoundError as e:   # a folder that is not there, or a hub id while offline: one line
        metrics.fail(str(e))
    model, processor, attn = load_model(path, device, dtype=torch.float32)
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable()
    n_params = sum(p.numel() for p in model.parameters())
    print0(f"model {type(model).__name__} ({n_params / 1e6:.1f}M params) from {args.ckpt}; attention {attn}; "
           f"autocast {dtype}; device {device}; world {WORLD}")
    print0(f"data: {sizes[0]} train steps, {sizes[1]} val steps; config {json.dumps(config)}")
    raw = model
    if WORLD > 1 and args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for module in model.modules():  # shard each decoder/vision block, then the rest
            if type(module).__name__ in (getattr(model, "_no_split_modules", None) or []):
                fully_shard(module)
        fully_shard(model)
    elif WORLD > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[LOCAL_RANK] if device.type == "cuda" else None)
    optimizer = make_optimizer(model, args, device)
    if state is None:
        return model, raw, processor, optimizer, 0, config
    metrics.check_optimizer_state(state["optimizer"], optimizer, f"{args.out}/trainer_state.pt")
    if args.fsdp and WORLD > 1:  # the full optimizer state, sharded again as the model is
        import torch.distributed.checkpoint.state_dict as sharded
        sharded.set_optimizer_state_dict(model, optimizer, state["optimizer"],
                                         options=sharded.StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(state["optimizer"])
    restore_rng(state["rng"])
    print0(f"resumed from {args.out} at step {state['step']}")
    return model, raw, processor, optimizer, state["step"], config


class RunLog:
    """One line per step (stdout, or above tqdm's bar), <out>.log.jsonl beside the checkpoint folder, wandb
    when asked: written by rank 0. A resumed run drops the records after its last save."""

    def __init__(self, args, step, config, n_params, device):
        self.args = args
        self.n_params = n_params
        # MFU's peak: --peak-tflops, else an H100/H200's dense bf16 989 TFLOP/s on CUDA; none on a CPU
        cuda_peak = 989.0 if device.type == "cuda" else 0.0
        self.peak = args.peak_tflops if args.peak_tflops is not None else cuda_peak
        self.file = self.bar = None
        if not MASTER:
            return
        self.file = metrics.open_log(args.out.rstrip("/") + ".log.jsonl", step)
        if args.wandb:
            import wandb
            wandb.init(project=args.wandb, config=config)
        if not args.no_progress:
            from tqdm import tqdm
            self.bar = tqdm(total=args.max_steps, initial=step, desc="sft", dynamic_ncols=True)

    def record(self, step, loss, lr, norm, n_tokens, encs, dt):
        """The step's record. tokens: every token the model ran (prompt, image, reply; this rank's times the
        ranks); MFU: 6 N flops a token (forward + backward, attention left out) against every GPU's peak."""
        tokens = sum(int(e["attention_mask"].sum()) for e in encs) * WORLD
        mfu = 6 * self.n_params * tokens / dt / (self.peak * 1e12 * WORLD) if self.peak else None
        return {"step": step, "loss": loss, "lr": lr, "grad_norm": float(norm),
                "target_tokens": int(n_tokens), "tokens": tokens, "tok_per_s": tokens / dt,
                "target_tok_per_s": int(n_tokens) / dt, "dt": dt, "mfu": mfu}

    def write(self, r):
        if not MASTER:
            return
        line = (f"step {r['step']}/{self.args.max_steps} | loss {r['loss']:.4f} | lr {r['lr']:.2e} | "
                f"norm {r['grad_norm']:.2f} | "
                f"{r['tok_per_s']:.0f} tok/s ({r['target_tok_per_s']:.0f} target) | "
                + (f"MFU {r['mfu']:.1%} | " if self.peak else "") + f"{r['dt'] * 1000:.0f} ms")
        if "val_loss" in r:
            line += f" | val_loss {r['val_loss']:.4f} | val_step_acc {r['val_step_acc']}"
        (self.bar.write if self.bar else print)(line)
        self.file.write(json.dumps(r) + "\n")
        self.file.flush()
        if self.args.wandb:
            import wandb
            wandb.log(r, step=r["step"])
        if self.bar:
            self.bar.update(1)

    def close(self):
        if self.bar:
            self.bar.close()


# ----------------------------------------------------------------------------------------------
# The model, after the method: the embedded default (tiny random-init models built from config, with a
# tokenizer trained offline; real checkpoints never go through this code) and the loading snippet.

TINY_ARCHS = ("qwen2_5_vl", "qwen3_vl", "idefics3")
TINY_VERSION = 2  # bump when the builder or a size changes: it names the cache folder (2: nano is 1.4M)

# Sizes: "demo" still learns something in minutes on a CPU; "test" builds and runs in a blink; "nano" is
# `make nano`'s agent (docs/reproduce.md): the demo's shape with a tokenizer that also learns the words of
# MAG-Bench's train split (assets/nano_words.tsv, fixed: the model is the same whatever it is trained on),
# so element names and a task's values take fewer tokens. Chosen on val: a 4.9M model (hidden 256, 6
# layers) scored no better at 3.6x the time per step.
TINY_SIZES = {"demo": dict(hidden=128, layers=4, heads=4, vision_hidden=64, vision_layers=2, vocab=2048),
              "test": dict(hidden=64, layers=2, heads=4, vision_hidden=32, vision_layers=2, vocab=512),
              "nano": dict(hidden=128, layers=4, heads=4, vision_hidden=64, vision_layers=2, vocab=4096,
                           corpus="nano_words.tsv")}

QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
IDEFICS_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>",
                   "<image>", "<global-img>"]
# Chat templates in the models' own shapes (ChatML with vision markers; Idefics3's "User:" turns).
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
IDEFICS_TEMPLATE = (
    "<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>"
    "{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}")

UI_WORDS = (
    "Click Type Select Press Enter Tab Scroll down up the a an and into from on in of to at for with "
    "button field link menu tab checkbox option dropdown list box page form search results top bottom "
    "left right next previous Submit Save Cancel OK Login Sign Username Password Email Name Phone Date "
    "Search Add Delete Edit Close Open Yes No Go Home Orders Customers Products Tickets Users Groups "
    "text value number first second third last item row column order customer product ticket user")


def tokenizer_corpus(extra=None):
    """A fixed corpus: the prompt's own texts, the action grammar and common UI words, so the
    tokenizer (and hence the model) is the same whatever data it is later trained on; `extra`, a size's
    own words (an asset of "word<TAB>count" lines), each as often as it occurs, at most 100 times."""
    lines = [metrics.system_text(g, o) for g in metrics.GROUNDINGS for o in metrics.ORDERS]
    lines += [
        "Task: ", "Previous steps:\n1. Guide: ", " | Action: ", "Elements:\n[1] button \"Submit\"",
        "What is the next step?", "Guide: Click the **Submit** button.\nAction: click(7)",
        'Action: type(12, "hello")', 'select(3, "Blue")', 'press("Enter")', 'scroll("down")', 'stop("")'
    ]
    rng = random.Random(0)
    words = UI_WORDS.split()
    lines += [" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)]
    for line in metrics.read_asset(extra).splitlines() if extra else []:
        word, count = line.rsplit("\t", 1)
        lines += [word] * min(int(count), 100)
    return lines


def pre_tokenizer():
    """How the tiny tokenizers split text into words before BPE: digits one by one (marks and
    coordinates), then byte-level words with their leading space (experiments/nano_corpus.py counts these)."""
    from tokenizers import pre_tokenizers
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False)])


def train_tokenizer(special, vocab, corpus=None):
    """Byte-level BPE (every string encodes) over pre_tokenizer's words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(tokenizer_corpus(corpus), trainer)
    return tok


def tiny_config(arch, s, v, eos):
    """The config of a tiny `arch` of size `s` over the vocabulary `v` -> (config, model class, patch)."""
    import transformers as tf
    text = dict(vocab_size=len(v), hidden_size=s["hidden"], intermediate_size=2 * s["hidden"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                num_key_value_heads=s["heads"] // 2, max_position_embeddings=8192,
                bos_token_id=v["<|im_start|>"], eos_token_id=v[eos], pad_token_id=v["<|endoftext|>"],
                tie_word_embeddings=True)
    head_dim = s["hidden"] // s["heads"]
    mrope_section = [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]
    vision = dict(hidden_size=s["vision_hidden"], intermediate_size=2 * s["vision_hidden"])
    if arch == "qwen2_5_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": mrope_section}
        config = tf.Qwen2_5_VLConfig(
            text_config=text, image_token_id=v["<|image_pad|>"], video_token_id=v["<|video_pad|>"],
            vision_start_token_id=v["<|vision_start|>"], vision_end_token_id=v["<|vision_end|>"],
            vision_config=dict(vision, depth=s["vision_layers"], num_heads=2, out_hidden_size=s["hidden"],
                               fullatt_block_indexes=[s["vision_layers"] - 1], window_size=56, patch_size=14,
                               spatial_merge_size=2, temporal_patch_size=2))
        model_cls, patch = tf.Qwen2_5_VLForConditionalGeneration, 14
    elif arch == "qwen3_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": mrope_section,
                                   "mrope_interleaved": True}
        text["head_dim"] = head_dim
        config = tf.Qwen3VLConfig(
            text_config=text, image_token_id=v["<|image_pad|>"], video_token_id=v["<|video_pad|>"],
            vision_start_token_id=v["<|vision_start|>"], vision_end_token_id=v["<|vision_end|>"],
            vision_config=dict(vision, depth=s["vision_layers"], num_heads=2, out_hidden_size=s["hidden"],
                               patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                               num_position_embeddings=256, deepstack_visual_indexes=[]))
        model_cls, patch = tf.Qwen3VLForConditionalGeneration, 16
    else:
        text["model_type"] = "llama"
        config = tf.Idefics3Config(text_config=text, image_token_id=v["<image>"], scale_factor=2,
                                   pad_token_id=v["<|endoftext|>"],
                                   vision_config=dict(vision, num_hidden_layers=s["vision_layers"],
                                                      num_attention_heads=2, image_size=128, patch_size=16))
        model_cls, patch = tf.Idefics3ForConditionalGeneration, 16
    return config, model_cls, patch


def tiny_processor(arch, tokenizer, template, patch):
    """The image processor and processor of a tiny `arch`, its tokenizer and chat template."""
    import transformers as tf
    if arch.startswith("qwen"):
        # a small pixel budget: a 480x630 screenshot becomes ~60 image tokens
        pixels = dict(min_pixels=4 * patch * patch * 4, max_pixels=256 * patch * patch)
        image_proc = tf.Qwen2VLImageProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2, **pixels)
        if arch == "qwen2_5_vl":
            video_cls, processor_cls = tf.Qwen2VLVideoProcessor, tf.Qwen2_5_VLProcessor
        else:
            video_cls, processor_cls = tf.Qwen3VLVideoProcessor, tf.Qwen3VLProcessor
        video_proc = video_cls(patch_size=patch, merge_size=2, temporal_patch_size=2)
        return processor_cls(image_processor=image_proc, tokenizer=tokenizer, video_processor=video_proc,
                             chat_template=template)
    image_proc = tf.Idefics3ImageProcessor(size={"longest_edge": 128}, max_image_size={"longest_edge": 128},
                                           do_image_splitting=False)
    return tf.Idefics3Processor(image_processor=image_proc, tokenizer=tokenizer, chat_template=template,
                                image_seq_len=(128 // 16) ** 2 // 4)


def build_tiny(out, arch="qwen2_5_vl", size="demo", seed=0):
    """Write a random-init model + processor folder to `out`; deterministic for (arch, size, seed)."""
    import transformers as tf
    if arch not in TINY_ARCHS:
        raise ValueError(f"tiny:{arch}: unknown architecture (choose from {', '.join(TINY_ARCHS)})")
    s = TINY_SIZES[size]
    qwen = arch.startswith("qwen")
    tok = train_tokenizer(QWEN_SPECIAL if qwen else IDEFICS_SPECIAL, s["vocab"], s.get("corpus"))
    v = tok.get_vocab()
    eos = "<|im_end|>" if qwen else "<end_of_utterance>"
    config, model_cls, patch = tiny_config(arch, s, v, eos)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.eos_token_id = v[eos]
    model.generation_config.pad_token_id = v["<|endoftext|>"]
    model.generation_config.bos_token_id = v["<|im_start|>"]
    template = QWEN_TEMPLATE if qwen else IDEFICS_TEMPLATE
    tokenizer = tf.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token="<|endoftext|>",
                                           bos_token="<|im_start|>", chat_template=template)
    processor = tiny_processor(arch, tokenizer, template, patch)
    # one temporary folder per process: two runs of a study may build the same cached model at once (one
    # removed the other's half-written folder); the same seed gives the same model, so the first one in wins
    tmp = f"{out.rstrip('/')}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    if not os.path.exists(os.path.join(out, "config.json")):
        shutil.rmtree(out, ignore_errors=True)
        with contextlib.suppress(OSError):   # another process's rename came first
            os.replace(tmp, out)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def tiny_spec(ckpt):
    """tiny, tiny:ARCH, tiny:SIZE or tiny:ARCH:SIZE -> (arch, size): qwen2_5_vl and demo unless named."""
    parts = ckpt.split(":")[1:]
    for part in parts:
        if part not in TINY_ARCHS and part not in TINY_SIZES:
            raise ValueError(f"--ckpt {ckpt}: {part!r} is neither an architecture ({', '.join(TINY_ARCHS)}) "
                             f"nor a size ({', '.join(TINY_SIZES)})")
    return (next((p for p in parts if p in TINY_ARCHS), "qwen2_5_vl"),
            next((p for p in parts if p in TINY_SIZES), "demo"))


def resolve_ckpt(ckpt):
    """A folder, a hub id, or tiny[:ARCH][:SIZE] -> a local folder for load_model (a clear error
    otherwise)."""
    if ckpt == "tiny" or ckpt.startswith("tiny:"):
        arch, size = tiny_spec(ckpt)
        name = f"{arch}-v{TINY_VERSION}" if size == "demo" else f"{arch}-{size}-v{TINY_VERSION}"
        cache = os.path.join(os.path.expanduser(os.environ.get("MAG_CACHE", "~/.cache/mag")), "tiny", name)
        if not os.path.exists(os.path.join(cache, "config.json")):
            build_tiny(cache, arch, size)
        return cache
    if os.path.isdir(ckpt):
        return ckpt  # load_model says so if it is not a checkpoint
    hub_like = ckpt.count("/") == 1 and not ckpt.startswith((".", "/", "~"))
    if not hub_like or os.environ.get("HF_HUB_OFFLINE") == "1":
        why = "HF_HUB_OFFLINE=1 is set, so hub ids are not tried" if hub_like else "not a folder"
        raise FileNotFoundError(f"--ckpt {ckpt}: checkpoint not found ({why})")
    from huggingface_hub import snapshot_download  # the files from_pretrained would fetch, into the hub cache
    return snapshot_download(ckpt, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model"])


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

if __name__ == "__main__":
    main()
