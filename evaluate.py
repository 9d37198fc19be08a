r"""evaluate.py -- live evaluation: run a policy in the real environments, score actions AND guides, report.

Each episode runs in collect.py's own loop (same reset, observation, settle, step limit, per-action
timeout, origin allow-list, crash retry), so an evaluation run is itself a dataset: <out>/episodes.jsonl
+ <out>/img/, readable by metrics.load_dataset and annotate.py (its guides can be reviewed like
any draft). Next to it: results.json (metrics per task and overall, micro and macro, with bootstrap
confidence intervals) and report.html (every step's screenshot with the acted-on element
highlighted and the guide drawn as a callout bubble, the action under it; opens from disk).

Runbook
  # CPU smoke (~30 s):
  python evaluate.py --suite backoffice --tasks close-ticket --policy expert --episodes 2 --out runs/smoke
  # expert ceiling and random floor:
  python evaluate.py --suite backoffice --policy expert --episodes 3 --seed 0 --workers 4 --out runs/bo-expert
  python evaluate.py --suite backoffice --policy random --episodes 3 --seed 0 --workers 4 --out runs/bo-random
  # a frontier model:
  OPENAI_API_KEY=... python evaluate.py --suite backoffice --policy api \
      --api-base https://api.openai.com/v1 --api-model gpt-4o --grounding som --order guide_first \
      --episodes 3 --workers 4 --out runs/bo-gpt4o
  # a local server (vLLM / SGLang / llama.cpp: any OpenAI-compatible chat-completions endpoint; no key):
  python evaluate.py --policy api --api-base http://127.0.0.1:8000/v1 \
      --api-model Qwen/Qwen2.5-VL-7B-Instruct ...
  # a reasoning model (merged into every request body; null drops a default field):
  ... --api-extra '{"max_tokens": null, "temperature": null, "max_completion_tokens": 4000}'
  # continue after Ctrl-C: the same command again (finished episodes are skipped; results cover all of them)
  # on N machines: add --shard K/N --out runs/x/part-K on machine K, then (docs/scale-out.md)
  python metrics.py merge runs/x/part-* --out runs/x/all && python evaluate.py --report runs/x/all
  # guide playback: the episode replayed on the real app, each guide shown as an in-page tooltip anchored
  # to its element; one screenshot per step in runs/bo-gpt4o/playback/<episode>/ (to watch it live:
  # --headed --step-pause 2)
  python evaluate.py --playback runs/bo-gpt4o --episode backoffice.close-ticket.0
  # MAG-Bench: every test (task, seed) of a benchmark, suite by suite under its protocol, scored per suite
  python evaluate.py --benchmark mag-v1.1 --policy ckpt --ckpt ckpt/sft --workers 2 --out runs/v1.1_sft

Metrics (per task, and overall as micro = over all episodes/steps and macro = mean of per-task values):
  success          the environment's own evaluator (an episode that ended in an error has failed)
  mean_steps       steps per episode
  invalid_rate     share of steps whose reply did not parse or whose action could not be executed
  guide_grounding  share of steps whose guide names the element acted on with a verb that fits the op
                   (metrics.guide_grounding, reference-free, against the policy's own action); a step
                   with an unusable reply has no guide and counts as not grounded
  joint            task success with every step's guide grounded
Confidence intervals: percentile bootstrap over episodes, resampled within each task (the number of
episodes per task is fixed by the design), so step-level rates keep their episodes together.

Policies: `api` (any OpenAI-compatible endpoint: the screenshot -- Set-of-Mark boxes drawn by
metrics.draw_som for --grounding som, raw for coord -- goes as a data URL in exactly the prompt of
metrics.build_messages, the training prompt; the reply is parsed by metrics.parse_output; timeouts
and HTTP errors are retried with backoff; a request the endpoint refuses (a 4xx: too long, say) is an
invalid step, but an endpoint that still fails after the retries is the run's error, not the policy's:
the episode goes to <out>/api_failed.jsonl, not into the scores, is named, and a rerun of the same
--out redoes it (the run exits non-zero until then); the key is read from --api-key-env and never
written anywhere). `expert` is collect.py's scripted expert and, in guide_first order (the default), each
step's guide as the template drafter writes it (metrics.template_guides: the sentence of `annotate.py draft
--drafter template`): the reference guides on the gold actions, so its guide grounding and joint success are
labelled the guides' ceiling; `--order action_only` runs it without guides. `random` is collect.py's and
writes no guides (action_only): its guide metrics are n/a, not zero. `ckpt` runs a local checkpoint (what
train_sft.py or train_grpo.py wrote) with the prompt, grounding and order it was trained with (read from
its train_config.json unless given), greedy decoding:
  python evaluate.py --suite miniwob --tasks click-button --policy ckpt --ckpt ckpt/sft --episodes 5 \
      --out runs/sft

Left out on purpose: no paired comparison of two runs here (metrics.paired_bootstrap does it from
two results.json's per-episode rows); no video, screenshots only.
"""
import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import html
import json
import logging
import os
import re
import signal
import string
import sys
import time

import collect
import metrics

# ----------------------------------------------------------------------------------------------
# Config

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # what to evaluate
    collect.add_suite_args(p, "backoffice")
    p.add_argument("--benchmark", default=None, metavar="NAME",
                   help="every test (task, seed) of a benchmark (tasks/NAME.json, or a path) with its run "
                        "protocol, in place of --suite, --tasks, --episodes, --seed and the run flags")
    p.add_argument("--other-browser", action="store_true",
                   help="with --benchmark: run on a Chromium (or observation snippets) other than the "
                        "definition's; the results are marked not comparable")
    p.add_argument("--episodes", type=int, default=3, help="episodes per task (seeds seed..seed+episodes-1)")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--policy", default="expert", choices=["expert", "random", "api", "ckpt"], help="who acts")
    p.add_argument("--grounding", default=None, choices=metrics.GROUNDINGS,
                   help="marks or points (api/ckpt; default som, or the checkpoint's training config)")
    p.add_argument("--order", default=None, choices=metrics.ORDERS,
                   help="output order (api/ckpt/expert; default guide_first, or the checkpoint's; "
                        "--policy expert --order action_only: the expert writes no guides)")
    p.add_argument("--elements", default=None, choices=["text"],
                   help="prompt variant: list the marks' text too (default: the checkpoint's)")
    # a local checkpoint
    p.add_argument("--ckpt", default=None,
                   help="--policy ckpt: a Hugging Face folder (what train_sft.py/train_grpo.py wrote)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="--policy ckpt: reply length cap")
    p.add_argument("--out", default="runs/eval", help="run folder (a dataset + results.json + report.html)")
    # the api policy
    p.add_argument("--api-base", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible endpoint")
    p.add_argument("--api-model", default=None,
                   help="model name sent to the endpoint (required for --policy api)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the key (unset: no key sent)")
    p.add_argument("--api-timeout", type=float, default=60.0, help="seconds per request")
    p.add_argument("--api-retries", type=int, default=3,
                   help="retries after a timeout or HTTP error; then the step is invalid")
    p.add_argument("--api-backoff", type=float, default=1.0,
                   help="seconds before the first retry, doubling after")
    p.add_argument("--api-max-tokens", type=int, default=200, help="reply length cap")
    p.add_argument(
        "--api-extra", default="{}", help='JSON merged into every request body; null drops a key, e.g. '
        '\'{"max_tokens": null, "temperature": null, "max_completion_tokens": 4000}\' for reasoning models')
    # how (collect.py's flags)
    collect.add_run_args(p)
    p.add_argument("--n-boot", type=int, default=1000,
                   help="bootstrap resamples for the confidence intervals")
    p.add_argument(
        "--report", default=None, metavar="RUN",
        help="render RUN's results.json and report.html again without running (e.g. merged shards)")
    # guide playback of a recorded episode
    p.add_argument("--playback", default=None, metavar="RUN",
                   help="replay an episode of RUN with its guides as in-page tooltips")
    p.add_argument("--episode", default=None, help="episode id for --playback")
    p.add_argument("--step-pause", type=float, default=0.0,
                   help="playback: seconds each tooltip stays up (to watch it --headed)")
    args = p.parse_args(argv)
    if args.episodes < 1 or args.workers < 1 or args.max_steps < 1 or args.n_boot < 1:
        p.error("--episodes, --workers, --max-steps and --n-boot must be >= 1")
    if args.policy == "api" and not args.playback and not args.api_model:
        p.error("--policy api needs --api-model (the model name the endpoint serves)")
    try:
        args.api_extra = json.loads(args.api_extra)
    except json.JSONDecodeError as e:
        p.error(f"--api-extra is not JSON: {e}")
    if not isinstance(args.api_extra, dict):
        p.error("--api-extra must be a JSON object")
    runs_ckpt = args.policy == "ckpt" and not (args.playback or args.report)
    if runs_ckpt and (not args.ckpt or not os.path.exists(os.path.join(args.ckpt, "config.json"))):
        p.error(f"--policy ckpt needs --ckpt FOLDER with a Hugging Face checkpoint "
                f"(got {args.ckpt!r}: no config.json there)")
    trained = metrics.trained_options(args.ckpt) if runs_ckpt else None
    opts = metrics.prompt_options(args.grounding, args.order, args.elements, trained)
    args.grounding, args.order = opts["grounding"], opts["order"]
    # None, not "none": run.json reads as before
    args.elements = "text" if opts["elements"] == "text" else None
    if args.playback and not args.episode:
        p.error("--playback needs --episode ID (see the run's report.html or episodes.jsonl for ids)")
    return args


# ----------------------------------------------------------------------------------------------
# Policies. A policy is an object with `order`, `grounding`, `executed` and `async act(obs) -> text`
# (see collect.py); make_policy returns the per-episode factory that collect.run_episodes calls.

class ApiPolicy:
    """A model behind an OpenAI-compatible endpoint, prompted exactly as in training. Keeps its raw reply on
    the step (`reply`; `api_error` when the endpoint failed; `api_seconds`, prompt building included): an
    evaluation run shows what the model said, not only what was parsed from it. Its guides enter the run as
    drafts (`guide_meta.drafter` = policy:api:MODEL), ready for annotate.py's review."""
    executed = False

    def __init__(self, args, key):
        self.args, self.key = args, key
        self.grounding, self.order = args.grounding, args.order

    def ask(self, ep, k, png):
        """The blocking part, run in a thread: the Set-of-Mark drawing and the PNG/base64 encoding cost
        tens of ms per step, and the request seconds; the other workers' browsers go on meanwhile."""
        img = metrics.step_image(ep, k, self.grounding, png)
        a = self.args
        messages = metrics.openai_messages(
            metrics.build_messages(ep, k, self.grounding, self.order, elements=a.elements, image=img))
        return metrics.chat_completion(a.api_base, a.api_model, messages, self.key, a.api_timeout,
                                       a.api_retries, a.api_backoff, a.api_max_tokens, a.api_extra)

    async def act(self, obs):
        ep, k = obs["episode"], obs["step"]
        step, t = ep["steps"][k], time.perf_counter()
        try:
            text = await asyncio.to_thread(self.ask, ep, k, obs["png"])
        # a request refused (too long, ...): a failed step (unparseable ""), the loop goes on; an endpoint
        # that failed after its retries is the run's error, not the policy's: collect.py sets it aside
        except metrics.ApiError as e:
            if e.outage:
                raise
            text, step["api_error"] = "", str(e)
        step["reply"], step["api_seconds"] = text, round(time.perf_counter() - t, 3)
        if metrics.parse_output(text, self.grounding, self.order, ep["viewport"])[0]:
            # who wrote it, as annotate.py records drafters
            step["guide_meta"] = {"drafter": f"policy:api:{self.args.api_model}"}
        return text


class CkptPolicy:
    """A local checkpoint through transformers' Auto classes: the same prompt as training and replay.py
    (metrics.build_messages with the live episode's history), greedy KV-cache generation, the reply
    parsed like any other. One model serves every worker: generation runs in a thread (torch releases
    the GIL) behind a lock, while the other workers' browsers go on."""
    executed = False

    def __init__(self, args, model, processor, lock):
        self.args = args
        self.model = model
        self.processor = processor
        self.lock = lock
        self.grounding, self.order = args.grounding, args.order
        self.opts = metrics.prompt_options(args.grounding, args.order, args.elements)

    def generate(self, ep, k, png):
        import torch
        img = metrics.step_image(ep, k, self.grounding, png)
        text, _ = metrics.chat_prompt(self.processor, ep, k, self.opts, image=img)
        enc = self.processor(text=[text], images=metrics.images_arg(self.processor, [img]),
                             return_tensors="pt")
        enc = enc.to(self.model.device)
        with self.lock, torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=self.args.max_new_tokens, do_sample=False,
                                      num_beams=1)
        return self.processor.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)

    async def act(self, obs):
        ep, k = obs["episode"], obs["step"]
        t = time.perf_counter()
        text = await asyncio.to_thread(self.generate, ep, k, obs["png"])
        ep["steps"][k]["reply"], ep["steps"][k]["model_seconds"] = text, round(time.perf_counter() - t, 3)
        if metrics.parse_output(text, self.grounding, self.order, ep["viewport"])[0]:
            ep["steps"][k]["guide_meta"] = {"drafter": f"policy:ckpt:{self.args.ckpt}"}
        return text


class GuidedExpert:
    """collect.py's scripted expert, each reply with its guide (any order but action_only): the sentence the
    template drafter writes for the step from the target's name, section and row and the expert's purpose,
    offline and deterministic -- metrics.template_guides, what `annotate.py draft --drafter template` writes
    on the recorded episode (tests/test_evaluate.py holds them equal). A scroll's guide names the target it
    brings into view, known once that target is on screen: it is completed then. These are the guides'
    ceiling (the harness's reference guides on the gold actions), not a model's guides."""
    grounding, executed = "som", False

    def __init__(self, expert, order):
        self.expert, self.order = expert, order
        self.purpose = None

    async def act(self, obs):
        reply = await self.expert.act(obs)
        self.purpose = self.expert.purpose   # collect.take_step records it on the step
        ep, k = obs["episode"], obs["step"]
        _, action = metrics.parse_output(reply, "som", "action_only", ep["viewport"])
        step = {**ep["steps"][k], "action": action, **({"purpose": self.purpose} if self.purpose else {})}
        guides = metrics.template_guides({**ep, "steps": ep["steps"][:k] + [step]})
        for earlier, guide in zip(ep["steps"][:k], guides):
            if earlier["action"]["op"] == "scroll":
                earlier["guide"] = guide
        ep["steps"][k]["guide_meta"] = {"drafter": "policy:expert:template"}
        return metrics.format_output(guides[k], action, "som", self.order, ep["viewport"])


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


def make_policy(args, env, key=None):
    """(task, seed) -> a fresh policy per episode; a checkpoint is loaded once, outside the lambda."""
    if args.policy == "api":
        return lambda task, seed: ApiPolicy(args, key)
    if args.policy == "ckpt":
        model, processor, lock = policy_model(args.ckpt)
        return lambda task, seed: CkptPolicy(args, model, processor, lock)
    if args.policy == "expert" and args.order != "action_only":
        return lambda task, seed: GuidedExpert(collect.make_policy("expert", env, task, seed), args.order)
    return lambda task, seed: collect.make_policy(args.policy, env, task, seed)


@functools.lru_cache(maxsize=1)
def policy_model(path):
    """(model, processor, lock) of --policy ckpt, loaded once per process (a benchmark's suites share it)."""
    import threading

    import torch
    model, processor, attn = load_model(path, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"evaluate: {type(model).__name__} from {path}; attention {attn}; {model.dtype}", file=sys.stderr)
    return model, processor, threading.Lock()


def api_key(args):
    """The key from the environment, or None (local servers need none). Never printed."""
    return (os.environ.get(args.api_key_env) or None) if args.api_key_env else None


# ----------------------------------------------------------------------------------------------
# Running: collect.py's workers over the (task, seed) grid; a rerun with the same --out skips what is done.

# what makes episodes comparable
RUN_KEYS = ("suite", "benchmark", "policy", "grounding", "order", "elements", "api_base", "api_model",
            "api_extra", "ckpt", "task_file", "max_steps", "judge_api_base", "judge_model")


def check_run_config(out, config):
    """<out>/run.json pins what produced its episodes: a rerun that would mix two policies (or two
    models, groundings, ...) in one run fails instead of silently skipping the 'finished' episodes."""
    path, data = os.path.join(out, "run.json"), os.path.join(out, "episodes.jsonl")
    if os.path.exists(data) and os.path.getsize(data):
        if not os.path.exists(path):
            raise SystemExit(
                f"evaluate: {out} holds a dataset that evaluate.py did not write; choose another --out")
        with open(path) as f:
            old = json.load(f)
        diff = [f"{k}: {old.get(k)!r} -> {config.get(k)!r}" for k in RUN_KEYS if old.get(k) != config.get(k)]
        if diff:
            raise SystemExit(f"evaluate: {out} holds a run with other settings ({'; '.join(diff)}); "
                             "choose another --out")
    os.makedirs(out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)


async def run_all(args, make, env, tasks):
    """Run every (task, seed) of the grid not yet in <out>; returns the ids of the whole grid."""
    ids, jobs = collect.pending_jobs(args.out, env.suite, tasks, args.seed, args.episodes, args.shard)
    print(f"evaluate: {len(jobs)} episodes to run ({len(ids) - len(jobs)} already done), {len(tasks)} tasks, "
          f"policy={args.policy}, workers={args.workers} -> {args.out}", flush=True)
    await collect.run_episodes(env, jobs, make, args.out, workers=args.workers, policy_name=args.policy,
                               **collect.run_options(args), headless=not args.headed,
                               progress=not args.no_progress)
    return ids


# ----------------------------------------------------------------------------------------------
# Metrics: one row per episode, then estimates with stratified bootstrap intervals.

# name -> (label, per-episode (numerator, denominator), uses guides?)
METRICS = {
    "success": ("task success", lambda r: (r["success"], 1), False),
    "mean_steps": ("mean steps", lambda r: (r["steps"], 1), False),
    "invalid_rate": ("invalid-action rate", lambda r: (r["invalid"], r["steps"]), False),
    "guide_grounding": ("guide grounding", lambda r: (r["grounded"], r["steps"]), True),
    "joint": ("joint success", lambda r: (r["joint"], 1), True),
}


def episode_row(ep, guides):
    """What the metrics need from one episode. `guides`: whether the policy writes guides at all."""
    steps = ep["steps"]
    grounded = [metrics.guide_grounding(s.get("guide"), s) for s in steps] if guides else None
    success = bool(ep["success"]) and not ep.get("error")
    return {
        "id": ep["id"], "suite": ep.get("suite"), "task": ep["task"], "seed": ep["seed"],
        "success": int(success), "steps": len(steps), "invalid": sum(1 for s in steps if s.get("exec_error")),
        "grounded": sum(grounded) if guides else None,
        "joint": int(success and bool(steps) and all(grounded)) if guides else None, "error": ep.get("error"),
        "seconds": ep.get("meta", {}).get("seconds")
    }


def results(rows, config, n_boot):
    guides = config["order"] != "action_only"
    by_task = {}
    for r in rows:   # a benchmark's tasks are named with their suite: two suites may share a task name
        task = f"{r['suite']}/{r['task']}" if config.get("benchmark") else r["task"]
        by_task.setdefault(task, []).append(r)
    overall = {}
    per_task = {
        t: {"episodes": len(v), "errors": sum(1 for r in v if r["error"])}
        for t, v in sorted(by_task.items())
    }
    for name, (_, pair, needs_guides) in METRICS.items():
        if needs_guides and not guides:
            overall[name] = None   # n/a: the policy writes no guides
            for t in per_task:
                per_task[t][name] = None
            continue
        pairs = {t: [pair(r) for r in v] for t, v in by_task.items()}
        overall[name] = {**metrics.bootstrap(pairs, n_boot), "n": sum(len(v) for v in pairs.values())}
        for t in per_task:
            b = metrics.bootstrap({t: pairs[t]}, n_boot)
            per_task[t][name] = {"value": b["micro"], "ci": b["micro_ci"]}
    return {"config": config, "episodes": len(rows), "errors": sum(1 for r in rows if r["error"]),
            "steps": sum(r["steps"] for r in rows), "tasks": len(by_task),
            "guide_metrics": guide_note(config),
            "overall": overall, "by_task": per_task, "per_episode": rows,
            "by_suite": by_suite(rows, config, n_boot) if config.get("benchmark") else None}


def guide_note(config):
    """What the guide metrics are: a policy's scores, the guides' ceiling (the expert's template guides on
    its own actions: what the reference guides score) or n/a (no guides)."""
    if config["order"] == "action_only":
        return f"n/a: the {config['policy']} policy writes no guides (action_only)"
    if config["policy"] == "expert":
        return "the guides' ceiling (the template drafter's guides on the expert's own actions)"
    return "scored"


def metric_labels(config):
    """The metrics' names in the report: the expert's guide metrics say that they are the guides' ceiling."""
    ceiling = config["policy"] == "expert" and config["order"] != "action_only"
    return {k: label + (" (the guides' ceiling)" if ceiling and guides else "")
            for k, (label, _, guides) in METRICS.items()}


def by_suite(rows, config, n_boot):
    """A benchmark run's overall metrics for each suite's episodes alone."""
    suites = dict.fromkeys(r["suite"] for r in rows)
    plain = {**config, "benchmark": None}
    return {s: results([r for r in rows if r["suite"] == s], plain, n_boot)["overall"] for s in suites}


# ----------------------------------------------------------------------------------------------
# report.html: self-contained (assets/report.css put inline, screenshots referenced relatively),
# escaped throughout: assets/report.html and report_episode.html are filled by `fill`.
# The highlight and the callout bubble are HTML positioned in percent of the screenshot, so they
# scale with it and no extra image is drawn.

class Html(str):
    """HTML this file built from escaped parts: `fill` puts it in as it is."""


def fill(template, **values):
    """assets/<template> with its $names filled, every value HTML-escaped unless it is Html."""
    text = {k: v if isinstance(v, Html) else html.escape(str(v)) for k, v in values.items()}
    return Html(string.Template(metrics.read_asset(template)).substitute(text))


def fmt(value, name):
    if value is None:
        return "n/a"
    return f"{value:.2f}" if name == "mean_steps" else f"{100 * value:.1f}%"


def cell(m, name, key="micro"):
    """A table cell: the value and its interval, or n/a."""
    if m is None or m.get(key) is None:
        return '<td class="na">n/a</td>'
    ci = m.get(key + "_ci") if key != "value" else m.get("ci")
    span = f' <span class="ci">[{fmt(ci[0], name)}, {fmt(ci[1], name)}]</span>' if ci else ""
    return f"<td>{fmt(m[key], name)}{span}</td>"


def guide_html(text):
    """Escaped text with the guides' **label** emphasis kept as bold."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(text))


def pct(v, total):
    return f"{100 * v / total:.2f}%"


def describe(action, el):
    """A plain-words action for steps without a guide: 'type “ada” into “Username:”'."""
    op, value = action["op"], action.get("value")
    name = f" “{el['text']}”" if el and el.get("text") else ""
    if op in ("type", "select"):
        return f"{op} “{value or ''}”" + (f" {'into' if op == 'type' else 'in'}{name}" if name else "")
    if op in ("press", "scroll"):
        return f"{op} {value}"
    if op == "stop":
        return f"stop, answer “{value}”" if value else "stop"
    return op + name


def step_overlay(ep, step, grounding):
    """The highlight box (or point) and the callout bubble of one step, positioned in percent: the guide, and
    under it, smaller, the action the policy wrote with it."""
    W, H = ep["viewport"]
    action = step["action"]
    el = metrics.gold_element(step)  # None for element-free ops
    if step.get("guide"):
        act = html.escape(metrics.format_action(action, grounding, ep["viewport"]))
        text, cls = f'{guide_html(step["guide"])}<span class="act">{act}</span>', "bubble"
    # an action_only policy: the bubble says what was done, greyed, so the report still reads as a walkthrough
    else:
        said = "no guide" if step.get("exec_error") == metrics.UNPARSEABLE else describe(action, el)
        text, cls = html.escape(said), "bubble noguide"
    box = el["bbox"] if el else None
    point = action.get("point") if action["op"] in metrics.ELEMENT_OPS else None
    if box is None and point is None:   # press / scroll / stop / an unusable reply: a banner at the top
        return f'<div class="{cls} top">{text}</div>'
    x0, y0, x1, y1 = box or [point[0], point[1], point[0], point[1]]
    if box:
        mark = (f'<div class="hl" style="left:{pct(x0, W)};top:{pct(y0, H)};'
                f'width:{pct(x1 - x0, W)};height:{pct(y1 - y0, H)}"></div>')
    else:
        mark = f'<div class="pt" style="left:{pct(point[0], W)};top:{pct(point[1], H)}"></div>'
    side, style = bubble_place(x0, y0, x1, y1, W, H, across=bool(el and el.get("row")))
    return mark + f'<div class="{cls} {side}" style="{style}">{text}</div>'


def bubble_place(x0, y0, x1, y1, W, H, across=False):
    """(class, style) of a callout: beside the target on the side with more room, never wider than that room,
    its arrow at the target's middle (in the lower half it grows upward, so it stays on the screenshot); under
    or over a target too wide to leave a quarter of the width beside it (a full-width field), or in a table
    row (`across`: beside it, the callout would hide the row its guide names)."""
    mid = (y0 + y1) / 2
    if across or max(W - x1, x0) < W / 4:
        left = f"left:{pct(min(x0, W / 2), W)};max-width:46%"
        if mid < H / 2:
            return "b", f"{left};top:calc({pct(y1, H)} + 12px)"
        return "a", f"{left};bottom:calc({pct(H - y0, H)} + 12px)"
    if W - x1 >= x0:   # room on the right: the tooltip starts right of the box
        side, room = "r", pct(W - x1, W)
        style = f"left:calc({pct(x1, W)} + 12px);max-width:min(46%, calc({room} - 16px))"
    else:
        side, room = "l", pct(x0, W)
        style = f"right:calc({pct(W - x0, W)} + 12px);max-width:min(46%, calc({room} - 16px))"
    # the arrow, 10 px from the bubble's top (or bottom), at the target's middle
    if mid < H / 2:
        return side, f"{style};top:{pct(max(0, mid - 0.035 * H), H)}"
    return f"{side} up", f"{style};bottom:{pct(max(0, H - mid - 0.035 * H), H)}"


def badge(ok, text):
    return f'<span class="badge {"ok" if ok else "bad"}">{text}</span>'


def step_caption(ep, step, grounding, guides):
    action = step["action"]
    if step.get("exec_error") == metrics.UNPARSEABLE:
        act = f'unparseable reply: <code>{html.escape((step.get("reply") or "")[:200]) or "(empty)"}</code>'
        if step.get("api_error"):
            act += f' <span class="muted">({html.escape(step["api_error"][:200])})</span>'
    else:
        act = f"<code>{html.escape(metrics.format_action(action, grounding, ep['viewport']))}</code>"
    if step.get("exec_error"):
        status = f'<span class="badge bad">invalid: {html.escape(step["exec_error"])}</span>'
    else:
        status = f'<span class="badge ok">{"executed" if action["op"] != "stop" else "stop"}</span>'
    if guides:
        g = metrics.guide_grounding(step.get("guide"), step)
        status += " " + badge(g, "guide grounded" if g else "guide not grounded")
    return f"<b>{step['step'] + 1}.</b> {act} {status}"


def episode_html(ep, row, grounding, guides):
    ok = badge(row["success"], "success" if row["success"] else "failed")
    if guides:
        ok += " " + badge(row["joint"], "joint yes" if row["joint"] else "joint no")
    err = f'<div class="bad badge">error: {html.escape(ep["error"])}</div>' if ep.get("error") else ""
    figs = "".join(
        f'<figure><div class="shot"><img src="{html.escape(s["screenshot"])}" alt="step {s["step"] + 1}">'
        f'{step_overlay(ep, s, grounding)}</div>'
        f'<figcaption>{step_caption(ep, s, grounding, guides)}</figcaption></figure>'
        for s in ep["steps"])
    seconds = ep.get("meta", {}).get("seconds")
    seconds = f"{seconds:.1f}" if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else "?"
    return fill("report_episode.html", id=ep["id"], instruction=ep["instruction"], n_steps=len(ep["steps"]),
                seconds=seconds, badges=Html(ok), error=Html(err), figures=Html(figs))


def report_html(res, episodes):
    cfg = res["config"]
    guides = cfg["order"] != "action_only"
    labels = metric_labels(cfg)
    head = "".join(f"<th>{html.escape(labels[k])}</th>" for k in METRICS)
    overall = res["overall"]
    summary = "".join(
        f"<tr><td>{html.escape(labels[k])}</td>{cell(overall[k], k)}{cell(overall[k], k, 'macro')}"
        f"<td>{overall[k]['n'] if overall[k] else 'n/a'}</td></tr>" for k in METRICS)
    tasks = "".join(f"<tr><td>{html.escape(t)}</td><td>{v['episodes']}</td>"
                    + "".join(cell(v[k], k, "value") for k in METRICS) + "</tr>"
                    for t, v in res["by_task"].items())
    suites = "".join(f"<tr><td>{html.escape(s)}</td>" + "".join(cell(v[k], k) for k in METRICS) + "</tr>"
                     for s, v in (res.get("by_suite") or {}).items())
    suite_table = Html(f"<h2>Per suite</h2><table><thead><tr><th>suite</th>{head}</tr></thead>"
                       f"<tbody>{suites}</tbody></table>" if suites else "")
    who = cfg["policy"] + (f" ({cfg['api_model']})" if cfg["policy"] == "api" else "")
    rows = {r["id"]: r for r in res["per_episode"]}
    body = "".join(episode_html(ep, rows[ep["id"]], cfg["grounding"], guides) for ep in episodes)
    return fill("report.html", css=Html(metrics.read_asset("report.css")), who=who, suite=cfg["suite"],
                episodes=res["episodes"], tasks=res["tasks"], steps=res["steps"], errors=res["errors"],
                grounding=cfg["grounding"], order=cfg["order"], max_steps=cfg["max_steps"],
                guide_metrics=res["guide_metrics"], overall_rows=Html(summary), metric_heads=Html(head),
                suite_table=suite_table,
                task_rows=Html(tasks), episode_sections=Html(body))


def api_failures(out, ids, scored):
    """[{"id", "error"}] of the episodes of `ids` not scored because the endpoint failed after its retries:
    their last attempt is in <out>/api_failed.jsonl (collect.py put it there, not in the dataset)."""
    last, path = {}, os.path.join(out, metrics.API_FAILED)
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(ValueError):   # a torn last line: that episode is redone all the same
                record = json.loads(line)
                last[record["id"]] = record["error"]
    return [{"id": i, "error": last[i]} for i in ids if i in last and i not in scored]


def write_results(args, config, ids):
    """results.json and report.html for the episodes `ids` of the run folder; returns the results."""
    want = set(ids)
    # the overlays are placed in percent of the viewport, which must be the screenshots' size; no dataset
    # yet when the endpoint failed every episode
    there = os.path.exists(os.path.join(args.out, "episodes.jsonl"))
    found = metrics.load_dataset(args.out, check_images="size") if there else []
    episodes = sorted((e for e in found if e["id"] in want), key=lambda e: (e["task"], e["seed"]))
    guides = config["order"] != "action_only"
    res = results([episode_row(e, guides) for e in episodes], config, args.n_boot)
    res["api_failed"] = api_failures(args.out, ids, {e["id"] for e in episodes})   # not in the scores
    metrics.write_atomic(os.path.join(args.out, "results.json"), json.dumps(res, indent=1))
    metrics.write_atomic(os.path.join(args.out, "report.html"), report_html(res, episodes))
    return res


def print_summary(res):
    for name, (label, _, _) in METRICS.items():
        m = res["overall"][name]
        if m is None:
            print(f"  {label:20s} n/a")
            continue
        ci = lambda key: f"[{fmt(m[key][0], name)}, {fmt(m[key][1], name)}]" if m[key] else ""  # noqa: E731
        print(f"  {label:20s} micro {fmt(m['micro'], name):>7s} {ci('micro_ci'):18s} "
              f"macro {fmt(m['macro'], name):>7s} {ci('macro_ci')}")
    for suite, overall in (res.get("by_suite") or {}).items():   # a benchmark run
        cells = [f"{label} {fmt(overall[name]['micro'], name)}" for name, (label, _, _) in METRICS.items()
                 if overall[name] is not None]
        print(f"  {suite:20s} " + ", ".join(cells))


# ----------------------------------------------------------------------------------------------
# Guide playback: the recorded episode replayed on the real app (same suite, task, seed -> same
# reset), each step's guide shown as a tooltip anchored to the live element (assets/guide_overlay.js),
# one screenshot per step.


def find_live(step, live):
    """The live element that is the recorded step's target: the same mark with the same text and tag
    (the same reset makes that the rule), else the same text and tag nearest the recorded box, else
    none (the recorded point is used). -> (element | None, how)."""
    action = step["action"]
    rec = metrics.gold_element(step)
    if rec is None:
        return None, "point" if action.get("point") else "none"
    same = lambda e: (e["tag"], e["text"]) == (rec["tag"], rec["text"])  # noqa: E731
    el = next((e for e in live if e["mark"] == rec["mark"]), None)
    if el is not None and same(el):
        return el, "mark"
    cands = [e for e in live if same(e)]
    if cands:
        c = metrics.box_center(rec["bbox"])
        return min(cands, key=lambda e: sum(
            (a - b)**2 for a, b in zip(metrics.box_center(e["bbox"]), c))), "text"
    return None, "point" if action.get("point") else "none"


def load_episode(run, ep_id):
    if not os.path.isdir(run):
        raise SystemExit(f"evaluate --playback: no run folder {run}")
    try:
        episodes = metrics.load_dataset(run)
    except metrics.DatasetError as e:
        metrics.fail(e)
    ep = next((e for e in episodes if e["id"] == ep_id), None)
    if ep is None:
        ids = ", ".join(e["id"] for e in episodes[:12]) + (", ..." if len(episodes) > 12 else "")
        raise SystemExit(f"evaluate --playback: no episode {ep_id!r} in {run} (it has: {ids})")
    if ep["suite"] not in collect.SUITES:
        raise SystemExit(
            f"evaluate --playback: {ep_id} is from suite {ep['suite']!r}, which has no live environment")
    return ep


async def playback(args):
    """Replay one recorded episode with its guides as live tooltips; returns the playback record."""
    from playwright.async_api import async_playwright
    ep = load_episode(args.playback, args.episode)
    out = os.path.join(args.playback, "playback", ep["id"])
    os.makedirs(out, exist_ok=True)
    env = collect.make_env(ep["suite"], **collect.suite_options(args))
    record = {"episode": ep["id"], "steps": [], "diverged": False}
    try:
        if not env.has_task(ep["task"]):
            raise SystemExit(f"evaluate --playback: task {ep['task']!r} is not in this version of the "
                             f"{ep['suite']} suite")
        async with async_playwright() as pw:
            browser = collect.Browser(pw, headless=not args.headed)
            try:
                _, page = await collect.new_page(await browser.get(), env, [])
                await page.mouse.move(-1, -1)
                instruction, fields = await asyncio.wait_for(env.reset(page, ep["task"], ep["seed"]),
                                                             args.action_timeout * 3)
                # another seed database or task template: the steps will not fit
                if instruction != ep["instruction"]:
                    print(f"playback: warning: the instruction differs from the recorded one:\n"
                          f"  now: {instruction}\n  was: {ep['instruction']}")
                    record["diverged"] = True
                await collect.settle(page, args.settle_quiet_ms, args.settle_cap_ms)
                for step in ep["steps"]:
                    record["steps"].append(await play_step(page, env, ep, step, out, args))
                # judged as collect.py judges: the same success as the recording means the replay was faithful
                done, _, success = await env.status(page)
                if not done:
                    _, success = await collect.judge(env, page, ep["task"], fields, ep["steps"],
                                                     args.action_timeout)
                record["success"], record["recorded_success"] = success, ep["success"]
            finally:
                await browser.close()
    finally:
        env.close()
    record["diverged"] |= record["success"] != record["recorded_success"] or \
        any(s["how"] == "none" and s["op"] in metrics.ELEMENT_OPS for s in record["steps"])
    with open(os.path.join(out, "playback.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"playback: {len(record['steps'])} steps of {ep['id']} -> {out}/"
          + (" (diverged from the recording)" if record["diverged"] else ""))
    return record


async def play_step(page, env, ep, step, out, args):
    """Show one step's guide on the live page, screenshot it, then do the recorded action."""
    # also sets __mag.marks
    live, _, _ = await asyncio.wait_for(collect.observe(page, env), args.action_timeout)
    action = dict(step["action"])
    el, how = find_live(step, live) if action["op"] in metrics.ELEMENT_OPS else (None, "none")
    if el is not None:
        action["point"], action["mark"] = metrics.box_center(el["bbox"]), el["mark"]
    targeted = action.get("point") and action["op"] in metrics.ELEMENT_OPS
    css = list(collect.css_point(action["point"], env)) if targeted else None
    n = len(ep["steps"])
    rec = metrics.gold_element(step)
    text = step.get("guide") or f"(no guide recorded) {describe(step['action'], rec)}"
    # under a guide, smaller: the action written with it (marks, or points where the recording has no mark)
    grounding = "som" if step["action"].get("mark") is not None else "coord"
    said = metrics.format_action(step["action"], grounding, ep["viewport"]) if step.get("guide") else None
    label = f"Step {step['step'] + 1} of {n}"
    across = bool(rec and rec.get("row"))   # a target in a table row: the tooltip under or over it
    anchor = await page.evaluate(metrics.read_asset("guide_overlay.js"),
                                 [el["mark"] if el else None, css, text, label, said, across])
    png = os.path.join(out, f"{step['step']}.png")
    await page.screenshot(path=png)
    await asyncio.sleep(args.step_pause)
    await page.evaluate("() => { const g = document.getElementById('__mag_guide'); if (g) g.remove(); }")
    result = {"step": step["step"], "op": action["op"], "how": how, "anchor": anchor,
              "screenshot": os.path.relpath(png, args.playback), "guide": step.get("guide"), "skipped": None}
    if step.get("exec_error") or action["op"] == "stop":   # the recording did not act here either
        result["skipped"] = step.get("exec_error") or "stop"
        return result
    if action["op"] in metrics.ELEMENT_OPS and not action.get("point"):
        result["skipped"] = "no target on the live page"
        return result
    try:
        await asyncio.wait_for(collect.execute(page, action, env), args.action_timeout)
    except collect.ActionError as e:
        result["skipped"] = str(e)
    await collect.settle(page, args.settle_quiet_ms, args.settle_cap_ms)
    return result


# ----------------------------------------------------------------------------------------------

def run_config(args, probe, tasks):
    """run.json: what produced the run's episodes (check_run_config compares it on a rerun)."""
    return {"suite": args.suite, "benchmark": None, "policy": args.policy, "grounding": probe.grounding,
            "order": probe.order,
            "elements": args.elements if args.policy in ("api", "ckpt") else None,
            "ckpt": os.path.abspath(args.ckpt) if args.policy == "ckpt" else None,
            "task_file": os.path.abspath(args.task_file) if args.task_file else None,
            "api_base": args.api_base if args.policy == "api" else None,
            "api_model": args.api_model if args.policy == "api" else None,
            "api_extra": args.api_extra if args.policy == "api" else None,
            # webarena's fuzzy_match
            "judge_api_base": args.judge_api_base, "judge_model": args.judge_model,
            "max_steps": args.max_steps, "action_timeout": args.action_timeout, "tasks": tasks,
            "episodes_per_task": args.episodes, "seed": args.seed, "workers": args.workers,
            "n_boot": args.n_boot,
            "shard": "{}/{}".format(*args.shard) if args.shard else None}


def start_run(args, config, key):
    """The run folder pinned to its settings; an api policy's endpoint checked before any browser starts
    (a missing key, a wrong model or a dead endpoint: one line)."""
    check_run_config(args.out, config)
    if args.policy == "api":
        metrics.preflight("evaluate", args.api_base, args.api_model, key, args.api_key_env,
                          args.api_timeout, args.api_extra)


async def evaluate(args):
    # every worker's API request waits in a thread: the default pool (cpus + 4) would queue them
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(args.workers + 4))
    key = api_key(args) if args.policy == "api" else None
    if args.benchmark:
        return await evaluate_benchmark(args, key)
    env = collect.make_env(args.suite, **collect.suite_options(args))
    try:
        tasks = collect.select_tasks(args.tasks, env, args.policy)
        make = make_policy(args, env, key)
        config = run_config(args, make(tasks[0], args.seed), tasks)   # the grounding and order it really uses
        start_run(args, config, key)
        ids = await run_all(args, make, env, tasks)
    finally:
        env.close()
    return write_results(args, config, ids)


def benchmark_ids(config, shard):
    """The planned episode ids of a benchmark run: the definition's test jobs (one shard's part)."""
    bench = metrics.load_benchmark(config["benchmark"])
    return [metrics.episode_id(*job) for job in metrics.shard(metrics.benchmark_jobs(bench, "test"), shard)]


async def evaluate_benchmark(args, key):
    """--benchmark: the definition's test jobs, suite by suite, with its run protocol, into one run folder;
    results.json adds each suite's metrics (by_suite) to the overall ones."""
    bench = metrics.load_benchmark(args.benchmark)
    # this browser against the definition's, before any episode (in a thread: it asks Playwright's sync API)
    protocol = await asyncio.to_thread(collect.check_protocol, args, bench, "evaluate")
    vars(args).update(bench["protocol"]["run"])   # max_steps, action_timeout and the settle: the benchmark's
    jobs = metrics.shard(metrics.benchmark_jobs(bench, "test"), args.shard)
    config = None
    for suite in bench["suites"]:
        env = collect.make_env(suite)
        try:
            make = make_policy(args, env, key)
            if config is None:
                config = {**run_config(args, make(bench["suites"][suite][0], 0), None),
                          "suite": f"{bench['benchmark']} {bench['version']} (test)" + (
                              "" if protocol["comparable"] else " -- NOT comparable"),
                          "benchmark": bench["path"], "protocol": protocol, "episodes_per_task": None,
                          "seed": None}
                start_run(args, config, key)
                done = collect.done_ids(args.out)
            todo = [(task, seed) for name, task, seed in jobs
                    if name == suite and metrics.episode_id(suite, task, seed) not in done]
            print(f"evaluate: {suite}: {len(todo)} episodes to run, policy={args.policy} -> {args.out}",
                  flush=True)
            await collect.run_episodes(env, todo, make, args.out, workers=args.workers,
                                       policy_name=args.policy, **collect.run_options(args),
                                       headless=not args.headed, progress=not args.no_progress)
        finally:
            env.close()
    return write_results(args, config, [metrics.episode_id(*job) for job in jobs])


def report(args):
    """--report RUN: results.json and report.html of a run folder rendered again from its episodes and
    run.json, e.g. after `metrics.py merge` joined the --shard parts; the planned episodes that are missing
    are named."""
    path = os.path.join(args.report, "run.json")
    if not os.path.exists(path):
        raise SystemExit(f"evaluate: {args.report} is not an evaluation run (no run.json)")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    args.out = args.report
    shard = metrics.shard_spec(config["shard"]) if config.get("shard") else None   # one shard's own folder
    try:   # read-only: a torn line is reported, not set aside (evaluate.py --resume does that)
        if config.get("benchmark"):
            ids = benchmark_ids(config, shard)
            missing = sorted(set(ids) - collect.done_ids(args.out, repair=False))
        else:
            ids, jobs = collect.pending_jobs(args.out, config["suite"], config["tasks"], config["seed"],
                                             config["episodes_per_task"], shard, repair=False)
            missing = [metrics.episode_id(config["suite"], *job) for job in jobs]
    except metrics.DatasetError as e:
        raise SystemExit(f"evaluate: {e}") from None
    if missing:
        print(f"evaluate: {len(missing)} of {len(ids)} planned episodes are not in {args.out} (first: "
              f"{missing[0]}); the report covers the others")
    return write_results(args, config, ids)


def main(argv=None):
    args = parse_args(argv)
    if args.playback:
        return asyncio.run(playback(args))
    try:
        res = report(args) if args.report else asyncio.run(evaluate(args))
    except metrics.DatasetError as e:   # the --out being continued is broken: one line, exit code 2
        metrics.fail(e)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished episode is in {args.out}/episodes.jsonl; "
              "rerun the same command to continue")
        logging.getLogger("asyncio").disabled = True   # Ctrl-C stopped Playwright's driver too: no news
        sys.exit(130)
    failed = res["api_failed"]
    down = f"; {len(failed)} not scored, the endpoint failed" if failed else ""
    print(f"evaluate: {res['episodes']} episodes ({res['errors']} errors{down}), {res['steps']} steps; "
          f"guide metrics {res['guide_metrics']}")
    print_summary(res)
    if not res["config"].get("protocol", {}).get("comparable", True):
        print(f"evaluate: NOT comparable: {'; '.join(res['config']['protocol']['problems'])} "
              "(--other-browser)")
    print(f"evaluate: {args.out}/results.json, {args.out}/report.html")
    if failed:   # the endpoint stayed down: the run is not complete
        names = ", ".join(f["id"] for f in failed[:3]) + (", ..." if len(failed) > 3 else "")
        raise SystemExit(f"evaluate: {len(failed)} episodes not scored, the endpoint failed after its "
                         f"retries ({names}; {failed[0]['error']}): run the same evaluation to redo them")
    return res


if __name__ == "__main__":
    # as in collect.py: a shell starts a background job with SIGINT ignored, so Ctrl-C's handler is set here;
    # SIGTERM (`timeout`, a job scheduler) stops the run as Ctrl-C does, so its app servers stop too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    main()
