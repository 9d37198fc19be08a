"""GRPO step: train_grpo.py against TRL's GRPOTrainer on the same tiny model, prompts, G, max new
tokens, prompts per step and learning rate, in one run; then our batched rollout against a naive
loop of `model.generate` calls. Prints seconds per step and peak memory of both sides and the
ratios ours/TRL (targets: step <= 0.5x, memory <= 1x), rollout tokens/s of both generators (the
greedy outputs must be the same); writes bench/out/grpo_step.json.

  make bench                                           (builds .venv-bench-sft with TRL on first use)
  python bench/grpo_step.py                            # tiny demo-size model, synthetic data, CPU
  python bench/grpo_step.py --data demo/miniwob        # real screenshots (after `make demo`)
  python bench/grpo_step.py --skip-trl                 # ours only (no TRL needed)
  python bench/grpo_step.py --real                     # CUDA: random-init Qwen2.5-VL-3B-size model, bf16,
                                                       # FlashAttention-2 against SDPA (bench/gpu.sh runs it)

TRL is a bench-only dependency (requirements-bench.txt), in .venv-bench-sft, a venv layered on .venv
(the same torch and transformers; see bench/sft_throughput.py, whose pattern this follows). Each
side runs in a child process of its own, so each peak is its own: on CPU the child's peak RSS
(ru_maxrss) and its growth over the RSS after imports; on CUDA torch.cuda.max_memory_allocated.
Sides alternate for --rounds rounds; the round with the fastest median step is kept per side.

Like for like: the same (episode, step) prompts in the same order (train_grpo's prompt stream; TRL
reads them unshuffled, as conversational prompts with an "images" column -- its chat template
output is checked to be our prompt text), G samples of at most --max-new-tokens at temperature 1,
top_k 0, top_p 1, the same reward (train_grpo.reward_components + ROUGE-L guide score +
total_reward, gold step looked up by a dataset column), beta 0 (no reference model on either
side), one update per batch (mu = 1), token-level loss (TRL's "dapo"), unscaled advantages
(Dr.GRPO: scale_rewards "none"), clip 0.2/0.28, truncated replies masked out, AdamW with betas
(0.9, 0.99) and no weight decay at a constant lr, grad-norm clip 1.0, fp32 on CPU (bf16 autocast on
CUDA), no gradient checkpointing on our side (TRL's default is on: --trl-grad-checkpointing keeps it, which is
what fits TRL on a GPU at real sizes), no saving, no logging integrations.

Known differences, all part of what is measured: ours adds the expert's reply to every group
(--expert always, train_grpo's default): 9 trained rows per prompt against TRL's 8, so ours does
more work. The expert also keeps every group trainable -- a random tiny model never gets a step
right, and with --expert off train_grpo would drop every zero-variance group and skip its update,
while TRL trains on zero advantages. Ours bans every special token but the stops from the policy;
TRL suppresses only the image token. Ours runs the update one group (prompt) at a time, TRL all
P*G rows in one forward pass. TRL's step time runs from one step's end to the next; ours is
train_grpo's own `dt` (rollout, rewards and update).
"""
import argparse
import functools
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
import train_grpo  # noqa: E402
import train_sft  # noqa: E402

BENCH_VENV = os.path.join(ROOT, ".venv-bench-sft")
NO_TRL = ("TRL is not installed for this bench: it runs in its own venv, built by `make .venv-bench-sft/.installed` "
          "(or `make bench`); pass --trl-python to use another interpreter that has trl, or --skip-trl for ours only")


def rss_mib():
    """Peak RSS of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def grpo_argv(a, out):
    """train_grpo's command line for this bench; the TRL side parses it too, so both read one config."""
    return ["--data", a.data, "--split", a.split, "--ckpt", a.ckpt, "--elements", a.elements,
            "--prompts-per-step", str(a.prompts), "--group-size", str(a.group_size),
            "--max-new-tokens", str(a.max_new_tokens), "--lr", str(a.lr), "--beta", "0", "--updates-per-batch", "1",
            "--expert", "always", "--max-steps", str(a.steps), "--save-every", "0", "--dump-every", "0",
            "--out", out, "--no-progress"]


def summary(times, skip):
    return {"steps_timed": len(times) - skip, "s_per_step_median": statistics.median(times[skip:]),
            "s_per_step_mean": statistics.mean(times[skip:]), "step_times": [round(t, 4) for t in times]}


def options(cfg):
    """The prompt options train_grpo.main uses: the flags, else the checkpoint's, else the defaults."""
    return metrics.prompt_options(cfg.grounding, cfg.order, cfg.elements, metrics.trained_options(cfg.ckpt))


def step_batches(cfg, opts):
    """The prompts train_grpo trains on, step by step, in its order."""
    steps = metrics.usable_steps(metrics.load_dataset(cfg.data), cfg.split, cfg.statuses, opts["order"])
    stream = train_grpo.prompt_stream(steps, cfg.prompts_per_step, cfg.seed)
    return [next(stream) for _ in range(cfg.max_steps)]


def attention(a):
    """load_model's `attn`: None lets it pick (FlashAttention-2 on CUDA when installed), "sdpa" holds that back."""
    return "sdpa" if a.attn == "sdpa" else None


# ----------------------------------------------------------------------------------------------
# The two sides, each run in a child process (--side) that writes its figures to --result.

def run_ours(a, tmp):
    out = os.path.join(tmp, "ckpt")
    if a.attn == "sdpa":  # train_grpo picks FlashAttention-2 on CUDA when installed; --attn sdpa holds it back
        train_grpo.load_model = functools.partial(train_grpo.load_model, attn="sdpa")
    argv = grpo_argv(a, out) + (["--dtype", "bfloat16"] if torch.cuda.is_available() else [])
    argv += ["--grad-checkpointing"] * a.grad_checkpointing
    train_grpo.main(argv)
    with open(out + ".log.jsonl") as f:
        log = [json.loads(line) for line in f]
    n = a.prompts * a.group_size
    r = summary([x["dt"] for x in log], a.skip)
    # train_grpo logs rollout tok/s and the reply length: the rollout's share of each step follows
    roll = [x["reply_len"] * n / x["rollout_tok_s"] for x in log]
    r.update(rollout_s_median=statistics.median(roll[a.skip:]), reward_mean=statistics.mean(x["reward"] for x in log),
             rollout_tok_s_median=statistics.median(x["rollout_tok_s"] for x in log[a.skip:]))
    return r


def trl_example(ep, k, row, opts):
    """One step as TRL's conversational prompt: the image goes to "images" and TRL puts its
    placeholder before the user text, where metrics.build_messages puts it."""
    elements = opts["elements"] if opts["elements"] != "none" else None
    msgs = metrics.build_messages(ep, k, opts["grounding"], opts["order"], elements=elements)
    (system,), (image, user) = msgs[0]["content"], msgs[1]["content"]
    return {"prompt": [{"role": "system", "content": system["text"]}, {"role": "user", "content": user["text"]}],
            "images": [image["image"]], "row": row}


def run_trl(a, tmp):
    import transformers
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.data_utils import prepare_multimodal_messages
    cuda = torch.cuda.is_available()
    cfg = train_grpo.parse_args(grpo_argv(a, "unused"))
    opts = options(cfg)
    # fp32 weights as train_grpo's policy (TRL's bf16=True on CUDA is autocast, like ours)
    model, processor, attn = train_grpo.load_model(cfg.ckpt, torch.device("cuda" if cuda else "cpu"),
                                                   dtype=torch.float32, attn=attention(a))
    items = [item for b in step_batches(cfg, opts) for item in b]
    data = Dataset.from_list([trl_example(ep, k, i, opts) for i, (ep, k) in enumerate(items)])
    check_prompt(processor, data[0], items[0], opts, prepare_multimodal_messages)
    guides = opts["order"] != "action_only"

    def reward(completions, row, **kwargs):
        """train_grpo's reward for each completion; `row` finds the gold step."""
        out = []
        for c, i in zip(completions, row):
            ep, k = items[i]
            comp = train_grpo.reward_components(c[0]["content"], ep["steps"][k], opts["grounding"], opts["order"],
                                                ep["viewport"])
            if guides:
                train_grpo.guide_scores(cfg.guide_reward, [comp], ep["steps"][k])
            out.append(train_grpo.total_reward(comp, cfg, guides))
        return out

    class StepTimer(TrainerCallback):
        """Time at each step's end (TRL generates inside its training step)."""
        def __init__(self):
            self.marks = []

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.marks.append(time.perf_counter())

    config = GRPOConfig(
        output_dir=tmp, max_steps=cfg.max_steps, num_generations=cfg.group_size,
        max_completion_length=cfg.max_new_tokens,
        per_device_train_batch_size=cfg.prompts_per_step * cfg.group_size,  # one step = P x G
        gradient_accumulation_steps=1,
        learning_rate=cfg.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", adam_beta1=0.9,
        adam_beta2=0.99, weight_decay=0.0, max_grad_norm=cfg.clip, beta=0.0, num_iterations=1, loss_type="dapo",
        scale_rewards="none", epsilon=cfg.clip_low, epsilon_high=cfg.clip_high, mask_truncated_completions=True,
        temperature=cfg.temperature, top_k=0, top_p=1.0, shuffle_dataset=False,
        bf16=cuda, use_cpu=not cuda, gradient_checkpointing=a.trl_grad_checkpointing, logging_steps=1,
        save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        seed=cfg.seed, log_completions=False)
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=processor,
                          callbacks=[timer])
    t0 = time.perf_counter()
    trainer.train()
    ends = [t0] + timer.marks
    r = summary([b - e for e, b in zip(ends, ends[1:])], a.skip)
    rewards = [x["reward"] for x in trainer.state.log_history if "reward" in x]
    r.update(reward_mean=statistics.mean(rewards) if rewards else None, attention=attn,
             versions={"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__})
    return r


def check_prompt(processor, example, item, opts, prepare):
    """TRL must see our prompt: its chat template output has to be metrics.chat_prompt's text."""
    theirs = processor.apply_chat_template(prepare(example["prompt"], example["images"]), add_generation_prompt=True,
                                           tokenize=False)
    ours, _ = metrics.chat_prompt(processor, *item, opts)
    if theirs != ours:
        raise SystemExit(f"TRL's prompt is not ours:\n ours {ours!r}\n TRL  {theirs!r}")


# ----------------------------------------------------------------------------------------------
# Rollouts: train_grpo.sample (each prompt prefilled once, its KV cache repeated for its G samples) against
# one model.generate per prompt and sample; greedy for the equality check, sampled for tok/s.

def naive(policy, prompts, images, G, greedy):
    """One model.generate per prompt and sample (batch 1, no padding): the loop batching replaces."""
    from transformers import GenerationConfig
    processor = policy.processor
    gen = GenerationConfig(do_sample=not greedy, temperature=None if greedy else 1.0, top_k=None if greedy else 0,
                           top_p=None if greedy else 1.0, max_new_tokens=policy.args.max_new_tokens,
                           eos_token_id=policy.stops.tolist(), pad_token_id=processor.tokenizer.pad_token_id,
                           suppress_tokens=policy.banned.tolist())
    rows = []
    for p, im in zip(prompts, images):
        enc = processor(text=[p], images=metrics.images_arg(processor, [im]), return_tensors="pt").to(policy.device)
        for _ in range(1 if greedy else G):  # greedy: the G samples of a prompt are one reply
            out = policy.raw.generate(**enc, generation_config=gen)[0, enc["input_ids"].shape[1]:]
            rows += [out] * (G if greedy else 1)
    return torch.nn.utils.rnn.pad_sequence(rows, True, processor.tokenizer.pad_token_id)


def timed(fn, *args):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def replies(ids, stops):
    """Each row's reply tokens, up to and including its end of turn."""
    mask, _ = train_grpo.completion_mask(ids, stops)
    return [r[m.bool()].tolist() for r, m in zip(ids, mask)], int(mask.sum())


def run_rollout(a, tmp):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = train_grpo.parse_args(grpo_argv(a, "unused"))
    opts = options(cfg)
    model, processor, attn = train_grpo.load_model(cfg.ckpt, device, dtype=torch.float32, attn=attention(a))
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    stops = train_grpo.stop_ids(model, processor)
    banned = train_grpo.banned_ids(processor, stops)
    policy = train_grpo.Policy(model, model, processor, stops, banned, autocast, opts, cfg)
    first_step = step_batches(cfg, opts)[0]
    prompts, images = map(list, zip(*(metrics.chat_prompt(processor, ep, k, opts) for ep, k in first_step)))
    G, N = cfg.group_size, cfg.max_new_tokens
    with torch.no_grad(), autocast:
        train_grpo.sample(policy, prompts[:1], images[:1], G)  # warm-up
        (fast, _, _), _ = timed(train_grpo.sample, policy, prompts, images, G, True)
        slow, _ = timed(naive, policy, prompts, images, G, True)
        a_rows, b_rows = replies(fast, stops)[0], replies(slow, stops)[0]
        same = sum(x == y for x, y in zip(a_rows, b_rows))
        # sampled, as training rolls out: the fastest of --rounds tries per generator
        t_ours, t_naive, n_ours, n_naive = [], [], 0, 0
        for _ in range(a.rounds):
            (ids, _, _), t = timed(train_grpo.sample, policy, prompts, images, G)
            t_ours.append(t)
            n_ours = replies(ids, stops)[1] / t if t == min(t_ours) else n_ours
            ids, t = timed(naive, policy, prompts, images, G, False)
            t_naive.append(t)
            n_naive = replies(ids, stops)[1] / t if t == min(t_naive) else n_naive
    kernels = {}
    if device.type == "cuda":  # which attention kernels run: in the rollout, and in one update pass of a group
        with torch.no_grad(), autocast:
            kernels["rollout"] = attention_kernels(train_grpo.sample, policy, prompts, images, G)
        inputs, mask, _ = train_grpo.group_inputs(policy, prompts[0], images[0], ids[:G])
        kernels["update"] = attention_kernels(lambda: train_grpo.shared_prefix_logprobs(policy, inputs, mask).sum()
                                              .backward())
    return {"prompts": len(prompts), "group_size": G, "max_new_tokens": N, "attention": attn,
            "same_greedy_replies": same, "replies": len(a_rows), "ours_tok_s": n_ours, "naive_tok_s": n_naive,
            "speedup": n_ours / n_naive, "ours_s": min(t_ours), "naive_s": min(t_naive), "attention_kernels": kernels}


def attention_kernels(fn, *args):
    """The CUDA kernels of one call whose names say attention (flash, cuDNN, memory-efficient, or the math
    path's softmax), by CUDA time: which kernel SDPA or FlashAttention-2 picked."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    words = ("flash", "fmha", "cudnn", "attention", "attn", "efficient", "softmax")
    rows = [e for e in prof.key_averages() if any(w in e.key.lower() for w in words)
            and not e.key.startswith(("aten::", "cuda"))]  # kernels, not the ops or runtime calls that launch them
    time_of = lambda e: getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)  # noqa: E731
    return [f"{e.key[:90]} ({time_of(e) / 1e3:.1f} ms)" for e in sorted(rows, key=time_of, reverse=True)[:6]]


def child(a):
    if a.threads and not torch.cuda.is_available():
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    base = rss_mib()  # after imports (TRL's are imported inside run_trl: counted in its growth)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as tmp:  # our checkpoint and log; TRL's output_dir (it saves nothing)
        r = {"ours": run_ours, "trl": run_trl, "rollout": run_rollout}[a.side](a, tmp)
    r.update(peak_rss_mib=rss_mib(), rss_after_imports_mib=base, rss_growth_mib=rss_mib() - base)
    if torch.cuda.is_available():
        r["cuda_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    with open(a.result, "w") as f:
        json.dump(r, f)


# ----------------------------------------------------------------------------------------------
# --real: a random-init model of Qwen2.5-VL-3B's size, saved once so both sides load it as a checkpoint.

def real_checkpoint(folder):
    """bench/bench_model.py's random-init Qwen2.5-VL-3B: the published sizes, the real vocabulary size and a
    tokenizer with about a real BPE's token counts (built once, kept in bench/out/)."""
    sys.path.insert(0, HERE)
    import bench_model
    return bench_model.build(folder, "3b")


# ----------------------------------------------------------------------------------------------
# The parent: builds the shared inputs once, runs the sides, compares.

def child_argv(a):
    """The bench's own options, with the data and model already resolved, for a child."""
    return ["--data", a.data, "--split", a.split, "--ckpt", a.ckpt, "--elements", a.elements, "--steps", str(a.steps),
            "--skip", str(a.skip), "--prompts", str(a.prompts), "--group-size", str(a.group_size),
            "--max-new-tokens", str(a.max_new_tokens), "--lr", str(a.lr), "--threads", str(a.threads),
            "--rounds", str(a.rounds), "--attn", a.attn] + ["--trl-grad-checkpointing"] * a.trl_grad_checkpointing \
        + ["--grad-checkpointing"] * a.grad_checkpointing


def side(python, name, a):
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        p = subprocess.run([python, os.path.abspath(__file__), *child_argv(a), "--side", name, "--result", result],
                           capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"{name} side failed:\n{(p.stdout + p.stderr)[-3000:]}")
        with open(result) as f:
            r = json.load(f)
    if name != "rollout":
        print(f"  {name} ({a.attn}): {r['s_per_step_median']:.3f} s/step (median), peak RSS {r['peak_rss_mib']:.0f} MiB"
              + (f", CUDA peak {r['cuda_peak_gib']:.1f} GiB" if "cuda_peak_gib" in r else ""), flush=True)
    return r


def compare(a, sides):
    """Alternated rounds of every side; per side the round with the fastest median step."""
    runs = {name: [] for name in sides}
    for r in range(a.rounds):  # other load on a shared machine only ever slows a run: keep the best
        print(f"round {r + 1}/{a.rounds}: {a.steps} steps of {a.prompts} prompts x G={a.group_size}, "
              f"{a.max_new_tokens} new tokens, per side", flush=True)
        for name, python in sides.items():
            runs[name].append(side(python, name, a))
    report = {name: min(runs[name], key=lambda x: x["s_per_step_median"]) for name in sides}
    if "trl" in report:
        o, t = report["ours"], report["trl"]
        report["versions"] = t.pop("versions")
        compared = ("s_per_step_median", "s_per_step_mean", "peak_rss_mib", "rss_growth_mib", "cuda_peak_gib")
        report["ratio"] = {k: o[k] / t[k] for k in compared if k in o}
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="", help="dataset folder (default: the synthetic test dataset, 12 episodes)")
    p.add_argument("--screen", default="160x120", help="the synthetic data's screenshot size (a real page: 1280x800)")
    p.add_argument("--split", default="", help="training split (default: all for the synthetic data, train otherwise)")
    p.add_argument("--ckpt", default="tiny", help="model for both sides (default: the demo-size tiny Qwen2.5-VL)")
    p.add_argument("--elements", default="text", choices=["none", "text"], help="as `make demo` trains")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per side")
    p.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the timing")
    p.add_argument("--prompts", type=int, default=4, help="prompts per optimizer step")
    p.add_argument("--group-size", type=int, default=8, help="G: samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--rounds", type=int, default=3, help="runs per side, alternated; the fastest (median step) is kept")
    p.add_argument("--threads", type=int, default=1, help="CPU: torch threads per side (0 = torch's default); "
                   "one, as bench/sft_throughput.py explains: two stall each other on a shared 2-core machine")
    p.add_argument("--attn", default="auto", choices=["auto", "sdpa"],
                   help="auto: FlashAttention-2 on CUDA when installed")
    p.add_argument("--real", action="store_true",
                   help="CUDA only: bench/bench_model.py's random-init Qwen2.5-VL-3B (real vocabulary), bf16 autocast, "
                        "FlashAttention-2 (when installed) against SDPA, one round")
    p.add_argument("--trl-python", default=os.path.join(BENCH_VENV, "bin", "python"), help="an interpreter with trl")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--skip-rollout", action="store_true", help="no rollout comparison (train_grpo steps only)")
    p.add_argument("--trl-grad-checkpointing", action="store_true", help="TRL at its default: gradient checkpointing")
    p.add_argument("--grad-checkpointing", action="store_true", help="train_grpo with --grad-checkpointing (a 7B)")
    p.add_argument("--json", default="", help="where to write the report (default: bench/out/grpo_step.json, "
                   "or grpo_real.json with --real)")
    p.add_argument("--side", choices=["ours", "trl", "rollout"], help=argparse.SUPPRESS)  # internal: run one side
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side:
        return child(a)
    if a.skip >= a.steps:
        raise SystemExit("--skip must be below --steps")
    if a.real and not torch.cuda.is_available():
        raise SystemExit("--real needs a CUDA GPU")
    no_trl = "import importlib.util as u; exit(u.find_spec('trl') is None)"  # exit status 1 without trl
    if not a.skip_trl and (not os.path.exists(a.trl_python) or subprocess.run([a.trl_python, "-c", no_trl]).returncode):
        raise SystemExit(NO_TRL)
    toy = not a.data
    if toy:
        from conftest import make_toy_dataset
        tmp = tempfile.TemporaryDirectory()  # removed when the bench exits
        w, h = map(int, a.screen.split("x"))
        a.data = make_toy_dataset(os.path.join(tmp.name, "toy"), n_episodes=12, size=(w, h))
    a.split = a.split or ("all" if toy else "train")
    if a.real:
        a.ckpt, a.rounds = real_checkpoint(os.path.join(HERE, "out", "qwen2_5_vl-3b")), 1
    else:
        a.ckpt = train_sft.resolve_ckpt(a.ckpt)  # build the tiny model once, before either side loads it
    threads = a.threads or torch.get_num_threads()
    device = ("cuda (bf16 autocast)" if torch.cuda.is_available()
              else f"cpu fp32, {threads} torch thread{'s' * (threads > 1)}")
    report = {"data": a.data, "split": a.split, "ckpt": a.ckpt, "prompts_per_step": a.prompts,
              "group_size": a.group_size, "max_new_tokens": a.max_new_tokens, "steps": a.steps,
              "timed_steps": a.steps - a.skip, "lr": a.lr,
              "device": device, "cpus": os.cpu_count()}
    sides = {"ours": sys.executable} if a.skip_trl else {"ours": sys.executable, "trl": a.trl_python}
    attns = ["auto", "sdpa"] if a.real else [a.attn]  # auto = FlashAttention-2 when flash-attn is installed
    for attn in attns:
        a.attn = attn
        key = "" if len(attns) == 1 else f"{attn}_"
        report[key + "step"] = compare(a, sides)
        if not a.skip_rollout:
            print(f"rollouts ({attn}): train_grpo.sample vs one model.generate per prompt and sample", flush=True)
            report[key + "rollout"] = side(sys.executable, "rollout", a)
        print_table(report, key)
    path = a.json or os.path.join(HERE, "out", "grpo_real.json" if a.real else "grpo_step.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)


def print_table(report, key=""):
    s, r = report[key + "step"], report.get(key + "rollout")
    o, t = s["ours"], s.get("trl")
    rows = [("s/step (median)", "s_per_step_median", "{:.3f}"), ("s/step (mean)", "s_per_step_mean", "{:.3f}"),
            ("peak RSS MiB", "peak_rss_mib", "{:.0f}"), ("RSS growth MiB", "rss_growth_mib", "{:.0f}")]
    if "cuda_peak_gib" in o:
        rows.insert(2, ("CUDA peak GiB", "cuda_peak_gib", "{:.2f}"))
    print(f"\n{report['device']}; {report['prompts_per_step']} prompts x G={report['group_size']} per step, "
          f"{report['max_new_tokens']} new tokens, {report['steps']} steps, timed {report['timed_steps']} "
          f"(median step of the best of the rounds){'; attention ' + r['attention'] if key else ''}")
    print(f"{'':18}{'ours':>10}{'TRL':>10}{'ours/TRL':>10}{'target':>9}")
    for label, k, fmt in rows:
        ratio = f"{o[k] / t[k]:.2f}x" if t else ""
        target = {"s_per_step_median": "<=0.5x", "peak_rss_mib": "<=1x", "cuda_peak_gib": "<=1x"}.get(k, "")
        print(f"{label:18}{fmt.format(o[k]):>10}{fmt.format(t[k]) if t else '-':>10}{ratio:>10}{target:>9}")
    print(f"ours: rollout {o['rollout_s_median']:.3f} s of the median step ({o['rollout_tok_s_median']:.0f} tok/s)"
          + (f"; TRL {report[key + 'step']['versions']['trl']}, same prompt text checked" if t else ""))
    if r:
        print(f"rollout tok/s (sampled, {r['prompts']} prompts x G={r['group_size']}): train_grpo.sample "
              f"{r['ours_tok_s']:.0f}, naive generate {r['naive_tok_s']:.0f} -> {r['speedup']:.2f}x; "
              f"same greedy replies {r['same_greedy_replies']}/{r['replies']}")
        for name, kernels in r.get("attention_kernels", {}).items():
            print(f"attention kernels ({name}): {', '.join(kernels) or 'none found'}")


if __name__ == "__main__":
    main()
