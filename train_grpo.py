"""train_grpo.py -- hand-written GRPO with expert-trajectory augmentation for MAG agents.

Each optimizer step takes a few prompts (steps of the training split: screenshot, task, gold
history -- metrics.build_messages, the prompt SFT, replay and evaluation see), samples G replies
per prompt from the current policy, scores every reply with rule rewards from metrics.py, and
pushes the policy towards the replies that beat their group's mean. The expert's reply (the
annotated guide and gold action, in exactly the policy's output format) joins the group as an
off-policy sample; its tokens get an unclipped term whose importance weight is shaped p/(p+gamma)
(LUFFY), which is what lifts a weak SFT policy: a group of all-wrong samples still sees one right
answer, and the right answer's tokens are pushed up hardest where the policy finds them least likely.

Runbook
  # CPU smoke run on what `make demo` trained (a minute):
  python train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --max-steps 10 --group-size 4 --out ckpt/grpo
  # the ablation: no expert in the groups
  python train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --expert off --max-steps 10 --out ckpt/grpo_noexp
  # one GPU (bf16 autocast; FlashAttention-2 for rollouts and training when flash-attn is installed):
  python train_grpo.py --ckpt ckpt/sft --data data/X --prompts-per-step 16 --group-size 8 --lr 1e-6 --out ckpt/grpo
  # eight GPUs (DDP: every rank rolls out its own share of the step's prompts):
  torchrun --standalone --nproc_per_node=8 train_grpo.py --ckpt ckpt/sft --data data/X --prompts-per-step 64 --out ckpt/grpo
  # continue after an interruption (bit-exact on CPU):
  python train_grpo.py ... --out ckpt/grpo --resume

The defaults are the recipe of the MAG paper as far as its summary states it (GRPO, rule rewards
on the action and the guide, expert trajectories in the groups) filled in with the common
choices it builds on: Dr.GRPO's unscaled advantages, DAPO's clip-higher (0.2 / 0.28) and
token-level normalisation, no KL penalty, LUFFY's shaping with gamma = 0.1.

Two modes. offline (default): a prompt is one recorded step, its G samples are single replies
scored against the gold step. live (--env live --suite miniwob|backoffice): a prompt is a (task,
seed) of the training split whose recorded expert episode succeeded; G fresh episodes of it run
in collect.py's environments (browsers in parallel with the sampling), the trajectory reward is
the environment's success (plus --w-live-format for well-formed replies), and its advantage goes
to every step of the trajectory; the recorded expert episode is the group's off-policy member.
  python train_grpo.py --env live --suite miniwob --ckpt ckpt/sft --data data/miniwob --group-size 4 --out ckpt/grpo_live

Speed: the update runs each group's shared prompt once and reuses its KV cache for the G+1
completions (shared_prefix_logprobs; exact, gradients included); the rollout still prefills the
prompt once per sample (HF generate), the next speed-up to make.
Left out on purpose: vLLM rollouts (one process, HF generate with the KV cache); FSDP (a model
that needs sharding needs a rollout engine too); a reference-model server (the KL reference, when
--beta > 0, is a frozen copy on the same device).
"""
import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import time

import torch

import metrics

# ----------------------------------------------------------------------------------------------
# Config

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    # data and prompt (as train_sft.py; defaults come from the checkpoint's sft_config.json)
    p.add_argument("--data", required=True, help="dataset folder")
    p.add_argument("--split", default="train", help="episodes whose 'split' is this; 'all' = every episode")
    p.add_argument("--statuses", default="verified,edited,auto", help="guide statuses usable as the expert's guide")
    p.add_argument("--grounding", default=None, choices=metrics.GROUNDINGS, help="default: the checkpoint's, else som")
    p.add_argument("--order", default=None, choices=metrics.ORDERS, help="default: the checkpoint's, else guide_first")
    p.add_argument("--elements", default=None, choices=["none", "text"], help="default: the checkpoint's, else none")
    # model
    p.add_argument("--ckpt", required=True, help="a Hugging Face folder (usually what train_sft.py wrote)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help="autocast dtype; auto = bf16 on CUDA")
    p.add_argument("--grad-checkpointing", action="store_true")
    # rollouts
    p.add_argument("--prompts-per-step", type=int, default=4, help="prompts per optimizer step (over all ranks)")
    p.add_argument("--group-size", type=int, default=8, help="G: samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--truncated", default="mask", choices=["mask", "zero"],
                   help="a reply cut by --max-new-tokens: mask its tokens out, or keep them with zero advantage")
    # rewards: total = sum of weight * component; each component is logged on its own
    p.add_argument("--w-format", type=float, default=0.1, help="the reply parses, lines in the expected order")
    p.add_argument("--w-op", type=float, default=0.2, help="the operation matches the gold op")
    p.add_argument("--w-element", type=float, default=0.4, help="the mark matches / the point is in the gold box")
    p.add_argument("--w-value", type=float, default=0.1, help="token F1 of the typed/selected/pressed value")
    p.add_argument("--w-guide", type=float, default=0.2, help="the guide's score (ignored for action_only)")
    p.add_argument("--guide-reward", default="rouge", choices=["rouge", "grounding", "offline"],
                   help="ROUGE-L F against the annotated guide | metrics.guide_grounding | log p(gold action | guide) (replay.py)")
    # advantage and loss
    p.add_argument("--std-scale", action="store_true", help="divide advantages by the group's std (off = Dr.GRPO)")
    p.add_argument("--clip-low", type=float, default=0.2)
    p.add_argument("--clip-high", type=float, default=0.28)
    p.add_argument("--updates-per-batch", type=int, default=1, help="mu: optimizer steps on one batch of rollouts")
    p.add_argument("--beta", type=float, default=0.0, help="KL (k3) to the frozen starting model; 0 = none loaded")
    # expert-trajectory augmentation
    p.add_argument("--expert", default="always", choices=["always", "when_wrong", "off"],
                   help="the expert reply joins every group | only groups with no correct sample | never (ablation)")
    p.add_argument("--gamma", type=float, default=0.1, help="LUFFY shaping of the expert's weight: p / (p + gamma)")
    # live mode: whole episodes in collect.py's environments
    p.add_argument("--env", default="offline", choices=["offline", "live"],
                   help="offline: single steps on recorded screenshots | live: multi-turn episodes in the browser")
    p.add_argument("--suite", default="miniwob", choices=["miniwob", "backoffice"], help="live: the environment suite")
    p.add_argument("--episode-steps", type=int, default=10, help="live: step limit per episode")
    p.add_argument("--w-live-format", type=float, default=0.0,
                   help="live: trajectory reward = success + this * the share of steps whose reply parsed (0 = success only)")
    p.add_argument("--action-timeout", type=float, default=10.0, help="live: seconds before an action counts as hung")
    # optimisation
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0 = off)")
    p.add_argument("--seed", type=int, default=0)
    # logging and checkpoints
    p.add_argument("--dump-every", type=int, default=20, help="steps between dumps of a few prompts' completions")
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--wandb", default="", help="wandb project (off unless given)")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


RANK, WORLD = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))
MASTER = RANK == 0


def print0(*a, **k):
    if MASTER:
        print(*a, **k, flush=True)


# ----------------------------------------------------------------------------------------------
# The loss, on plain tensors (tested against a written-out formula).
#
# For every completion token t of the optimizer step (rows: G samples of each prompt, plus the
# expert row), with advantage A of its row:
#   on-policy:  -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A),  r = exp(logp - logp_rollout)
#   expert:     -A * p / (p + gamma),  p = exp(logp)   (no clip: the expert is off-policy by nature)
#   KL (beta):  beta * (exp(ref - logp) - (ref - logp) - 1)   (the k3 estimator, on-policy rows)
# summed and divided by `n_tokens`, the count of every completion token of the optimizer step,
# fixed before gradient accumulation (token-level, DAPO): long and short replies weigh per token.
# With one update per batch r == 1 and the clip never acts; it matters for --updates-per-batch > 1.

def grpo_loss(logp, old_logp, adv, mask, expert, n_tokens, clip_low=0.2, clip_high=0.28, gamma=0.1, beta=0.0, ref_logp=None):
    """logp, old_logp, ref_logp, mask: [rows, T]; adv, expert (bool): [rows]. -> (loss, stats)."""
    # positions outside the mask (padding after the end of turn) may hold -inf log-probs (the pad
    # token is banned from the policy): zeroed before any arithmetic, so 0 * inf never makes a NaN
    m = mask.bool()
    logp, old_logp = torch.where(m, logp, 0.0), torch.where(m, old_logp, 0.0)
    if ref_logp is not None:
        ref_logp = torch.where(m, ref_logp, 0.0)
    a = adv[:, None]
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)
    p = torch.exp(logp)
    off = a * p / (p + gamma)
    per_token = torch.where(expert[:, None], off, surrogate)
    if beta > 0:
        d = ref_logp - logp
        per_token = per_token - beta * torch.where(expert[:, None], torch.zeros_like(d), torch.exp(d) - d - 1)
    loss = -(per_token * mask).sum() / n_tokens
    with torch.no_grad():
        on = mask * (~expert)[:, None]
        clipped = ((ratio < 1 - clip_low) & (a < 0)) | ((ratio > 1 + clip_high) & (a > 0))
        d = old_logp - logp
        stats = {"clip_tokens": float((clipped * on).sum()), "on_tokens": float(on.sum()),
                 "kl_rollout_sum": float(((torch.exp(-d) + d - 1) * on).sum())}  # k3 of the rollout policy vs now
    return loss, stats


# ----------------------------------------------------------------------------------------------
# Rewards: every component from metrics.py, parsed once per reply.

def reward_components(text, step, grounding, order, viewport):
    guide, action = metrics.parse_output(text, grounding, order, viewport)
    gold = step["action"]
    comp = {"format": float(metrics.check_format(text, grounding, order, viewport)),
            "op": float(action is not None and action["op"] == gold["op"]),
            "element": float(metrics.element_correct(action, step, grounding)),
            "value": metrics.token_f1(action.get("value") or "", gold.get("value") or "") if action else 0.0}
    comp["accuracy"] = float(comp["element"] == 1 and metrics.op_f1(action, gold) == 1.0)  # step success, not shaped
    comp["guide"] = 0.0
    comp["_guide_text"] = guide or ""
    return comp


def guide_scores(mode, comps, step):
    """Per reply, the guide component: ROUGE-L against the annotated guide, or grounding."""
    for c in comps:
        if mode == "rouge":
            c["guide"] = metrics.rouge_l(c["_guide_text"], step.get("guide") or "") if c["_guide_text"] else 0.0
        elif mode == "grounding":
            c["guide"] = float(metrics.guide_grounding(c["_guide_text"], step))


def total_reward(c, args, guides):
    return (args.w_format * c["format"] + args.w_op * c["op"] + args.w_element * c["element"]
            + args.w_value * c["value"] + (args.w_guide * c["guide"] if guides else 0.0))


def advantages(rewards, std_scale):
    """Group-relative: reward - the group's mean (the expert, when in, counts in the mean)."""
    r = torch.tensor(rewards, dtype=torch.float32)
    a = r - r.mean()
    return a / (r.std() + 1e-4) if std_scale and len(rewards) > 1 else a


# ----------------------------------------------------------------------------------------------
# The model: loading, prompts, sampling with log-probs, teacher-forced log-probs of a group.

def load_model(path, device, attn_ok=True):
    from safetensors import SafetensorError
    from transformers import AutoModelForImageTextToText, AutoProcessor
    if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "config.json")):
        raise SystemExit(f"--ckpt {path}: not a Hugging Face checkpoint folder (no config.json)")
    attn = "sdpa"
    if device.type == "cuda" and attn_ok:
        try:
            import flash_attn  # noqa: F401
            attn = "flash_attention_2"
        except ImportError:
            pass
    try:
        processor = AutoProcessor.from_pretrained(path)
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32, attn_implementation=attn).to(device)
    except (OSError, ValueError, SafetensorError) as e:  # a truncated weights file, a config without a model type, ...
        raise SystemExit(f"--ckpt {path}: cannot load the checkpoint ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    return model, processor, attn


def prompt(processor, ep, k, opts):
    msgs = metrics.build_messages(ep, k, opts["grounding"], opts["order"], elements=opts["elements"] if opts["elements"] != "none" else None)
    return processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False), msgs[1]["content"][0]["image"]


def stop_ids(model, processor):
    """Every id that ends a reply: the tokenizer's end of turn and the generation config's stops
    (a real Qwen checkpoint also stops on <|endoftext|>, which is its pad token too)."""
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, (list, tuple)) else [ids] if ids is not None else [])
    return torch.tensor(sorted(ids | {processor.tokenizer.eos_token_id}))


def banned_ids(processor, stops):
    """Special tokens a reply never contains (image placeholders, chat markers): sampled, an image
    token without its image breaks the next forward pass. They are removed from the policy itself --
    at sampling and in every log-prob of the loss -- so the two always describe the same policy."""
    keep = set(stops.tolist())
    return torch.tensor(sorted(i for i, t in processor.tokenizer.added_tokens_decoder.items() if t.special and i not in keep))


def policy_logprobs(logits, banned, temperature):
    """log softmax(logits / T) with the banned tokens at -inf: the distribution replies are drawn from."""
    logits = logits.float() / temperature
    logits[..., banned.to(logits.device)] = float("-inf")
    return torch.log_softmax(logits, -1)


def completion_mask(ids, stops):
    """1 up to and including the first stop token; `truncated` rows never produced one."""
    is_stop = torch.isin(ids, stops.to(ids.device))
    seen_before = (is_stop.cumsum(1) - is_stop.int()) > 0
    return (~seen_before).float(), ~is_stop.any(1)


@torch.no_grad()
def sample(model, processor, prompts, images, args, autocast, stops, banned):
    """G samples for each prompt in one left-padded KV-cache generate call.

    -> completion ids [P*G, T] (pad after the end of turn), their log-probs under the sampling
    distribution (logits / temperature) as generate saw them, and the decoded texts.
    """
    enc = processor(text=[p for p in prompts for _ in range(args.group_size)],
                    images=metrics.images_arg(processor, [im for im in images for _ in range(args.group_size)]),
                    return_tensors="pt", padding=True, padding_side="left").to(model.device)
    # a fresh config: a checkpoint's own sampling settings (top_p, repetition penalty, ...) would make
    # the sampling distribution differ from softmax(logits / T), the policy the loss assumes
    from transformers import GenerationConfig
    gen = GenerationConfig(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0, max_new_tokens=args.max_new_tokens,
                           eos_token_id=stops.tolist(), pad_token_id=processor.tokenizer.pad_token_id,
                           suppress_tokens=banned.tolist(), return_dict_in_generate=True, output_logits=True)
    with autocast:
        out = model.generate(**enc, generation_config=gen)
    ids = out.sequences[:, enc["input_ids"].shape[1]:]
    logp = policy_logprobs(torch.stack(out.logits, 1), banned, args.temperature).gather(-1, ids[..., None])[..., 0]
    texts = processor.tokenizer.batch_decode(ids, skip_special_tokens=True)
    return ids, logp, texts


def group_batch(processor, prompt_text, image, completions, stops, device):
    """One prompt repeated per row + each row's completion ids (right-padded): the exact tokens
    that were sampled, never a re-tokenisation of their text. Every per-token tensor the processor
    made for the prompt (Qwen's mm_token_type_ids, ...) is extended over the completion with 0."""
    n, T = completions.shape
    enc = processor(text=[prompt_text] * n, images=metrics.images_arg(processor, [image] * n), return_tensors="pt").to(device)
    L = enc["input_ids"].shape[1]
    mask, _ = completion_mask(completions, stops)
    pad = processor.tokenizer.pad_token_id
    batch = dict(enc)
    for key, v in enc.items():
        if torch.is_tensor(v) and v.shape[:2] == (n, L):
            extra = mask.to(v.dtype) if key == "attention_mask" else torch.zeros(n, T, dtype=v.dtype, device=device)
            batch[key] = torch.cat([v, extra], 1)
    batch["input_ids"] = torch.cat([enc["input_ids"], torch.where(mask.bool(), completions, torch.full_like(completions, pad))], 1)
    return batch, mask


def token_logprobs(model, batch, T, autocast, banned, temperature=1.0):
    """log p(completion token t | prompt, tokens < t) for the last T positions, teacher-forced."""
    with autocast:
        logits = model(**batch, logits_to_keep=T + 1).logits[:, :-1]
    ids = batch["input_ids"][:, -T:]
    return policy_logprobs(logits, banned, temperature).gather(-1, ids[..., None])[..., 0]


def group_inputs(processor, prompt_text, image, completions, stops, device):
    """A group as the update runs it: the prompt encoded once, the completions (the exact sampled
    tokens, pad after the end of turn), their mask and which rows never ended."""
    enc = processor(text=[prompt_text], images=metrics.images_arg(processor, [image]), return_tensors="pt").to(device)
    mask, truncated = completion_mask(completions, stops)
    ids = torch.where(mask.bool(), completions, torch.full_like(completions, processor.tokenizer.pad_token_id))
    return {"prompt": enc, "ids": ids, "text": prompt_text, "image": image}, mask, truncated


def shared_prefix_logprobs(model, raw, inputs, mask, autocast, banned, temperature=1.0):
    """token_logprobs of every row of a group, with the shared prompt run once: its KV cache (with
    its gradients) is repeated for the rows and only the completion tokens run again -- the prompt
    is ~95% of a group's tokens, so this is most of the update's compute saved. Equal to running the
    full rows (tested on every tiny architecture, gradients included).

    `raw` is the unwrapped model (the prompt's pass goes around DDP, whose one forward per backward is
    the completions' pass). Positions of the completion tokens are given: L + t, and for Qwen-VL's
    multimodal rope the offset its prompt pass stored (text after an image continues from there)."""
    ids = inputs["ids"]
    n, T = ids.shape
    L = inputs["prompt"]["input_ids"].shape[1]
    with autocast:
        first = raw(**inputs["prompt"], use_cache=True, logits_to_keep=1)
        cache = first.past_key_values
        cache.batch_repeat_interleave(n)
        pos = torch.arange(L, L + T, device=ids.device)[None].expand(n, T)
        deltas = getattr(getattr(raw, "model", None), "rope_deltas", None)
        if deltas is not None:
            pos = (pos + deltas.to(pos.device)).unsqueeze(0).expand(3, n, T)
        attn = torch.cat([torch.ones(n, L, dtype=torch.long, device=ids.device), mask.long()], 1)
        rest = model(input_ids=ids, attention_mask=attn, cache=cache, position_ids=pos, use_cache=True).logits
    logits = torch.cat([first.logits[:, -1:].expand(n, 1, -1), rest[:, :-1]], 1)
    return policy_logprobs(logits, banned, temperature).gather(-1, ids[..., None])[..., 0]


def group_logprobs(model, raw, g, processor, stops, autocast, banned, args):
    """The shared-prefix pass; with gradient checkpointing (which turns the KV cache off) the full rows."""
    if not args.grad_checkpointing:
        return shared_prefix_logprobs(model, raw, g["inputs"], g["mask"], autocast, banned, args.temperature)
    batch, _ = group_batch(processor, g["inputs"]["text"], g["inputs"]["image"], g["inputs"]["ids"], stops, g["mask"].device)
    return token_logprobs(model, batch, g["T"], autocast, banned, args.temperature)


def expert_ids(processor, ep, k, opts, device):
    """The expert's reply in exactly the policy's format (train_sft.py's target) + end of turn."""
    step = ep["steps"][k]
    text = metrics.format_output(step.get("guide"), step["action"], opts["grounding"], opts["order"], ep["viewport"])
    tok = processor.tokenizer
    return torch.tensor(tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id], device=device), text


def pad_rows(rows, pad_id):
    T = max(len(r) for r in rows)
    out = torch.full((len(rows), T), pad_id, dtype=torch.long, device=rows[0].device)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def make_group(model, processor, ep, k, prompt_text, image, rows, roll_logp, texts, opts, args, stops, autocast, offline_reward=None):
    """Score G samples of one prompt, add the expert's reply when the flag says so, and return the
    group ready for the loss: {inputs, mask, old, adv, expert, T, zero_var}, the reward
    components and the total rewards (expert last)."""
    G, device, step = len(rows), rows.device, ep["steps"][k]
    guides = opts["order"] != "action_only"
    comps = [reward_components(t, step, opts["grounding"], opts["order"], ep["viewport"]) for t in texts]
    rows = list(rows)
    is_expert = [False] * G
    if args.expert == "always" or (args.expert == "when_wrong" and max(c["accuracy"] for c in comps) == 0):
        e_ids, e_text = expert_ids(processor, ep, k, opts, device)
        comps.append(reward_components(e_text, step, opts["grounding"], opts["order"], ep["viewport"]))
        rows.append(e_ids)
        is_expert.append(True)
    if guides and offline_reward is not None:
        gold = metrics.format_action(step["action"], opts["grounding"], ep["viewport"])
        with torch.no_grad(), autocast:
            r = offline_reward(model, processor, [prompt_text] * len(comps), [image] * len(comps), [c["_guide_text"] for c in comps], [gold] * len(comps))
        for c, v in zip(comps, r):
            c["guide"] = v
    elif guides:
        guide_scores(args.guide_reward, comps, step)
    rewards = [total_reward(c, args, guides) for c in comps]
    comp_ids = pad_rows(rows, processor.tokenizer.pad_token_id)
    inputs, mask, truncated = group_inputs(processor, prompt_text, image, comp_ids, stops, device)
    adv = advantages(rewards, args.std_scale).to(device)
    if args.truncated == "mask":
        mask = mask * (~truncated)[:, None]
    else:
        adv = torch.where(truncated, torch.zeros_like(adv), adv)
    old = torch.zeros_like(mask)
    old[:G, :roll_logp.shape[1]] = roll_logp  # the expert row's "old" is unused: its term has no ratio
    group = {"inputs": inputs, "mask": mask, "old": old, "adv": adv, "expert": torch.tensor(is_expert, device=device),
             "T": comp_ids.shape[1],
             # no signal in action accuracy: the group teaches nothing (decided on the unshaped accuracy)
             "zero_var": len({c["accuracy"] for c in comps}) == 1}
    return group, comps, rewards


# ----------------------------------------------------------------------------------------------
# Live mode. A group is one (task, seed) of the training split: G fresh episodes of it, each in its
# own browser context, with the policy sampling every step; the recorded expert episode of that
# task and seed joins as the off-policy member. Trajectory reward: the environment's success
# (optionally plus a share for well-formed replies); its advantage goes to every step's tokens.
# The browsers act while the model samples for other episodes: requests from episodes that are
# waiting at the same time are sampled in one batch.

class Sampler:
    """Collects concurrent prompts and samples one reply for each in a single generate call."""

    def __init__(self, model, processor, args, autocast, stops, banned):
        self.model, self.processor, self.autocast, self.stops, self.banned = model, processor, autocast, stops, banned
        self.args = argparse.Namespace(**{**vars(args), "group_size": 1})
        self.pending, self.lock = [], asyncio.Lock()

    async def ask(self, text, image):
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((text, image, fut))
        await asyncio.sleep(0.02)  # let the episodes that are about to ask join this batch
        async with self.lock:
            batch, self.pending = self.pending, []
            if batch:
                ids, logp, texts = await asyncio.to_thread(sample, self.model, self.processor, [b[0] for b in batch],
                                                           [b[1] for b in batch], self.args, self.autocast, self.stops, self.banned)
                for i, (_, _, f) in enumerate(batch):
                    f.set_result((ids[i], logp[i], texts[i]))
        return await fut


class LivePolicy:
    """collect.py's policy interface over the model in training; keeps what the loss needs per step."""
    executed = False

    def __init__(self, sampler, processor, opts):
        self.sampler, self.processor, self.opts = sampler, processor, opts
        self.grounding, self.order = opts["grounding"], opts["order"]
        self.steps = []  # per step: prompt text, image, sampled ids, their log-probs

    async def act(self, obs):
        import io
        from PIL import Image
        ep, k = obs["episode"], obs["step"]
        image = Image.open(io.BytesIO(obs["png"])).convert("RGB")
        if self.grounding == "som":
            image = metrics.draw_som(image, ep["steps"][k]["elements"])
        msgs = metrics.build_messages(ep, k, self.grounding, self.order, image=image,
                                      elements=self.opts["elements"] if self.opts["elements"] != "none" else None)
        text = self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        ids, logp, reply = await self.sampler.ask(text, image)
        self.steps.append({"prompt": text, "image": image, "ids": ids, "logp": logp, "reply": reply})
        return reply


async def live_episodes(browser, env, pairs, G, sampler, processor, opts, args, out_dir):
    """G episodes of every (task, seed), all at once -> per pair a list of (episode, policy steps)."""
    import collect

    async def rollouts(g):  # the G rollouts share episode ids: each writes its own folder
        policies = {}

        def make(task, seed):  # a fault's retry gets a fresh policy: the last one made played the episode
            policies[task, seed] = LivePolicy(sampler, processor, opts)
            return policies[task, seed]
        eps = await collect.run_episodes(env, pairs, make, os.path.join(out_dir, f"r{g}"), workers=len(pairs),
                                         max_steps=args.episode_steps, action_timeout=args.action_timeout,
                                         policy_name="grpo", browser=browser, progress=False, raise_errors=True)
        by_job = {(ep["task"], ep["seed"]): ep for ep in eps}
        return [(by_job[t, s], policies[t, s].steps) for t, s in pairs]

    per_g = await asyncio.gather(*(rollouts(g) for g in range(G)))
    return [[per_g[g][i] for g in range(G)] for i in range(len(pairs))]


def live_groups(processor, rollouts, experts, opts, args, stops, device):
    """Turn G trajectories (+ the recorded expert episode) into one loss group per trajectory step.
    -> (groups, stats, spare); the groups of one (task, seed) share its trajectory advantages; `spare`
    is a group of a dropped (task, seed), for a DDP rank that has nothing else to run."""
    groups, spare, stats = [], None, {"success": 0.0, "episode_steps": 0.0, "zero_var": 0, "expert_in": 0}
    for trajs, expert in zip(rollouts, experts):
        rewards, members = [], []
        for ep, steps in trajs:
            parsed = [s.get("exec_error") != metrics.UNPARSEABLE for s in ep["steps"]]
            fmt = sum(parsed) / len(parsed) if parsed else 0.0
            rewards.append(float(ep["success"]) + args.w_live_format * fmt)
            members.append([(s["prompt"], s["image"], s["ids"], s["logp"], False) for s in steps])
            stats["success"] += float(ep["success"])
            stats["episode_steps"] += len(ep["steps"])
        success = [float(ep["success"]) for ep, _ in trajs]
        if args.expert != "off" and (args.expert == "always" or max(success) == 0):
            e_steps = []
            for k in range(len(expert["steps"])):
                text, image = prompt(processor, expert, k, opts)
                e_steps.append((text, image, expert_ids(processor, expert, k, opts, device)[0], None, True))
            rewards.append(1.0 + args.w_live_format)  # a recorded expert episode succeeded, every reply well-formed
            members.append(e_steps)
            success.append(1.0)
            stats["expert_in"] += 1
        if len(set(success)) == 1:  # no signal in task success: nothing to learn from this group
            stats["zero_var"] += 1
            if spare is None and expert["steps"]:
                text, image = prompt(processor, expert, 0, opts)
                ids = expert_ids(processor, expert, 0, opts, device)[0][None]
                inputs, mask, _ = group_inputs(processor, text, image, ids, stops, device)
                spare = {"inputs": inputs, "mask": mask, "old": torch.zeros_like(mask), "expert": torch.tensor([True], device=device),
                         "adv": torch.zeros(1, device=device), "T": ids.shape[1]}
            continue
        adv = advantages(rewards, args.std_scale)
        for a, steps in zip(adv.tolist(), members):
            for text, image, ids, logp, is_expert in steps:
                inputs, mask, cut = group_inputs(processor, text, image, ids[None].to(device), stops, device)
                if args.truncated == "mask":
                    mask = mask * (~cut)[:, None]
                old = torch.zeros_like(mask) if logp is None else logp[None, :mask.shape[1]].to(device)
                groups.append({"inputs": inputs, "mask": mask, "old": old, "expert": torch.tensor([is_expert], device=device),
                               "adv": torch.tensor([0.0 if (args.truncated == "zero" and bool(cut)) else a], device=device),
                               "T": ids.shape[0]})
    return groups, stats, spare


def start_live(args, model, processor, autocast, stops, banned):
    """One event loop, Playwright, browser and environment for the whole run (collect.py's)."""
    import collect
    from playwright.async_api import async_playwright
    loop = asyncio.new_event_loop()
    pw = loop.run_until_complete(async_playwright().start())
    env = collect.make_env(args.suite)
    live = argparse.Namespace(loop=loop, pw=pw, env=env, browser=collect.Browser(pw, headless=True),
                              sampler=Sampler(model, processor, args, autocast, stops, banned), run=loop.run_until_complete)

    def close():
        loop.run_until_complete(live.browser.close())
        loop.run_until_complete(pw.stop())
        env.close()
        loop.close()
    live.close = close
    return live


# ----------------------------------------------------------------------------------------------
# Prompts of the training split, in a deterministic endless stream.

def training_steps(episodes, split, statuses, order):
    keep = set(statuses.split(","))
    out = []
    for ep in episodes:
        if split != "all" and ep.get("split", "train") != split:
            continue
        for k, s in enumerate(ep["steps"]):
            if s["action"] is None or s.get("exec_error"):
                continue
            if order != "action_only" and (s.get("guide_status") not in keep or not s.get("guide")):
                continue  # the expert's reply needs an annotated guide
            out.append((ep, k))
    return out


def prompt_stream(items, per_step, seed):
    epoch = 0
    while True:
        order = list(range(len(items)))
        random.Random(f"{seed}:{epoch}").shuffle(order)
        for b in range(0, len(order) - per_step + 1, per_step):
            yield [items[i] for i in order[b:b + per_step]]
        epoch += 1


# ----------------------------------------------------------------------------------------------
# Checkpoints (as train_sft.py: a Hugging Face folder + trainer_state.pt, renamed into place).

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


def save_checkpoint(out, model, processor, optimizer, step, config):
    rng = rng_states()  # every rank takes part
    if not MASTER:
        return
    raw = model.module if hasattr(model, "module") else model
    tmp, old = out.rstrip("/") + ".tmp", out.rstrip("/") + ".old"
    shutil.rmtree(tmp, ignore_errors=True)
    raw.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    torch.save({"optimizer": optimizer.state_dict(), "step": step, "rng": rng, "config": config}, os.path.join(tmp, "trainer_state.pt"))
    with open(os.path.join(tmp, "sft_config.json"), "w") as f:  # the prompt options, for replay/evaluate
        json.dump({k: config[k] for k in ("grounding", "order", "elements")} | {"trained_by": "train_grpo.py"}, f, indent=1)
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(out):
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def load_state(out):
    path = os.path.join(out, "trainer_state.pt")
    if not os.path.exists(path):
        raise SystemExit(f"--resume: {path} does not exist (nothing to resume)")
    try:
        return torch.load(path, weights_only=False)
    except Exception as e:  # noqa: BLE001 -- any unreadable file is the same problem for the user
        raise SystemExit(f"--resume: {path} is unreadable ({type(e).__name__}: {e}); start a new --out or restore a backup") from None


def checkpoint_defaults(path):
    cfg = os.path.join(path, "sft_config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            return json.load(f)
    return {}


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(argv)
    if WORLD > 1:
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(f"cuda:{LOCAL_RANK}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" or (args.dtype == "auto" and device.type == "cuda") else torch.float32
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    random.seed(args.seed + RANK)
    torch.manual_seed(args.seed + RANK)

    state = load_state(args.out) if args.resume else None
    trained = checkpoint_defaults(args.out if state else args.ckpt)
    opts = {"grounding": args.grounding or trained.get("grounding", "som"), "order": args.order or trained.get("order", "guide_first"),
            "elements": args.elements or trained.get("elements", "none")}
    config = vars(args) | opts
    guides = opts["order"] != "action_only"
    episodes = metrics.load_dataset(args.data, check_images=True)
    if args.env == "live":  # a prompt is a (task, seed) with a successful, annotated expert episode
        items = [ep for ep in episodes if ep["suite"] == args.suite and ep["success"]
                 and (args.split == "all" or ep.get("split", "train") == args.split)
                 and len(training_steps([ep], "all", args.statuses, opts["order"])) == len(ep["steps"])]
        what = f"successful {args.suite} episodes with every step annotated"
    else:
        items = training_steps(episodes, args.split, args.statuses, opts["order"])
        what = "usable steps"
    if len(items) < args.prompts_per_step:
        raise SystemExit(f"{args.data}: {len(items)} {what} in split {args.split!r}, fewer than --prompts-per-step {args.prompts_per_step}")

    model, processor, attn = load_model(args.out if state else args.ckpt, device)
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable()
    ref = None
    if args.beta > 0:  # the KL anchor: the starting checkpoint, frozen
        ref = load_model(args.ckpt, device)[0].eval().requires_grad_(False)
    offline_reward = None
    if guides and args.guide_reward == "offline":
        if opts["order"] != "guide_first":
            raise SystemExit("--guide-reward offline conditions the action on a guide written first: it needs --order guide_first")
        import replay  # the offline guide reward is replay.py's (it only imports metrics and torch)

        def offline_reward(model, processor, prompts, images, guides_, golds):
            # log p(gold action | guide); replay's baseline term, log p(gold action | empty guide), is
            # one constant per group (same prompt, same gold action): it cancels in the advantage
            return replay.continuation_logprobs(model, processor, [p + replay.guide_prefix(g) for p, g in zip(prompts, guides_)],
                                                images, [" " + a for a in golds])
    print0(f"model {type(model).__name__} from {args.out if state else args.ckpt}; attention {attn}; autocast {dtype}; "
           f"device {device}; world {WORLD}; {len(items)} training prompts; options {json.dumps(opts)}")
    raw = model
    if WORLD > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL_RANK] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, betas=(0.9, 0.99),
                                  weight_decay=0.0, fused=device.type == "cuda")
    step = 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        restore_rng(state["rng"])
        print0(f"resumed {args.out} at step {step}")

    stream = prompt_stream(items, args.prompts_per_step, args.seed)
    for _ in range(step):
        next(stream)
    log_file = samples_file = None
    if MASTER:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        log_file = open(args.out.rstrip("/") + ".log.jsonl", "a")
        samples_file = open(args.out.rstrip("/") + ".samples.jsonl", "a")
    if args.wandb and MASTER:
        import wandb
        wandb.init(project=args.wandb, config=config)
    bar = None
    if MASTER and not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=args.max_steps, initial=step, desc="grpo", dynamic_ncols=True)
    stops = stop_ids(raw, processor)
    banned = banned_ids(processor, stops)
    live = start_live(args, raw, processor, autocast, stops, banned) if args.env == "live" else None

    while step < args.max_steps:
        t0 = time.perf_counter()
        mine = next(stream)[RANK::WORLD]  # every rank rolls out its own share of the step's prompts

        # 1-2. rollouts from the current policy, rewards, advantages, the expert: loss groups
        model.eval()
        G = args.group_size
        if args.env == "live":
            rollouts = live.run(live_episodes(live.browser, live.env, [(e["task"], e["seed"]) for e in mine], G, live.sampler,
                                              processor, opts, args, f"{args.out.rstrip('/')}.rollouts/step-{step + 1}"))
            t_roll = time.perf_counter() - t0
            groups, part, spare = live_groups(processor, rollouts, mine, opts, args, stops, device)
            if not (args.dump_every and ((step + 1) % args.dump_every == 0 or step == 0)):  # screenshots of dumped steps only
                shutil.rmtree(f"{args.out.rstrip('/')}.rollouts/step-{step + 1}", ignore_errors=True)
            n = max(1, len(mine) * G)
            reply_tokens = sum(int(completion_mask(s["ids"][None], stops)[0].sum()) for trajs in rollouts for _, steps in trajs for s in steps)
            fields = {"reward": part["success"] / n, "success": part["success"] / n, "episode_steps": part["episode_steps"] / n,
                      "zero_var_frac": part["zero_var"] / max(1, len(mine)), "expert_in": part["expert_in"]}
            dump = [{"step": step + 1, "task": e["task"], "seed": e["seed"], "success": [ep["success"] for ep, _ in trajs],
                     "replies": [[st["reply"] for st in steps] for _, steps in trajs]} for e, trajs in zip(mine[:2], rollouts)]
        else:
            prompts, images = map(list, zip(*(prompt(processor, ep, k, opts) for ep, k in mine)))
            ids, roll_logp, texts = sample(raw, processor, prompts, images, args, autocast, stops, banned)
            t_roll = time.perf_counter() - t0
            reply_mask, cut = completion_mask(ids, stops)
            reply_tokens = int(reply_mask.sum())
            groups, spare, zero_var, expert_in = [], None, 0, 0
            sums = {k: 0.0 for k in ("reward", "format", "op", "element", "value", "guide", "accuracy")}
            for i, (ep, k) in enumerate(mine):
                g, comps, rewards = make_group(raw, processor, ep, k, prompts[i], images[i], ids[i * G:(i + 1) * G],
                                               roll_logp[i * G:(i + 1) * G], texts[i * G:(i + 1) * G], opts, args, stops,
                                               autocast, offline_reward)
                for c, r in zip(comps[:G], rewards[:G]):  # logged over the policy's own samples only
                    for key in sums:
                        sums[key] += r if key == "reward" else c[key]
                expert_in += int(g["expert"].any())
                zero_var += int(g["zero_var"])
                if not g["zero_var"]:
                    groups.append(g)
                elif spare is None:
                    spare = g
            n = max(1, len(mine) * G)
            fields = {**{k: v / n for k, v in sums.items()}, "zero_var_frac": zero_var / max(1, len(mine)), "expert_in": expert_in,
                      "truncated": int(cut.sum())}
            dump = [{"step": step + 1, "id": ep["id"], "k": k, "gold": metrics.format_output(ep["steps"][k].get("guide"), ep["steps"][k]["action"],
                     opts["grounding"], opts["order"], ep["viewport"]), "samples": texts[i * G:(i + 1) * G]} for i, (ep, k) in enumerate(mine[:2])]

        # 3. the update: token-level loss over every completion token of the step (all ranks)
        n_tokens = torch.tensor(sum(float(g["mask"].sum()) for g in groups), device=device)
        if WORLD > 1:
            torch.distributed.all_reduce(n_tokens)
            if not groups and spare is not None:  # DDP needs a forward and backward on every rank: a spare
                groups = [{**spare, "weight": 0.0}]  # group runs with its loss times zero
        if args.beta > 0:
            with torch.no_grad():
                for g in groups:
                    g["ref"] = group_logprobs(ref, ref, g, processor, stops, autocast, banned, args)
        lr = args.lr * min(1.0, (step + 1) / args.warmup) if args.warmup else args.lr
        for pg in optimizer.param_groups:
            pg["lr"] = lr
        model.train()
        t1 = time.perf_counter()
        stats = {"loss": 0.0, "clip_tokens": 0.0, "on_tokens": 0.0, "kl_rollout_sum": 0.0}
        train_tokens = 0
        norm = torch.tensor(0.0)
        for update in range(args.updates_per_batch):
            for j, g in enumerate(groups):
                sync = WORLD == 1 or j == len(groups) - 1
                with contextlib.nullcontext() if sync else model.no_sync():
                    logp = group_logprobs(model, raw, g, processor, stops, autocast, banned, args)
                    loss, s = grpo_loss(logp, g["old"], g["adv"], g["mask"], g["expert"], n_tokens.clamp(min=1) / WORLD,
                                        args.clip_low, args.clip_high, args.gamma, args.beta, g.get("ref"))
                    (loss * g.get("weight", 1.0)).backward()
                train_tokens += g["inputs"]["prompt"]["input_ids"].shape[1] + int(g["mask"].sum())  # tokens run
                if update == args.updates_per_batch - 1 and g.get("weight", 1.0):
                    stats["loss"] += loss.item()
                    for key in ("clip_tokens", "on_tokens", "kl_rollout_sum"):
                        stats[key] += s[key]
            if args.clip > 0:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if WORLD > 1:  # each rank holds its share of the step's loss; the log shows the whole
            total = torch.tensor(stats["loss"], device=device)
            torch.distributed.all_reduce(total)
            stats["loss"] = total.item()
        step += 1
        dt = time.perf_counter() - t0
        t_train = time.perf_counter() - t1

        # 4. one log line; replies to a few prompts now and then
        record = {"step": step, **fields, "loss": stats["loss"],
                  "kl_rollout": stats["kl_rollout_sum"] / max(1.0, stats["on_tokens"]),
                  "clip_frac": stats["clip_tokens"] / max(1.0, stats["on_tokens"]), "reply_len": reply_tokens / n,
                  "rollout_tok_s": reply_tokens / max(t_roll, 1e-9),
                  "train_tok_s": train_tokens / max(t_train, 1e-9), "grad_norm": float(norm), "lr": lr, "dt": dt}
        if MASTER:
            if args.env == "live":
                what = f"success {record['success']:.3f} | steps/episode {record['episode_steps']:.1f}"
            else:
                what = (f"reward {record['reward']:.3f} (fmt {record['format']:.2f} op {record['op']:.2f} el {record['element']:.2f} "
                        f"val {record['value']:.2f} guide {record['guide']:.2f}) | acc {record['accuracy']:.2f}")
            line = (f"step {step}/{args.max_steps} | {what} | zero-var {record['zero_var_frac']:.2f} | expert {record['expert_in']} | "
                    f"kl {record['kl_rollout']:.4f} | clip {record['clip_frac']:.3f} | len {record['reply_len']:.1f} | "
                    f"roll {record['rollout_tok_s']:.0f} tok/s | train {record['train_tok_s']:.0f} tok/s | {dt * 1000:.0f} ms")
            (bar.write if bar else print)(line)
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()
            if args.dump_every and (step % args.dump_every == 0 or step == 1):
                for row in dump:
                    samples_file.write(json.dumps(row) + "\n")
                samples_file.flush()
            if args.wandb:
                wandb.log(record, step=step)
            if bar:
                bar.update(1)
        if step % args.save_every == 0 or step == args.max_steps:
            save_checkpoint(args.out, model, processor, optimizer, step, config)
    if bar:
        bar.close()
    if live:
        live.close()
    print0(f"saved {args.out}")
    if WORLD > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
