r"""train_grpo.py -- hand-written GRPO with expert-trajectory augmentation for MAG agents.

Each optimizer step takes a few prompts (steps of the training split: screenshot, task, gold
history -- metrics.build_messages, the prompt SFT, replay and evaluation see), samples G replies
per prompt from the current policy, scores every reply with rule rewards from metrics.py, and
pushes the policy towards the replies that beat their group's mean. The expert's reply (the
annotated guide and gold action, in exactly the policy's output format) joins the group as an
off-policy sample, which is what lifts a weak SFT policy: a group of all-wrong samples still sees one right
answer. Its tokens get an unclipped term A f(p), f(p) = p/(p+gamma) (LUFFY's shaped importance weight), whose
gradient is A gamma p/(p+gamma)^2 grad log p: that weight peaks at p = gamma and vanishes for very unlikely
tokens (0.25 at p = 0.1, 0.0098 at p = 1e-3, gamma = 0.1); against the unshaped term A p (gradient A p grad
log p) it is gamma/(p+gamma)^2 times as large, which grows as p falls: unlikely tokens are up-weighted
relative to the unshaped term, not pushed up hardest.

Runbook
  # CPU smoke run on what `make demo` trained (a minute):
  python train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --max-steps 10 --group-size 4 --out ckpt/grpo
  # the ablation: no expert in the groups
  python train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --expert off --max-steps 10 \
      --out ckpt/grpo_noexp
  # one GPU (bf16 autocast; FlashAttention-2 for rollouts and training when flash-attn is installed):
  python train_grpo.py --ckpt ckpt/sft --data data/X --prompts-per-step 16 --group-size 8 --lr 1e-6 \
      --out ckpt/grpo
  # eight GPUs (DDP: every rank rolls out its own share of the step's prompts):
  torchrun --standalone --nproc_per_node=8 train_grpo.py --ckpt ckpt/sft --data data/X --prompts-per-step 64 \
      --out ckpt/grpo
  # continue after an interruption (bit-exact on CPU):
  python train_grpo.py ... --out ckpt/grpo --resume

The defaults are the MAG paper's recipe as far as its summary states it (GRPO, rule rewards on the
action and the guide, expert trajectories in the groups) with the common choices it builds on: Dr.GRPO's
unscaled advantages, DAPO's clip-higher (0.2 / 0.28), token-level loss and rule for dropping groups
(--drop-groups accuracy: a group whose members all have the same action accuracy is skipped even when their
shaped rewards differ; `reward` skips only one whose shaped rewards are all equal), no KL, LUFFY's gamma 0.1.

Two modes. offline (default): a prompt is one recorded step, its G samples single replies scored against
the gold step. live (--env live --suite miniwob|backoffice|helpdesk): a prompt is a (task, seed) of the
training split whose recorded expert episode succeeded; G fresh episodes of it run in collect.py's
environments, the trajectory reward is the environment's success (+ --w-live-format for well-formed
replies) and its advantage goes to every step; the recorded expert episode is the off-policy member.
  python train_grpo.py --env live --suite miniwob --ckpt ckpt/sft --data data/miniwob --group-size 4 \
      --out ckpt/grpo_live

Left out on purpose: vLLM rollouts (a prompt's KV cache is repeated for its G samples instead); FSDP
(a model that needs sharding needs a rollout engine too); a KL reference server (--beta: a frozen copy).
"""
import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import shutil
import time

import torch
import torch.utils.checkpoint

import metrics

# ==============================================================================================
# Config

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # data and prompt (as train_sft.py; defaults come from the checkpoint's train_config.json)
    p.add_argument("--data", required=True, help="dataset folder")
    p.add_argument("--split", default="train", help="episodes whose 'split' is this; 'all' = every episode")
    p.add_argument("--statuses", default="verified,edited,auto", help="statuses an expert guide may have")
    p.add_argument("--grounding", default=None, choices=metrics.GROUNDINGS,
                   help="default: the checkpoint's, else som")
    p.add_argument("--order", default=None, choices=metrics.ORDERS,
                   help="default: the checkpoint's, else guide_first")
    p.add_argument("--elements", default=None, choices=["none", "text"],
                   help="default: the checkpoint's, else none")
    # model
    p.add_argument("--ckpt", required=True, help="a Hugging Face folder (usually what train_sft.py wrote)")
    p.add_argument("--device", default="", help="default: cuda:LOCAL_RANK when CUDA is available, else cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto = bf16 on CUDA")
    p.add_argument("--grad-checkpointing", action="store_true", help="recompute activations: less memory")
    # rollouts
    p.add_argument("--prompts-per-step", type=int, default=4, help="prompts per optimizer step, all ranks")
    p.add_argument("--group-size", type=int, default=8, help="G: samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--truncated", default="mask", choices=["mask", "zero"],
                   help="a reply cut by --max-new-tokens: mask its tokens, or keep them at zero advantage")
    # rewards: total = sum of weight * component; each component is logged on its own
    p.add_argument("--w-format", type=float, default=0.1, help="the reply parses, its lines in order")
    p.add_argument("--w-op", type=float, default=0.2, help="the operation matches the gold op")
    p.add_argument("--w-element", type=float, default=0.4, help="right mark, or the point in the gold box")
    p.add_argument("--w-value", type=float, default=0.1, help="token F1 of the typed/selected/pressed value")
    p.add_argument("--w-guide", type=float, default=0.2, help="the guide's score (ignored for action_only)")
    p.add_argument("--guide-reward", default="rouge", choices=["rouge", "grounding", "offline"],
                   help="ROUGE-L to the gold guide | metrics.guide_grounding | log p(gold action | guide)")
    # advantage and loss
    p.add_argument("--std-scale", action="store_true", help="advantages / the group's std (off: Dr.GRPO)")
    p.add_argument("--clip-low", type=float, default=0.2)
    p.add_argument("--clip-high", type=float, default=0.28)
    p.add_argument("--updates-per-batch", type=int, default=1, help="mu: optimizer steps per rollout batch")
    p.add_argument("--beta", type=float, default=0.0, help="k3 KL to the frozen starting model (0: none)")
    # expert-trajectory augmentation
    p.add_argument("--expert", default="always", choices=["always", "when_wrong", "off"],
                   help="the expert joins every group | only groups with no right sample | never (ablation)")
    p.add_argument("--gamma", type=float, default=0.1,
                   help="LUFFY shaping of the expert's weight: f(p) = p / (p + gamma)")
    p.add_argument("--expert-baseline", default="group", choices=["group", "policy"],
                   help="baseline: the group's mean, the expert in it (LUFFY) | the policy's samples' mean")
    p.add_argument("--drop-groups", default="accuracy", choices=["accuracy", "reward"],
                   help="drop a group whose members all have the same action accuracy (DAPO) | shaped reward")
    # live mode: whole episodes in collect.py's environments
    p.add_argument("--env", default="offline", choices=["offline", "live"],
                   help="offline: single steps on recorded screenshots | live: whole episodes in the browser")
    p.add_argument("--suite", default="miniwob", choices=["miniwob", "backoffice", "helpdesk"],
                   help="live: the environment suite")
    p.add_argument("--episode-steps", type=int, default=10, help="live: step limit per episode")
    p.add_argument("--w-live-format", type=float, default=0.0,
                   help="live: trajectory reward = success + this * the share of replies that parse")
    p.add_argument("--action-timeout", type=float, default=10.0, help="live: seconds until an action hangs")
    # optimisation
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0 = off)")
    p.add_argument("--seed", type=int, default=0)
    # logging and checkpoints
    p.add_argument("--dump-every", type=int, default=20, help="steps between dumps of a few prompts' replies")
    p.add_argument("--save-every", type=int, default=50, help="and at the end; 0: never (benchmarks)")
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--wandb", default="", help="wandb project (off unless given)")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


RANK = int(os.environ.get("RANK", 0))
WORLD = int(os.environ.get("WORLD_SIZE", 1))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))
MASTER = RANK == 0


def print0(*a, **k):
    if MASTER:
        print(*a, **k, flush=True)


def check_files(args):
    """A flag's files besides metrics.py, checked before anything loads (not in the first rollout)."""
    import importlib.util
    wanted = {"replay.py": args.guide_reward == "offline", "collect.py": args.env == "live",
              "envs/": args.env == "live"}
    for file, needed in wanted.items():
        if needed and not importlib.util.find_spec(file.rstrip("/").removesuffix(".py")):
            flag = "--guide-reward offline" if file == "replay.py" else "--env live"
            raise SystemExit(f"{flag} needs {file} beside train_grpo.py: copy it from the MAG repository")


def pick_device(name):
    """--device: '' = cuda:LOCAL_RANK when CUDA is available, else cpu; 'cpu' forces the CPU (CPU ranks
    on a GPU)."""
    name = name or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.split(":")[0] not in ("cpu", "cuda") or name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: not cpu, cuda or cuda:N, or no CUDA on this machine")
    return torch.device(f"cuda:{LOCAL_RANK}" if name == "cuda" else name)


# ==============================================================================================
# The method as one optimizer step runs it: 1. the rollout (offline_rollouts; live mode's at the end of the
# file); per prompt (make_group) 2. the rewards, 3. the expert joining the group, 4. the advantages; 5. the
# loss (grpo_loss); 6. the update (update). main's loop calls 1 and 6.

@dataclasses.dataclass
class Rollouts:
    """One optimizer step's rollouts on this rank, as both modes yield them."""
    groups: list          # loss groups the update runs (those --drop-groups drops are left out)
    filler: dict | None   # a dropped group, for a DDP rank left with none: it runs with its loss times zero
    fields: dict          # the mode's per-step log fields (reward components, or success and episode length)
    summary: str          # the mode's part of the log line
    dump: list            # rows for <out>.samples.jsonl, written on --dump-every steps
    reply_tokens: int     # tokens sampled: the reply length and the rollout tok/s
    replies: int          # replies (offline) or episodes (live) sampled: prompts x G
    seconds: float        # the rollouts' time


def offline_rollouts(policy, prompt_batches, step):
    """1. The rollout (offline mode), one optimizer step after another: G replies to each of this rank's
    recorded steps, sampled in one batch; each prompt's group made by make_group."""
    G = policy.args.group_size
    while True:
        step += 1
        t0 = time.perf_counter()
        my_prompts = next(prompt_batches)[RANK::WORLD]  # every rank rolls out its own share of the prompts
        prompts, images = map(list, zip(*(metrics.chat_prompt(policy.processor, ep, k, policy.opts)
                                           for ep, k in my_prompts)))
        ids, rollout_logp, texts = sample(policy, prompts, images, G)
        seconds = time.perf_counter() - t0
        reply_mask, truncated = completion_mask(ids, policy.stops)
        groups, filler = [], None
        expert_in = 0
        drops = {"zero_var": 0, "same_accuracy": 0, "same_reward": 0}
        sums = {key: 0.0 for key in ("reward", "format", "op", "element", "value", "guide", "accuracy")}
        for i, (ep, k) in enumerate(my_prompts):
            rows = slice(i * G, (i + 1) * G)  # prompt i's samples
            group, components, rewards = make_group(policy, ep, k, prompts[i], images[i], ids[rows],
                                                    rollout_logp[rows], texts[rows])
            for c, r in zip(components[:G], rewards[:G]):  # logged over the policy's own samples only
                for key in sums:
                    sums[key] += r if key == "reward" else c[key]
            expert_in += int(group["expert"].any())
            drops = {key: count + group[key] for key, count in drops.items()}
            if not group["zero_var"]:
                groups.append(group)
            elif filler is None:
                filler = group
        n = max(1, len(my_prompts) * G)
        fields = {**{key: total / n for key, total in sums.items()}, "expert_in": expert_in,
                  "truncated": int(truncated.sum()),
                  **{f"{key}_frac": count / max(1, len(my_prompts)) for key, count in drops.items()}}
        summary = (f"reward {fields['reward']:.3f} (fmt {fields['format']:.2f} op {fields['op']:.2f} "
                   f"el {fields['element']:.2f} val {fields['value']:.2f} guide {fields['guide']:.2f}) | "
                   f"acc {fields['accuracy']:.2f}")
        dump = [{"step": step, "id": ep["id"], "k": k, "gold": expert_ids(policy, ep, k)[1],
                 "samples": texts[i * G:(i + 1) * G]} for i, (ep, k) in enumerate(my_prompts[:2])]
        yield Rollouts(groups, filler, fields, summary, dump, int(reply_mask.sum()), n, seconds)


def make_group(policy, ep, k, prompt_text, image, sample_ids, rollout_logp, texts):
    """2-4 for one prompt: the samples' rewards, the expert joining, the advantages. -> the group for the
    loss {inputs, mask, rollout_logp, adv, expert: its rows, zero_var: dropped, ...}, components, rewards."""
    args = policy.args
    gold_step = ep["steps"][k]
    G = len(sample_ids)
    # 2. the rewards: every component from metrics.py, against the gold step (read in the prompt's options)
    scoring = (gold_step, policy.opts["grounding"], policy.opts["order"], ep["viewport"])
    components = [reward_components(text, *scoring) for text in texts]
    # 3. the expert's reply joins the group: always, or when no sample is right (--expert)
    rows, is_expert = list(sample_ids), [False] * G
    none_right = max(c["accuracy"] for c in components) == 0
    if args.expert == "always" or (args.expert == "when_wrong" and none_right):
        expert_row, expert_text = expert_ids(policy, ep, k)
        components.append(reward_components(expert_text, *scoring))
        rows.append(expert_row)
        is_expert.append(True)
    # the guide's score (the expert's guide too) and each reply's total reward
    if policy.guides and args.guide_reward == "offline":
        offline_guide_scores(policy, prompt_text, image, components, ep, k)
    elif policy.guides:
        guide_scores(args.guide_reward, components, gold_step)
    rewards = [total_reward(c, args, policy.guides) for c in components]
    # 4. the advantages: reward - the mean of the group (with the expert) or of the policy's samples
    baseline_n = G if args.expert_baseline == "policy" else None  # None: the whole group, the expert too
    adv = advantages(rewards, args.std_scale, baseline_n).to(policy.device)
    completions = torch.nn.utils.rnn.pad_sequence(rows, True, policy.processor.tokenizer.pad_token_id)
    inputs, mask, truncated = group_inputs(policy, prompt_text, image, completions)
    if args.truncated == "mask":
        mask = mask * (~truncated)[:, None]
    else:
        adv = torch.where(truncated, torch.zeros_like(adv), adv)
    T = rollout_logp.shape[1]
    sampled_logp = torch.zeros_like(mask)  # the expert row's stays 0, unused: its term has no ratio
    sampled_logp[:G, :T] = rollout_logp
    mask[:G, T:] = 0  # a sample that never stopped ends where its rollout did, not at the expert's
    group = {"inputs": inputs, "mask": mask, "rollout_logp": sampled_logp, "adv": adv,
             "expert": torch.tensor(is_expert, device=policy.device),
             **drop_group([c["accuracy"] for c in components], rewards, args.drop_groups)}
    return group, components, rewards


def reward_components(text, gold_step, grounding, order, viewport):
    """2. One reply's reward components; `accuracy` (step success, unshaped) is logged, not rewarded."""
    tabs = "tabs" in gold_step   # a step of a suite with several tabs: their actions are in its grammar
    guide, action = metrics.parse_output(text, grounding, order, viewport, tabs)
    gold = gold_step["action"]
    comp = {"format": float(metrics.check_format(text, grounding, order, viewport, tabs)),
            "op": float(action is not None and action["op"] == gold["op"]),
            "element": float(metrics.element_correct(action, gold_step, grounding)),
            "value": metrics.token_f1(action.get("value") or "", gold.get("value") or "") if action else 0.0}
    comp["accuracy"] = float(comp["element"] == 1 and metrics.op_f1(action, gold) == 1.0)
    comp |= {"guide": 0.0, "_guide_text": guide or ""}
    return comp


def guide_scores(mode, components, gold_step):
    """Per reply, the guide component: ROUGE-L against the annotated guide, or metrics.guide_grounding."""
    for c in components:
        guide = c["_guide_text"]
        if mode == "rouge":
            c["guide"] = metrics.rouge_l(guide, gold_step.get("guide") or "") if guide else 0.0
        elif mode == "grounding":
            c["guide"] = float(metrics.guide_grounding(guide, gold_step))


def offline_guide_scores(policy, prompt_text, image, components, ep, k):
    """--guide-reward offline: replay.py's guide reward, log p(gold action | the reply's guide); its baseline
    term, log p(gold action | empty guide), is one constant per group and cancels in the advantage."""
    # the one stage imported here besides metrics (README, Layout); it imports only metrics and torch
    import replay
    gold = metrics.format_action(ep["steps"][k]["action"], policy.opts["grounding"], ep["viewport"])
    n = len(components)
    with torch.no_grad(), policy.autocast:
        scores = replay.action_logprobs(policy.raw, policy.processor, [prompt_text] * n, [image] * n,
                                        [c["_guide_text"] for c in components], [gold] * n)
    for c, score in zip(components, scores):
        c["guide"] = score


def total_reward(c, args, guides):
    return (args.w_format * c["format"] + args.w_op * c["op"] + args.w_element * c["element"]
            + args.w_value * c["value"] + (args.w_guide * c["guide"] if guides else 0.0))


def expert_ids(policy, ep, k):
    """3. The expert's reply in exactly the policy's format (train_sft.py's target) + end of turn."""
    gold_step = ep["steps"][k]
    tokenizer = policy.processor.tokenizer
    text = metrics.format_output(gold_step.get("guide"), gold_step["action"], policy.opts["grounding"],
                                 policy.opts["order"], ep["viewport"])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, device=policy.device), text


def advantages(rewards, std_scale, baseline_n=None):
    """4. Group-relative: reward - the mean of the first `baseline_n` rewards: the policy's own samples
    (--expert-baseline policy), or (None) the whole group, the expert's reward too (LUFFY)."""
    r = torch.tensor(rewards, dtype=torch.float32)
    a = r - r[:baseline_n].mean()
    return a / (r.std() + 1e-4) if std_scale and len(rewards) > 1 else a


def drop_group(accuracies, rewards, rule):
    """--drop-groups (the docstring's rule; live, the accuracy is task success): e.g. rewards [0.057, 0, 0, 0]
    are dropped by `accuracy`, kept by `reward`. -> {zero_var: dropped, same_accuracy, same_reward}: 0|1."""
    same = {"same_accuracy": len(set(accuracies)) == 1,
            "same_reward": max(rewards) - min(rewards) <= 1e-6}  # equal up to float noise
    return {"zero_var": int(same[f"same_{rule}"])} | {k: int(v) for k, v in same.items()}


# ----------------------------------------------------------------------------------------------
# 5. The loss, on plain tensors (tested against a written-out formula).
#
# For every completion token t of the optimizer step (rows: G samples of each prompt, plus the
# expert row), with advantage A of its row:
#   on-policy:  -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A),  r = exp(logp - logp_rollout)
#   expert:     -A * p / (p + gamma),  p = exp(logp)   (no clip: the expert is off-policy by nature);
#               d/dlogp = -A * gamma * p / (p + gamma)^2: see the docstring for what that weight does
#   KL (beta):  beta * (exp(ref - logp) - (ref - logp) - 1)   (the k3 estimator, on-policy rows)
# summed and divided by `n_tokens`, the count of every completion token of the optimizer step,
# fixed before gradient accumulation (token-level, DAPO): long and short replies weigh per token.
# With one update per batch r == 1 and the clip never acts; it matters for --updates-per-batch > 1.

def grpo_loss(logp, rollout_logp, adv, mask, is_expert, n_tokens, clip_low=0.2, clip_high=0.28, gamma=0.1,
              beta=0.0, ref_logp=None):
    """logp, rollout_logp, ref_logp, mask: [rows, T]; adv, is_expert (bool): [rows]. -> (loss, stats)."""
    # positions outside the mask (padding after the end of turn) may hold -inf log-probs (the pad
    # token is banned from the policy): zeroed before any arithmetic, so 0 * inf never makes a NaN
    m = mask.bool()
    logp, rollout_logp = torch.where(m, logp, 0.0), torch.where(m, rollout_logp, 0.0)
    if ref_logp is not None:
        ref_logp = torch.where(m, ref_logp, 0.0)
    a = adv[:, None]
    ratio = torch.exp(logp - rollout_logp)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)
    p = torch.exp(logp)
    off = a * p / (p + gamma)
    per_token = torch.where(is_expert[:, None], off, surrogate)
    if beta > 0:
        d = ref_logp - logp
        kl = torch.where(is_expert[:, None], torch.zeros_like(d), torch.exp(d) - d - 1)
        per_token = per_token - beta * kl
    loss = -(per_token * mask).sum() / n_tokens
    with torch.no_grad():
        on = mask * (~is_expert)[:, None]
        clipped = ((ratio < 1 - clip_low) & (a < 0)) | ((ratio > 1 + clip_high) & (a > 0))
        d = rollout_logp - logp
        stats = {"clip_tokens": float((clipped * on).sum()), "on_tokens": float(on.sum()),
                 # k3 of the rollout policy vs now
                 "kl_rollout_sum": float(((torch.exp(-d) + d - 1) * on).sum())}
    return loss, stats


def update(policy, optimizer, rollout, reference, lr):
    """6. The update: every group's loss (one backward a group, DDP syncing on the last), then the optimizer
    step, --updates-per-batch times on the same rollouts. -> the log's stats, summed over the groups."""
    args = policy.args
    groups = rollout.groups
    n_tokens = torch.tensor(sum(float(g["mask"].sum()) for g in groups), device=policy.device)
    if WORLD > 1:
        torch.distributed.all_reduce(n_tokens)  # token-level over the step: every rank's tokens count
        if not groups and rollout.filler is not None:  # DDP needs a forward and backward on every rank
            groups = [{**rollout.filler, "weight": 0.0}]
    if reference is not None:
        with torch.no_grad():
            for g in groups:
                g["ref_logp"] = shared_prefix_logprobs(reference, g["inputs"], g["mask"])
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    policy.model.train()
    stats = {"loss": 0.0, "clip_tokens": 0.0, "on_tokens": 0.0, "kl_rollout_sum": 0.0}
    train_tokens, norm = 0, torch.tensor(0.0)
    for update_index in range(args.updates_per_batch):
        for j, g in enumerate(groups):
            sync = WORLD == 1 or j == len(groups) - 1
            with contextlib.nullcontext() if sync else policy.model.no_sync():
                logp = shared_prefix_logprobs(policy, g["inputs"], g["mask"])
                # / WORLD: DDP averages the ranks' gradients: a mean over every token of the step
                loss, loss_stats = grpo_loss(logp, g["rollout_logp"], g["adv"], g["mask"], g["expert"],
                                             n_tokens.clamp(min=1) / WORLD, args.clip_low, args.clip_high,
                                             args.gamma, args.beta, g.get("ref_logp"))
                (loss * g.get("weight", 1.0)).backward()
            train_tokens += g["inputs"]["prompt"]["input_ids"].shape[1] + int(g["mask"].sum())  # tokens run
            if update_index == args.updates_per_batch - 1 and g.get("weight", 1.0):
                stats = {k: v + (loss.item() if k == "loss" else loss_stats[k]) for k, v in stats.items()}
        if args.clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(policy.model.parameters(), args.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if WORLD > 1:  # each rank holds its share of the step's loss; the log shows the whole
        total = torch.tensor(stats["loss"], device=policy.device)
        torch.distributed.all_reduce(total)
        stats["loss"] = total.item()
    return stats | {"train_tokens": train_tokens, "grad_norm": float(norm)}


def main(argv=None):
    args = parse_args(argv)
    check_files(args)
    device = pick_device(args.device)
    if WORLD > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" or (args.dtype == "auto" and cuda) else torch.float32
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    random.seed(args.seed + RANK)
    torch.manual_seed(args.seed + RANK)

    if args.resume and WORLD > 1:  # a save cut short is undone by rank 0 alone, before any rank reads it
        if MASTER:
            metrics.recover_dir(args.out)
        torch.distributed.barrier()
    metrics.refuse_overwrite(args.out, args.resume)
    state = load_state(args.out) if args.resume else None
    start = args.out if state else args.ckpt
    opts = metrics.prompt_options(args.grounding, args.order, args.elements, metrics.trained_options(start))
    if args.guide_reward == "offline" and opts["order"] == "action_first":
        raise SystemExit(
            "--guide-reward offline scores the action after a written guide: needs --order guide_first")
    config = vars(args) | opts
    items, what = training_prompts(metrics.load_dataset_or_exit(args.data, check_images=True), args, opts)
    if len(items) < args.prompts_per_step:
        raise SystemExit(f"{args.data}: {len(items)} {what} in split {args.split!r}, "
                         f"fewer than --prompts-per-step {args.prompts_per_step}")

    raw, processor, attn = load_model(start, device, dtype=torch.float32)  # raw: not wrapped by DDP
    if args.grad_checkpointing:
        enable_checkpointing(raw)
    print0(f"model {type(raw).__name__} from {start}; attention {attn}; autocast {dtype}; device {device}; "
           f"world {WORLD}; {len(items)} training prompts; options {json.dumps(opts)}")
    model = raw if WORLD == 1 else torch.nn.parallel.DistributedDataParallel(
        raw, device_ids=[LOCAL_RANK] if cuda else None)
    # beta2 0.99, not 0.999: squared gradients averaged over ~100 steps, not ~1,000 (more than a whole run)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                                  betas=(0.9, 0.99), weight_decay=0.0, fused=cuda)
    step = state["step"] if state else 0  # optimizer steps done
    if state is not None:
        metrics.check_optimizer_state(state["optimizer"], optimizer, f"{args.out}/trainer_state.pt")
        optimizer.load_state_dict(state["optimizer"])
        restore_rng(state["rng"])
        print0(f"resumed {args.out} at step {step}")
    stops = stop_ids(raw, processor)
    policy = Policy(model, raw, processor, stops, banned_ids(processor, stops), autocast, opts, args)
    reference = None  # the KL anchor (--beta > 0): the starting model, frozen
    if args.beta > 0:
        frozen = load_model(args.ckpt, device, dtype=torch.float32)[0].requires_grad_(False)
        reference = dataclasses.replace(policy, model=frozen, raw=frozen)

    stream = prompt_stream(items, args.prompts_per_step, args.seed)
    for _ in range(step):  # a resumed run continues the stream where it stopped
        next(stream)
    rollouts = (live_rollouts if args.env == "live" else offline_rollouts)(policy, stream, step)
    log_file = samples_file = bar = None
    if MASTER:   # beside the checkpoint folder; a resumed run drops the records after its last save
        log_file = metrics.open_log(args.out.rstrip("/") + ".log.jsonl", step)
        samples_file = metrics.open_log(args.out.rstrip("/") + ".samples.jsonl", step)
    if args.wandb and MASTER:
        import wandb
        wandb.init(project=args.wandb, config=config)
    if MASTER and not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=args.max_steps, initial=step, desc="grpo", dynamic_ncols=True)

    with contextlib.closing(rollouts):  # live mode's browser and environment close with it
        while step < args.max_steps:
            t0 = time.perf_counter()
            model.eval()
            # 1-4. rollout, rewards, the expert joining each group, advantages (offline_rollouts, make_group)
            rollout = next(rollouts)
            # 5-6. the loss over every completion token of the step (grpo_loss), the optimizer step
            lr = args.lr * min(1.0, (step + 1) / args.warmup) if args.warmup else args.lr
            t1 = time.perf_counter()
            stats = update(policy, optimizer, rollout, reference, lr)
            step += 1
            t_train = time.perf_counter() - t1
            dt = time.perf_counter() - t0

            # one log line; replies to a few prompts now and then
            on_tokens = max(1.0, stats["on_tokens"])
            record = {"step": step, **rollout.fields, "loss": stats["loss"], "lr": lr, "dt": dt,
                      "kl_rollout": stats["kl_rollout_sum"] / on_tokens,
                      "clip_frac": stats["clip_tokens"] / on_tokens, "grad_norm": stats["grad_norm"],
                      "reply_len": rollout.reply_tokens / rollout.replies,
                      "rollout_tok_s": rollout.reply_tokens / max(rollout.seconds, 1e-9),
                      "train_tok_s": stats["train_tokens"] / max(t_train, 1e-9),
                      "cuda_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None}
            if MASTER:
                (bar.write if bar else print)(
                    f"step {step}/{args.max_steps} | {rollout.summary} | "
                    f"dropped {record['zero_var_frac']:.2f} (same acc {record['same_accuracy_frac']:.2f}, "
                    f"reward {record['same_reward_frac']:.2f}) | expert {record['expert_in']} | "
                    f"kl {record['kl_rollout']:.4f} | clip {record['clip_frac']:.3f} | "
                    f"len {record['reply_len']:.1f} | roll {record['rollout_tok_s']:.0f} tok/s | "
                    f"train {record['train_tok_s']:.0f} tok/s | {dt * 1000:.0f} ms")
                log_file.write(json.dumps(record) + "\n")
                log_file.flush()
                if dumps_at(step, args):
                    samples_file.writelines(json.dumps(row) + "\n" for row in rollout.dump)
                    samples_file.flush()
                if args.wandb:
                    wandb.log(record, step=step)
                if bar:
                    bar.update(1)
            if args.save_every and (step % args.save_every == 0 or step == args.max_steps):
                save_checkpoint(args.out, raw, processor, optimizer, step, config)
    if bar:
        bar.close()
    print0(f"saved {args.out}" if args.save_every else "done (--save-every 0: no checkpoint)")
    if WORLD > 1:
        torch.distributed.destroy_process_group()


def dumps_at(step, args):  # the steps whose replies are written out: every --dump-every, and the first
    return bool(args.dump_every) and (step % args.dump_every == 0 or step == 1)


# ==============================================================================================
# The model plumbing: loading (the same text as every stage's), the policy built once, sampling with
# log-probs, teacher-forced log-probs of a group.

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
    special = processor.tokenizer.added_tokens_decoder.items()
    return torch.tensor(sorted(i for i, t in special if t.special and i not in keep))


@dataclasses.dataclass
class Policy:
    """The policy in training and how it is prompted, sampled and scored: built once, handed to helpers."""
    model: torch.nn.Module     # what the loss runs through (DDP-wrapped on several ranks)
    raw: torch.nn.Module       # the unwrapped model: sampling, the shared prompt pass, the offline reward
    processor: object
    stops: torch.Tensor        # ids that end a reply (stop_ids)
    banned: torch.Tensor       # ids a reply never contains (banned_ids)
    autocast: object           # bf16 autocast, or a disabled one in fp32
    opts: dict                 # the prompt options: grounding, order, elements
    args: argparse.Namespace   # sampling, reward and loss settings: the run's config

    @property
    def device(self):
        return self.raw.device

    @property
    def guides(self):  # the replies have a guide to score
        return self.opts["order"] != "action_only"


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


def rope_offsets(raw, mask):
    """Each prompt's next position: its real tokens (no left padding) + Qwen-VL's rope offset from its
    prefill."""
    mrope = hasattr(getattr(raw, "model", None), "rope_deltas")
    return mask.sum(1) + (raw.model.rope_deltas.view(-1) if mrope else 0), mrope


@torch.no_grad()
def sample(policy, prompts, images, n, greedy=False):
    """n replies to each prompt: the prompts prefilled once (left-padded), their KV cache repeated for the n
    samples (a prefill per sample was most of the rollout's compute), then a token per step for all rows from
    softmax(logits / T) without the banned ids (`greedy`: argmax). -> completion ids [P*n, T] (pad after the
    end of turn), their log-probs, the texts. No padding: no mask, so SDPA may pick flash or cuDNN. The cache
    is gone by the update."""
    from transformers import DynamicCache
    raw = policy.raw
    enc = policy.processor(text=prompts, images=metrics.images_arg(policy.processor, images),
                           return_tensors="pt", padding=True, padding_side="left").to(policy.device)
    mask = enc.pop("attention_mask")
    padded, cache = not bool(mask.all()), DynamicCache()
    # Qwen-VL computes its own positions
    if padded and not hasattr(getattr(raw, "model", None), "rope_deltas"):
        enc["position_ids"] = (mask.cumsum(1) - 1).clamp(min=0)
    with policy.autocast:
        out = raw(**enc, attention_mask=mask if padded else None, cache=cache, logits_to_keep=1)
        logits = out.logits[:, -1].repeat_interleave(n, 0)
    cache.batch_repeat_interleave(n)
    pos, mrope = rope_offsets(raw, mask)
    pos = pos.repeat_interleave(n)
    mask = mask.repeat_interleave(n, 0) if padded else None
    pad = policy.processor.tokenizer.pad_token_id
    stops = policy.stops.to(logits.device)
    done = torch.zeros(len(pos), dtype=torch.bool, device=logits.device)
    ids, logps = [], []
    for t in range(policy.args.max_new_tokens):
        logp = policy_logprobs(logits, policy.banned, policy.args.temperature)
        token = logp.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1)[:, 0]
        token = torch.where(done, pad, token)  # a finished row gets pad, as generate does
        ids.append(token)
        logps.append(logp.gather(-1, token[:, None])[:, 0])
        done |= torch.isin(token, stops)
        if done.all() or t == policy.args.max_new_tokens - 1:
            break
        mask = None if mask is None else torch.cat([mask, mask.new_ones(len(pos), 1)], 1)
        p = (pos + t)[:, None]
        with policy.autocast:
            logits = raw(input_ids=token[:, None], attention_mask=mask, cache=cache,
                         position_ids=p.expand(3, -1, -1) if mrope else p).logits[:, -1]
    ids = torch.stack(ids, 1)
    return ids, torch.stack(logps, 1), policy.processor.tokenizer.batch_decode(ids, skip_special_tokens=True)


def group_inputs(policy, prompt_text, image, completions):
    """A group as the update runs it: the prompt encoded once, the completions (the exact sampled
    tokens, pad after the end of turn), their mask and which rows never ended."""
    processor = policy.processor
    enc = processor(text=[prompt_text], images=metrics.images_arg(processor, [image]), return_tensors="pt")
    enc = enc.to(policy.device)
    mask, truncated = completion_mask(completions, policy.stops)
    ids = completions.masked_fill(~mask.bool(), processor.tokenizer.pad_token_id)
    return {"prompt": enc, "ids": ids}, mask, truncated


def chunked_logprobs(policy, hidden, ids, size=1024):
    """log p(ids) from the final hidden states, `size` positions at a time through the LM head (recomputed in
    backward): all completion tokens' logits never exist at once (with 151,936 ids, the largest tensor)."""
    head = policy.raw.get_output_embeddings()

    def chunk(h, i):
        with policy.autocast:
            logp = policy_logprobs(head(h), policy.banned, policy.args.temperature)
            return logp.gather(-1, i[:, None])[:, 0]
    parts = [torch.utils.checkpoint.checkpoint(chunk, h, i, use_reentrant=False)
             for h, i in zip(hidden.flatten(0, 1).split(size), ids.flatten().split(size))]
    return torch.cat(parts).view_as(ids)


def shared_prefix_logprobs(policy, inputs, mask):
    """log p(completion token t | prompt, tokens < t) of every row of a group, teacher-forced, the shared
    prompt run once (~95% of a group's tokens): its KV cache, gradients included, is repeated for the rows.
    Equal to the full rows, gradients too, with or without checkpointing (tested). The prompt's pass runs
    `policy.raw` (DDP's one forward per backward is the rows' pass). A checkpointed layer replays its cache
    update in backward: each pass has its own cache, left as it was before the pass (emptied, cut back) for
    the replay."""
    from transformers import DynamicCache
    raw = policy.raw
    ids = inputs["ids"]
    n, T = ids.shape
    L = inputs["prompt"]["input_ids"].shape[1]  # the prompt's length
    prompt_cache, rows_cache = DynamicCache(), DynamicCache()
    with policy.autocast:
        first = raw(**inputs["prompt"], cache=prompt_cache, logits_to_keep=1).logits[:, -1]
    for i, layer in enumerate(prompt_cache.layers):
        rows_cache.update(layer.keys.repeat_interleave(n, 0), layer.values.repeat_interleave(n, 0), i)
    prompt_cache.crop(-L)  # back to empty (a view, not an in-place change: autograd still holds the keys)
    pos, mrope = rope_offsets(raw, inputs["prompt"]["attention_mask"])
    pos = (pos[:, None] + torch.arange(T, device=ids.device)).expand(n, T)
    attn = torch.cat([torch.ones(n, L, dtype=torch.long, device=ids.device), mask.long()], 1)
    with policy.autocast:  # hidden states only: the logits are chunked_logprobs' business
        hidden = policy.model(input_ids=ids, attention_mask=attn, cache=rows_cache, output_hidden_states=True,
                              position_ids=pos.expand(3, n, T) if mrope else pos,
                              logits_to_keep=torch.empty(0, dtype=torch.long,
                                                         device=ids.device)).hidden_states[-1]
    rows_cache.crop(-T)  # back to the prompt (negative: "remove T" in every Transformers version)
    first = policy_logprobs(first, policy.banned, policy.args.temperature)
    first = first.expand(n, -1).gather(-1, ids[:, :1])
    return torch.cat([first, chunked_logprobs(policy, hidden[:, :-1], ids[:, 1:])], 1)


def enable_checkpointing(raw):
    """Checkpointing that keeps the shared-prefix update: non-reentrant (a reentrant replay cuts the prompt's
    cache off the graph), the layers keeping their KV cache (each pass leaves it as the replay needs it)."""
    layers = [m for m in raw.modules() if hasattr(m, "_can_checkpoint_with_cache")]
    # older Transformers drop the cache under checkpointing: the rows would not see their prompt
    if not layers:
        raise SystemExit(
            "--grad-checkpointing: this Transformers drops the KV cache under checkpointing (5.24 works)")
    raw.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for module in layers:
        module._can_checkpoint_with_cache = True


# ----------------------------------------------------------------------------------------------
# Prompts of the training split, in a deterministic endless stream.

def training_prompts(episodes, args, opts):
    """What a prompt is: a usable step (offline), or a (task, seed) whose recorded expert episode
    succeeded with every step usable (live). -> (prompts, what they are, for an error message)."""
    if args.env == "offline":
        return metrics.usable_steps(episodes, args.split, args.statuses, opts["order"]), "usable steps"
    annotated = [ep for ep in sorted(episodes, key=lambda e: e["id"])
                 if ep["suite"] == args.suite and ep["success"]
                 and (args.split == "all" or ep.get("split", "train") == args.split)
                 and len(metrics.usable_steps([ep], "all", args.statuses, opts["order"])) == len(ep["steps"])]
    return annotated, f"successful {args.suite} episodes with every step annotated"


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


def save_checkpoint(out, raw, processor, optimizer, step, config):
    """The model and processor, trainer_state.pt and the whole config (metrics.TRAIN_CONFIG, as train_sft.py:
    replay, evaluate and --resume read its prompt options), written aside, put in place by publish_dir."""
    rng = rng_states()  # every rank takes part
    if not MASTER:
        return
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    raw.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    torch.save({"optimizer": optimizer.state_dict(), "step": step, "rng": rng, "config": config},
               os.path.join(tmp, "trainer_state.pt"))
    with open(os.path.join(tmp, metrics.TRAIN_CONFIG), "w") as f:
        json.dump(config | {"trained_by": "train_grpo.py"}, f, indent=1)
    metrics.publish_dir(tmp, out)


# ==============================================================================================
# Live mode (the docstring's second mode): each of the G episodes of a (task, seed) runs in its own browser
# context; the browsers act while the model samples, and requests waiting at the same time share a batch.

class Sampler:
    """Collects concurrent prompts and samples one reply for each in a single `sample` call."""

    def __init__(self, policy):
        self.policy = policy
        self.pending = []  # (prompt, image, future) of the episodes waiting for a reply
        self.lock = asyncio.Lock()

    async def ask(self, text, image):
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((text, image, fut))
        await asyncio.sleep(0.02)  # let the episodes that are about to ask join this batch
        async with self.lock:
            batch, self.pending = self.pending, []
            if batch:
                prompts, images, futures = map(list, zip(*batch))
                ids, logp, texts = await asyncio.to_thread(sample, self.policy, prompts, images, 1)
                for i, future in enumerate(futures):
                    future.set_result((ids[i], logp[i], texts[i]))
        return await fut


class LivePolicy:
    """collect.py's policy interface over the model in training; keeps what the loss needs per step."""
    executed = False

    def __init__(self, sampler):
        self.sampler = sampler
        self.opts = sampler.policy.opts
        self.grounding, self.order = self.opts["grounding"], self.opts["order"]  # what collect.py reads
        self.steps = []  # per step: prompt, image, ids, log-probs, reply

    async def act(self, obs):
        ep, k = obs["episode"], obs["step"]
        image = metrics.step_image(ep, k, self.grounding, obs["png"])
        text, image = metrics.chat_prompt(self.sampler.policy.processor, ep, k, self.opts, image=image)
        ids, logp, reply = await self.sampler.ask(text, image)
        self.steps.append({"prompt": text, "image": image, "ids": ids, "logp": logp, "reply": reply})
        return reply


async def live_episodes(env, browser, sampler, pairs, folder):
    """G episodes of every (task, seed), all at once -> per pair a list of (episode, policy steps)."""
    import collect
    args = sampler.policy.args

    async def rollouts(g):  # the G rollouts share episode ids: each writes its own folder
        policies = {}

        def make(task, seed):  # a fault's retry gets a fresh policy: the last one made played the episode
            policies[task, seed] = LivePolicy(sampler)
            return policies[task, seed]
        episodes = await collect.run_episodes(env, pairs, make, os.path.join(folder, f"r{g}"),
                                              workers=len(pairs), max_steps=args.episode_steps,
                                              action_timeout=args.action_timeout, policy_name="grpo",
                                              browser=browser, progress=False, raise_errors=True)
        by_job = {(ep["task"], ep["seed"]): ep for ep in episodes}
        return [(by_job[t, s], policies[t, s].steps) for t, s in pairs]

    per_g = await asyncio.gather(*(rollouts(g) for g in range(args.group_size)))
    return [[per_g[g][i] for g in range(args.group_size)] for i in range(len(pairs))]


def live_groups(policy, rollouts, expert_episodes):
    """G trajectories (+ the recorded expert episode) -> a loss group per step, its trajectory's advantage.
    -> (groups, totals, filler: a dropped (task, seed)'s group, for a DDP rank with nothing else to run)."""
    args = policy.args
    device = policy.device
    totals = {"success": 0.0, "episode_steps": 0.0, "zero_var": 0, "same_accuracy": 0, "same_reward": 0,
              "expert_in": 0}
    groups, filler = [], None
    for trajectories, expert_episode in zip(rollouts, expert_episodes):
        rewards, members = [], []  # members: per trajectory, (prompt, image, ids, log-probs, is the expert's)
        for ep, steps in trajectories:
            parsed = [s.get("exec_error") != metrics.UNPARSEABLE for s in ep["steps"]]
            well_formed = sum(parsed) / len(parsed) if parsed else 0.0
            rewards.append(float(ep["success"]) + args.w_live_format * well_formed)
            members.append([(s["prompt"], s["image"], s["ids"], s["logp"], False) for s in steps])
            totals["success"] += float(ep["success"])
            totals["episode_steps"] += len(ep["steps"])
        success = [float(ep["success"]) for ep, _ in trajectories]
        if args.expert != "off" and (args.expert == "always" or max(success) == 0):
            expert_steps = []
            for k in range(len(expert_episode["steps"])):
                text, image = metrics.chat_prompt(policy.processor, expert_episode, k, policy.opts)
                expert_steps.append((text, image, expert_ids(policy, expert_episode, k)[0], None, True))
            # a recorded expert episode succeeded, every reply well-formed
            rewards.append(1.0 + args.w_live_format)
            members.append(expert_steps)
            success.append(1.0)
            totals["expert_in"] += 1
        drop = drop_group(success, rewards, args.drop_groups)  # live, the accuracy is the task's success
        totals |= {key: totals[key] + count for key, count in drop.items()}
        if drop["zero_var"]:
            if filler is None and expert_episode["steps"]:
                text, image = metrics.chat_prompt(policy.processor, expert_episode, 0, policy.opts)
                ids = expert_ids(policy, expert_episode, 0)[0][None]
                inputs, mask, _ = group_inputs(policy, text, image, ids)
                filler = {"inputs": inputs, "mask": mask, "rollout_logp": torch.zeros_like(mask),
                          "expert": torch.tensor([True], device=device), "adv": torch.zeros(1, device=device)}
            continue
        adv = advantages(rewards, args.std_scale,
                         len(trajectories) if args.expert_baseline == "policy" else None)
        for a, steps in zip(adv.tolist(), members):
            for text, image, ids, logp, is_expert in steps:
                inputs, mask, truncated = group_inputs(policy, text, image, ids[None].to(device))
                if args.truncated == "mask":
                    mask = mask * (~truncated)[:, None]
                rollout_logp = (torch.zeros_like(mask) if logp is None  # the expert's step: no ratio
                                else logp[None, :mask.shape[1]].to(device))
                step_adv = 0.0 if (args.truncated == "zero" and bool(truncated)) else a
                groups.append({"inputs": inputs, "mask": mask, "rollout_logp": rollout_logp,
                               "expert": torch.tensor([is_expert], device=device),
                               "adv": torch.tensor([step_adv], device=device)})
    return groups, totals, filler


def live_rollouts(policy, prompt_batches, step):
    """1. The rollout (live mode), one optimizer step after another: G episodes of each of this rank's
    (task, seed) in collect.py's environments; one event loop, Playwright, browser and environment a run."""
    from playwright.async_api import async_playwright

    import collect
    args, G = policy.args, policy.args.group_size
    loop = asyncio.new_event_loop()
    pw = loop.run_until_complete(async_playwright().start())
    env, browser = collect.make_env(args.suite), collect.Browser(pw, headless=True)
    sampler = Sampler(policy)
    try:
        while True:
            step += 1
            t0 = time.perf_counter()
            my_episodes = next(prompt_batches)[RANK::WORLD]  # every rank rolls out its own share
            folder = f"{args.out.rstrip('/')}.rollouts/step-{step}"
            pairs = [(e["task"], e["seed"]) for e in my_episodes]
            rollouts = loop.run_until_complete(live_episodes(env, browser, sampler, pairs, folder))
            seconds = time.perf_counter() - t0
            groups, totals, filler = live_groups(policy, rollouts, my_episodes)
            if not dumps_at(step, args):  # screenshots of the dumped steps only
                shutil.rmtree(folder, ignore_errors=True)
            n = max(1, len(my_episodes) * G)
            reply_tokens = sum(int(completion_mask(s["ids"][None], policy.stops)[0].sum())
                               for trajectories in rollouts for _, steps in trajectories for s in steps)
            fields = {"reward": totals["success"] / n, "success": totals["success"] / n,
                      "episode_steps": totals["episode_steps"] / n,
                      "expert_in": totals["expert_in"],
                      **{f"{key}_frac": totals[key] / max(1, len(my_episodes))
                         for key in ("zero_var", "same_accuracy", "same_reward")}}
            summary = f"success {fields['success']:.3f} | steps/episode {fields['episode_steps']:.1f}"
            dump = [{"step": step, "task": e["task"], "seed": e["seed"],
                     "success": [ep["success"] for ep, _ in trajs],
                     "replies": [[s["reply"] for s in steps] for _, steps in trajs]}
                    for e, trajs in zip(my_episodes[:2], rollouts)]
            yield Rollouts(groups, filler, fields, summary, dump, reply_tokens, n, seconds)
    finally:
        loop.run_until_complete(browser.close())
        loop.run_until_complete(pw.stop())
        env.close()
        loop.close()


if __name__ == "__main__":
    main()
