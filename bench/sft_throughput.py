"""SFT throughput: train_sft.py against TRL's SFTTrainer on the same tiny model, data, examples, batch
size, optimizer steps and learning-rate schedule, in one run. Prints tokens/s, seconds per step and
peak memory of both, their final losses, and the ratios ours/TRL; writes bench/out/sft_throughput.json.

  make bench                                           (builds .venv-bench-sft with TRL on first use)
  python bench/sft_throughput.py                       # tiny demo-size model, synthetic data, CPU
  python bench/sft_throughput.py --data demo/miniwob   # real screenshots (after `make demo`)
  python bench/sft_throughput.py --skip-trl            # ours only (no TRL needed)

TRL is a bench-only dependency (requirements-bench.txt). It lives in .venv-bench-sft, a venv layered
on .venv by a .pth file, so both sides import the very same torch and transformers and TRL never
enters .venv. Each side runs in a child process of its own (ours: train_sft.main, as users run it,
read back from its JSONL log), so each peak is its own: on CPU the child's peak RSS (ru_maxrss: the
interpreter, libraries, model, optimizer, activations) and its growth over the RSS after imports;
on CUDA torch.cuda.max_memory_allocated from before the model is loaded.

Like for like: TRL gets the same (prompt, target) pairs as prompt-completion conversations
(metrics.build_messages's system and user turns, train_sft.target_text as the assistant turn), in
the very batches train_sft's bucketed stream yields (a sequential sampler), the loss on the
completion only, our AdamW and lr schedule (passed in, so the losses can be compared step for
step), the same gradient clip, fp32 on CPU (bf16 autocast on CUDA), no gradient checkpointing.
tokens/s counts the same thing on both sides: non-pad tokens (prompt, image and target), per step
after --skip warm-up steps. The ratios use the median step of the best of --rounds alternated
runs per side (the mean over all timed steps is reported too). On CPU each side runs one torch
thread by default (--threads): on a shared 2-core machine, whenever another process holds a core,
two OpenMP threads stall each other and steps ran up to 10x slower, swamping the comparison;
with one thread both sides gave steady figures, round after round.

Known differences, all part of what is measured: TRL's completion also carries the "\\n" the
chat template writes after the end-of-turn token (one more target token per example, so its mean
loss is over slightly different tokens); it computes logits at every position (ours from the
first target token on) and logs entropy and token accuracy each step; its images are decoded
from the dataset's Arrow table where ours are read and marked from disk at every step. TRL's step
time runs from one step's end to the next (it collates before its step callback); ours is
train_sft's own `dt`, which also includes collation.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import metrics  # noqa: E402
import train_sft  # noqa: E402

BENCH_VENV = os.path.join(ROOT, ".venv-bench-sft")
NO_TRL = ("TRL is not installed for this bench: it runs in its own venv, built by `make .venv-bench-sft/.installed` "
          "(or `make bench`); pass --trl-python to use another interpreter that has trl, or --skip-trl for ours only")


def rss_mib():
    """Peak RSS of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sft_argv(a, out):
    """train_sft's command line for this bench; the TRL side parses it too, so both read one config."""
    return ["--data", a.data, "--split", a.split, "--val-split", "", "--ckpt", a.ckpt, "--elements", a.elements,
            "--batch-size", str(a.batch_size), "--max-steps", str(a.steps), "--lr", str(a.lr),
            "--warmup", str(a.warmup), "--save-every", str(a.steps), "--out", out, "--no-progress"]


def summary(times, tokens, losses, skip):
    """Per-step (seconds, non-pad tokens, loss) -> throughput over the steps after `skip`."""
    t, n = sum(times[skip:]), sum(tokens[skip:])
    return {"steps_timed": len(times) - skip, "tok_per_s": n / t, "s_per_step": t / (len(times) - skip),
            "s_per_step_median": statistics.median(times[skip:]),
            "tok_per_s_median": statistics.median(k / dt for k, dt in zip(tokens[skip:], times[skip:])),
            "final_loss": losses[-1], "loss_last5": statistics.mean(losses[-5:]),
            "losses": [round(x, 4) for x in losses]}


# ----------------------------------------------------------------------------------------------
# The two sides, each run in a child process (--side) that writes its figures to --result.

def run_ours(a, tmp):
    out = os.path.join(tmp, "ckpt")
    train_sft.main(sft_argv(a, out))
    with open(out + ".log.jsonl") as f:
        log = [json.loads(line) for line in f]
    return summary([r["dt"] for r in log], [r["tok_per_s"] * r["dt"] for r in log], [r["loss"] for r in log], a.skip)


def trl_example(ep, k, cfg):
    """One step as TRL's conversational prompt-completion example: the image goes to "images" and
    TRL puts its placeholder before the user text, where metrics.build_messages puts it."""
    elements = cfg.elements if cfg.elements != "none" else None
    msgs = metrics.build_messages(ep, k, cfg.grounding, cfg.order, elements=elements)
    (system,), (image, user) = msgs[0]["content"], msgs[1]["content"]
    return {"prompt": [{"role": "system", "content": system["text"]}, {"role": "user", "content": user["text"]}],
            "completion": [{"role": "assistant", "content": train_sft.target_text(ep, k, cfg.grounding, cfg.order)}],
            "images": [image["image"]]}


def run_trl(a, tmp):
    import transformers
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    cfg = train_sft.parse_args(sft_argv(a, "unused"))
    model, processor, _ = train_sft.load_model(cfg.ckpt, device, dtype=torch.float32)  # as train_sft trains
    train = metrics.usable_steps(metrics.load_dataset(cfg.data), cfg.split, cfg.statuses, cfg.order)
    stream = train_sft.batches(train, cfg.batch_size, cfg.bucket, cfg.seed)
    batches = [next(stream) for _ in range(cfg.max_steps)]  # the batches train_sft trains on, in its order
    data = Dataset.from_list([trl_example(ep, k, cfg) for b in batches for ep, k in b])

    class StepTimer(TrainerCallback):
        """(time, tokens seen) at each step's end: TRL collates before on_step_begin."""
        def __init__(self):
            self.marks = []

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.marks.append((time.perf_counter(), state.num_input_tokens_seen))

    config = SFTConfig(
        output_dir=tmp, max_steps=cfg.max_steps, per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr, max_grad_norm=cfg.clip,
        bf16=cuda, use_cpu=not cuda, gradient_checkpointing=False,  # TRL's defaults are bf16 and checkpointing on
        completion_only_loss=True, max_length=None, pad_to_multiple_of=None,  # no truncation, no extra padding
        train_sampling_strategy="sequential", include_num_input_tokens_seen="non_padding",
        logging_steps=1, save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, seed=cfg.seed)
    timer = StepTimer()
    # our AdamW and lr schedule (SFTTrainer's `optimizers` argument), so the loss curves can be compared
    # step for step; TRL's own would be fused AdamW on CPU too, and a warmup that starts at lr 0
    optimizer = train_sft.make_optimizer(model, cfg, device)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: train_sft.lr_at(step, cfg) / cfg.lr)
    trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=processor, callbacks=[timer],
                         optimizers=(optimizer, schedule))
    t0 = time.perf_counter()
    trainer.train()
    ends = [(t0, 0)] + timer.marks
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    steps = list(zip(ends, ends[1:]))  # (end of the step before, end of this step)
    r = summary([b[0] - e[0] for e, b in steps], [b[1] - e[1] for e, b in steps], losses, a.skip)
    return dict(r, target_tokens_first_batch=same_examples(trainer, processor, batches[0], cfg),
                versions={"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__})


def same_examples(trainer, processor, batch, cfg):
    """Check that TRL sees our examples: each row's tokens must be ours plus the template's "\\n";
    returns the target tokens of the first batch on both sides."""
    ours = train_sft.encode_batch(processor, batch, cfg)
    theirs = trainer.data_collator([trainer.train_dataset[i] for i in range(len(batch))])
    newline = processor.tokenizer("\n", add_special_tokens=False)["input_ids"]
    for i in range(len(batch)):
        a = ours["input_ids"][i][ours["attention_mask"][i].bool()].tolist()
        b = theirs["input_ids"][i][theirs["attention_mask"][i].bool()].tolist()
        if b != a + newline:
            decode = processor.tokenizer.decode
            raise SystemExit(f"TRL's example {i} is not ours + '\\n':\n ours {decode(a)!r}\n TRL  {decode(b)!r}")
    return {"ours": int((ours["labels"] != -100).sum()), "trl": int((theirs["labels"] != -100).sum())}


def child(a):
    if a.threads and not torch.cuda.is_available():
        torch.set_num_threads(a.threads)
    base = rss_mib()  # after imports (TRL's are imported inside run_trl: counted in its growth)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as tmp:  # our checkpoint and log; TRL's output_dir (it saves nothing)
        r = (run_ours if a.side == "ours" else run_trl)(a, tmp)
    r.update(peak_rss_mib=rss_mib(), rss_after_imports_mib=base, rss_growth_mib=rss_mib() - base)
    if torch.cuda.is_available():
        r["cuda_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    with open(a.result, "w") as f:
        json.dump(r, f)


# ----------------------------------------------------------------------------------------------
# The parent: builds the shared inputs once, runs the sides, compares.

def child_argv(a):
    """The bench's own options, with the data and model already resolved, for a child."""
    return ["--data", a.data, "--split", a.split, "--ckpt", a.ckpt, "--elements", a.elements, "--steps", str(a.steps),
            "--skip", str(a.skip), "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--warmup", str(a.warmup),
            "--threads", str(a.threads)]


def side(python, name, a):
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        p = subprocess.run([python, os.path.abspath(__file__), *child_argv(a), "--side", name, "--result", result],
                           capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"{name} side failed:\n{(p.stdout + p.stderr)[-3000:]}")
        with open(result) as f:
            r = json.load(f)
    print(f"  {name}: {r['tok_per_s_median']:.0f} tok/s (median step), {r['tok_per_s']:.0f} tok/s (all timed steps)",
          flush=True)
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="", help="dataset folder (default: the synthetic test dataset, 12 episodes)")
    p.add_argument("--split", default="", help="training split (default: all for the synthetic data, train otherwise)")
    p.add_argument("--ckpt", default="tiny", help="model for both sides (default: the demo-size tiny Qwen2.5-VL)")
    p.add_argument("--elements", default="text", choices=["none", "text"], help="as `make demo` trains")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per side")
    p.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the timing")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3, help="peak lr (at the demo's 2e-3 the tiny model's loss can spike "
                   "on one side only, a tiny difference amplified, and the curves stop being comparable)")
    p.add_argument("--rounds", type=int, default=3, help="runs per side, alternated; the fastest (median step) is kept")
    p.add_argument("--warmup", type=int, default=5, help="linear lr warmup steps")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU: torch threads per side (0 = torch's default); see above")
    p.add_argument("--trl-python", default=os.path.join(BENCH_VENV, "bin", "python"), help="an interpreter with trl")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)  # internal: run one side
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side:
        return child(a)
    if a.skip >= a.steps:
        raise SystemExit("--skip must be below --steps")
    has_trl = "import importlib.util as u; exit(u.find_spec('trl') is None)"
    if not a.skip_trl and (not os.path.exists(a.trl_python)
                           or subprocess.run([a.trl_python, "-c", has_trl]).returncode):
        raise SystemExit(NO_TRL)
    toy = not a.data
    if toy:
        from conftest import make_toy_dataset
        tmp = tempfile.TemporaryDirectory()  # removed when the bench exits
        a.data = make_toy_dataset(os.path.join(tmp.name, "toy"), n_episodes=12)
    a.split = a.split or ("all" if toy else "train")
    a.ckpt = train_sft.resolve_ckpt(a.ckpt)  # build the tiny model once, before either side loads it
    threads = a.threads or torch.get_num_threads()
    cpu = f"cpu fp32, {threads} torch thread{'s' * (threads > 1)}"
    device = "cuda (bf16 autocast)" if torch.cuda.is_available() else cpu
    report = {"data": a.data, "split": a.split, "ckpt": a.ckpt, "batch_size": a.batch_size, "steps": a.steps,
              "timed_steps": a.steps - a.skip, "lr": a.lr, "device": device, "cpus": os.cpu_count()}
    sides = {"ours": sys.executable} if a.skip_trl else {"ours": sys.executable, "trl": a.trl_python}
    runs = {name: [] for name in sides}
    for r in range(a.rounds):  # alternated, best round kept: other load on a shared machine only ever slows a run
        print(f"round {r + 1}/{a.rounds}: {a.steps} steps of batch {a.batch_size} per side", flush=True)
        for name, python in sides.items():
            runs[name].append(side(python, name, a))
    for name in sides:
        report[name] = min(runs[name], key=lambda x: x["s_per_step_median"])
    if not a.skip_trl:
        o, t = report["ours"], report["trl"]
        report["versions"] = t.pop("versions")
        report["ratio"] = {k: o[k] / t[k] for k in ("tok_per_s_median", "s_per_step_median", "tok_per_s",
                                                    "peak_rss_mib", "rss_growth_mib", "cuda_peak_gib") if k in o}
    print_table(report)
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "sft_throughput.json"), "w") as f:
        json.dump(report, f, indent=1)


def print_table(report):
    o, t = report["ours"], report.get("trl")
    rows = [("tokens/s", "tok_per_s_median", "{:.0f}"), ("s/step", "s_per_step_median", "{:.3f}"),
            ("tokens/s, all", "tok_per_s", "{:.0f}"), ("peak RSS MiB", "peak_rss_mib", "{:.0f}"),
            ("RSS growth MiB", "rss_growth_mib", "{:.0f}"), ("final loss", "final_loss", "{:.4f}"),
            ("loss, last 5", "loss_last5", "{:.4f}")]
    if "cuda_peak_gib" in o:
        rows.insert(2, ("CUDA peak GiB", "cuda_peak_gib", "{:.2f}"))
    print(f"\n{report['device']}; batch {report['batch_size']}, {report['steps']} steps, timed {report['timed_steps']} "
          f"(tokens/s and s/step: median step of the best round; 'all': all timed steps of that round)")
    print(f"{'':16}{'ours':>10}{'TRL':>10}{'ours/TRL':>10}")
    for label, key, fmt in rows:
        ratio = f"{o[key] / t[key]:.2f}x" if t and key not in ("final_loss", "loss_last5") else ""
        print(f"{label:16}{fmt.format(o[key]):>10}{fmt.format(t[key]) if t else '-':>10}{ratio:>10}")
    if t:
        n = t["target_tokens_first_batch"]
        print(f"TRL {report['versions']['trl']}: same prompts checked; its targets carry one more token each "
              f"(first batch: {n['trl']} vs {n['ours']} target tokens)")


if __name__ == "__main__":
    main()
