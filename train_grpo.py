r"""train_grpo.py -- hand-written GRPO with expert-trajectory augmentation for MAG agents.

Each optimizer step takes a few prompts (steps of the training split: screenshot, task, gold
history -- metrics.build_messages, the prompt SFT, replay and evaluation see), samples G replies
per prompt from the current policy, scores every reply with the evaluator's own step scores (total_reward:
metrics.score_action's format, element and op F1, and a guide score), and pushes the policy towards the
replies that beat their group's baseline (its mean, or the samples' alone). The expert's reply (the
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
  python train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --expert off --max-steps 10 --out ckpt/g_noexp
  # one GPU (bf16 autocast; FlashAttention-2 for rollouts and training when flash-attn is installed):
  python train_grpo.py --ckpt ckpt/sft --data data/X --prompts-per-step 16 --group-size 8 --out ckpt/grpo
  # eight GPUs (DDP: every rank rolls out its own share of the step's prompts):
  torchrun --standalone --nproc_per_node=8 train_grpo.py --ckpt ckpt/sft --data data/X --prompts-per-step 64 \
      --out ckpt/grpo
  # continue after an interruption (bit-exact on CPU):
  python train_grpo.py ... --out ckpt/grpo --resume

The defaults are the MAG paper's recipe as far as its summary states it (GRPO, rule rewards on the
action and the guide, expert trajectories in the groups) with the common choices it builds on: Dr.GRPO's
unscaled advantages, DAPO's clip-higher (0.2 / 0.28) and token-level loss, no KL, LUFFY's gamma 0.1. A group
that carries no signal is dropped from the step (--drop-groups accuracy: its members all have the same action
accuracy, even when their shaped rewards differ; `reward`: their shaped rewards are all equal); DAPO's dynamic
sampling samples more prompts to refill the batch instead, here the step just has fewer groups.

Two modes. offline (default): a prompt is one recorded step, its G samples single replies scored against
the gold step. live (--env live --suite miniwob|backoffice|helpdesk): a prompt is a (task, seed) of the
training split whose recorded expert episode succeeded; G fresh episodes of it run in collect.py's
environments, the trajectory reward is the environment's success (+ --w-live-format for well-formed
replies) and its advantage goes to every step; the recorded expert episode is the off-policy member.
--curriculum draws the tasks whose running success is strictly between 0 and 1; the log adds each step's
invalid replies, the sampled tokens' entropy and (with --beta) the KL to the starting model.
  python train_grpo.py --env live --suite miniwob --ckpt ckpt/sft --data data/miniwob --group-size 4 \
      --out ckpt/grpo_live

Reading order: main (the loop) -> rollout, rewards with the expert, advantages and the group drop, loss and
update, each one call away; then the plumbing (setup, logging, the model, checkpoints, live mode's browser).

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
import typing

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
    # rewards (offline): total_reward's weights, each on one of the evaluator's scores; each logged on its own
    p.add_argument("--w-format", type=float, default=0.1, help="metrics' format: parses, lines in order")
    p.add_argument("--w-element", type=float, default=0.4, help="metrics' element: right mark | point in box")
    p.add_argument("--w-op", type=float, default=0.3,
                   help="metrics.op_f1: token F1 of 'op value' (1.0 is step success's op half)")
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
    p.add_argument("--suite", default="miniwob", help="live: a suite of collect.py (not webarena)",
                   choices=["miniwob", "backoffice", "helpdesk", "shop", "cms", "example"])
    p.add_argument("--episode-steps", type=int, default=10, help="live: step limit per episode")
    p.add_argument("--w-live-format", type=float, default=0.0,
                   help="live: trajectory reward = success + this * the share of replies that parse")
    p.add_argument("--action-timeout", type=float, default=10.0, help="live: seconds until an action hangs")
    p.add_argument("--curriculum", action="store_true",
                   help="live: draw the tasks whose running success is strictly between 0 and 1 (Curriculum)")
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
# The method: main's loop, then each part it calls in the loop's order -- 1. the rollout, 2. the rewards
# with 3. the expert joining the group, 4. the advantages and the group drop, 5. the loss, 6. the update.

def main(argv=None):
    args = parse_args(argv)
    policy, optimizer, reference, prompts_stream, step, config = setup(args)  # device, data, model, resume
    live = LiveRollouts(policy) if args.env == "live" else None   # a browser and an environment for the run
    log = RunLog(args, step, config)
    G = args.group_size
    with contextlib.closing(live) if live else contextlib.nullcontext():
        while step < args.max_steps:
            step += 1
            t0 = time.perf_counter()
            policy.model.eval()
            prompts = next(prompts_stream)[RANK::WORLD]  # every rank rolls out its own share of the prompts
            # 1. rollout: G replies to each recorded step | G episodes of each (task, seed) (live)
            samples = live.rollout(prompts, step) if live else offline_rollout(policy, prompts)
            t_rollout = time.perf_counter() - t0
            groups = []
            for prompt, sampled in zip(prompts, samples):
                # 2-3. every member's reward; the expert's reply joins the group (--expert)
                score = score_episodes if live else score_replies
                group = score(policy, prompt, sampled)
                # 4. advantages against the group's mean (the samples' alone with --expert-baseline policy);
                # a group that carries no signal is dropped
                group.adv = advantages(group.rewards, args.std_scale,
                                       G if args.expert_baseline == "policy" else None)
                group.drop = drop_group(group.accuracy, group.rewards, args.drop_groups)
                groups.append(group)
                if isinstance(prompts_stream, Curriculum):
                    prompts_stream.record(group.task, group.accuracy[:G])
            # 5-6. the loss (grpo_loss) over every completion token of the step, then the optimizer step
            lr = args.lr * min(1.0, step / args.warmup) if args.warmup else args.lr
            t1 = time.perf_counter()
            stats = update(policy, optimizer, groups, reference, lr)
            t2 = time.perf_counter()
            seconds = {"rollout": t_rollout, "train": t2 - t1, "step": t2 - t0}
            log.step(step, lr, policy, prompts, samples, groups, stats, seconds)
            if args.save_every and (step % args.save_every == 0 or step == args.max_steps):
                save_checkpoint(args.out, policy.raw, policy.processor, optimizer, step, config)
    log.close()
    print0(f"saved {args.out}" if args.save_every else "done (--save-every 0: no checkpoint)")
    if WORLD > 1:
        torch.distributed.barrier()  # every rank past rank 0's last save before any tears the group down
        torch.distributed.destroy_process_group()


class Turn(typing.NamedTuple):
    """One reply of a group member, as the loss reads it."""
    prompt: str                # the chat-templated prompt text
    image: object              # its screenshot
    ids: torch.Tensor          # the reply's tokens, end of turn included
    logp: torch.Tensor | None  # their log-probs at the rollout; None: the expert's reply (off-policy)


@dataclasses.dataclass
class Group:
    """One prompt's members, scored: the policy's G samples, then the expert's reply when it joins."""
    members: list        # per member, its Turns: offline one, live one per step of its episode
    rewards: list        # per member: the total reward
    accuracy: list       # per member: step success (offline) | task success (live): what --drop-groups reads
    expert: list         # per member: is it the expert's (its steps have no rollout log-probs)
    log: dict            # sums over the policy's samples for the log line (reward components | episodes)
    adv: torch.Tensor = None   # 4. per member
    drop: dict = None          # 4. drop_group's verdict
    truncated: list = None     # offline, per member: cut by --max-new-tokens (the expert's reply never is)
    task: str = None           # live: the prompt's task


def offline_rollout(policy, prompts):
    """1. The rollout (offline): G replies to each of the step's recorded steps, sampled in one batch. -> per
    prompt {prompt, image, ids [G, T], logp [G, T], texts}."""
    G = policy.args.group_size
    texts, images = map(list, zip(*(metrics.chat_prompt(policy.processor, ep, k, policy.opts)
                                    for ep, k in prompts)))
    ids, logp, replies = sample(policy, texts, images, G)
    rows = [slice(i * G, (i + 1) * G) for i in range(len(prompts))]  # prompt i's samples
    return [{"prompt": texts[i], "image": images[i], "ids": ids[r], "logp": logp[r], "texts": replies[r]}
            for i, r in enumerate(rows)]


def score_replies(policy, prompt, sampled):
    """2-3 (offline). Every reply's reward against the recorded step (reward_components, total_reward); the
    expert's reply (expert_reply) joins as the last member: always, or when no sample is right (--expert)."""
    args, (ep, k) = policy.args, prompt
    scoring = (ep["steps"][k], policy.opts["grounding"], policy.opts["order"], ep["viewport"])
    shared = (sampled["prompt"], sampled["image"])  # a member's one step: prompt, image, ids, log-probs
    members = [[Turn(*shared, ids, logp)] for ids, logp in zip(sampled["ids"], sampled["logp"])]
    components = [reward_components(text, *scoring) for text in sampled["texts"]]
    G, none_right = len(members), max(c["accuracy"] for c in components) == 0
    if args.expert == "always" or (args.expert == "when_wrong" and none_right):
        expert_ids, expert_text = expert_reply(policy, ep, k)
        members.append([Turn(*shared, expert_ids, None)])
        components.append(reward_components(expert_text, *scoring))
    if policy.guides and args.guide_reward == "offline":  # the guide's score, the expert's guide's too
        offline_guide_scores(policy, *shared, components, ep, k)
    elif policy.guides:
        guide_scores(args.guide_reward, components, ep["steps"][k])
    rewards = [total_reward(c, args, policy.guides) for c in components]
    reply_mask, truncated = completion_mask(sampled["ids"], policy.stops)
    log = {key: sum(r if key == "reward" else c[key] for c, r in zip(components[:G], rewards[:G]))
           for key in ("reward", "format", "op", "element", "guide", "accuracy")}
    log |= {"truncated": int(truncated.sum()), "reply_tokens": int(reply_mask.sum())}
    expert = [False] * G + [True] * (len(members) - G)
    return Group(members, rewards, [c["accuracy"] for c in components], expert, log,
                 truncated=truncated.tolist() + [False] * (len(members) - G))


def reward_components(text, gold_step, grounding, order, viewport):
    """2. One reply's reward components, each the evaluator's own score of it (metrics.score_action): format,
    element, op (metrics.op_f1: token F1 of "op value"; a wrong op with no value, as click for stop(""), earns
    0). accuracy, step success (element right, op F1 1), is not rewarded: it decides the group drop and when
    the expert joins. guide_scores adds the guide's score."""
    scores, guide, _ = metrics.score_action(text, gold_step, grounding, order, viewport)
    return {"format": float(scores["format"]), "element": float(scores["element"]), "op": scores["op_f1"],
            "accuracy": float(scores["step"]), "guide": 0.0, "_guide_text": guide or ""}


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
    # replay.py is imported only for this flag (check_files looks for it first); it imports metrics and torch
    import replay
    gold = metrics.format_action(ep["steps"][k]["action"], policy.opts["grounding"], ep["viewport"])
    n = len(components)
    with torch.no_grad(), policy.autocast:
        scores = replay.action_logprobs(policy.raw, policy.processor, [prompt_text] * n, [image] * n,
                                        [c["_guide_text"] for c in components], [gold] * n)
    for c, score in zip(components, scores):
        c["guide"] = score


def total_reward(c, args, guides):
    """2. The reward (offline), one formula; the weights' defaults beside it: a right reply earns 1.0
        0.1 format + 0.4 element + 0.3 op F1 + 0.2 guide   (--w-format --w-element --w-op --w-guide)
    action_only replies have no guide: their best is 0.8."""
    return (args.w_format * c["format"] + args.w_element * c["element"] + args.w_op * c["op"]
            + (args.w_guide * c["guide"] if guides else 0.0))


def expert_reply(policy, ep, k):
    """3. The expert's reply in exactly the policy's format (train_sft.py's target) + end of turn. -> (ids,
    text)."""
    gold_step = ep["steps"][k]
    tokenizer = policy.processor.tokenizer
    text = metrics.format_output(gold_step.get("guide"), gold_step["action"], policy.opts["grounding"],
                                 policy.opts["order"], ep["viewport"])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, device=policy.device), text


def score_episodes(policy, expert_episode, trajectories):
    """2-3 (live). Every trajectory's reward: the task's success (+ --w-live-format x the share of its replies
    that parse); the recorded expert episode joins as the last member (--expert), every step of it, with the
    reward of a success whose replies all parse."""
    args = policy.args
    members = []   # per trajectory, its steps
    rewards = []
    success = []
    for ep, steps in trajectories:
        parsed = [s.get("exec_error") != metrics.UNPARSEABLE for s in ep["steps"]]
        well_formed = sum(parsed) / len(parsed) if parsed else 0.0
        rewards.append(float(ep["success"]) + args.w_live_format * well_formed)
        success.append(float(ep["success"]))
        members.append([Turn(s["prompt"], s["image"], s["ids"], s["logp"]) for s in steps])
    G = len(members)
    replies = [s for _, steps in trajectories for s in steps]
    masks = [completion_mask(s["ids"][None], policy.stops)[0][0].bool() for s in replies]
    log = {"reward": sum(rewards), "success": sum(success),
           "episode_steps": sum(len(ep["steps"]) for ep, _ in trajectories),
           "invalid_steps": sum(s.get("exec_error") == metrics.UNPARSEABLE for ep, _ in trajectories
                                for s in ep["steps"]),
           "reply_tokens": sum(int(m.sum()) for m in masks),
           # the sampled tokens' mean -log p: an estimate of the policy's entropy at --temperature
           "reply_nll": sum(float(-s["logp"][m].sum()) for s, m in zip(replies, masks))}
    if args.expert == "always" or (args.expert == "when_wrong" and max(success) == 0):
        members.append([Turn(*metrics.chat_prompt(policy.processor, expert_episode, k, policy.opts),
                             expert_reply(policy, expert_episode, k)[0], None)
                        for k in range(len(expert_episode["steps"]))])
        rewards.append(1.0 + args.w_live_format)
        success.append(1.0)
    return Group(members, rewards, success, [False] * G + [True] * (len(members) - G), log,
                 task=expert_episode["task"])


def advantages(rewards, std_scale, baseline_n=None):
    """4. Group-relative: reward - the mean of the first `baseline_n` rewards: the policy's own samples
    (--expert-baseline policy), or (None) the whole group, the expert's reward too (LUFFY). --std-scale
    divides by the std of the whole group, the expert's reward included, whichever mean is the baseline."""
    r = torch.tensor(rewards, dtype=torch.float32)
    a = r - r[:baseline_n].mean()
    return a / (r.std() + 1e-4) if std_scale and len(rewards) > 1 else a


def drop_group(accuracies, rewards, rule):
    """4. --drop-groups: `accuracy` drops a group whose members all have the same accuracy (step success;
    live: task success), `reward` one whose rewards are all equal: e.g. rewards
    [0.057, 0, 0, 0] at accuracies [0, 0, 0, 0] are dropped by `accuracy`, kept by `reward`.
    -> {dropped, same_accuracy, same_reward}: 0|1."""
    same = {"same_accuracy": len(set(accuracies)) == 1,
            "same_reward": max(rewards) - min(rewards) <= 1e-6}  # equal up to float noise
    return {"dropped": int(same[f"same_{rule}"])} | {k: int(v) for k, v in same.items()}


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
# With one update per batch r is 1 in exact arithmetic only: the rollout's log-probs come from batched,
# KV-cached decoding, the update's from a teacher-forced pass, and they differ in the last bits (bf16: more),
# which the log's kl_rollout and clip_frac measure; the clip acts on those rare tokens, and in earnest with
# --updates-per-batch > 1.

def grpo_loss(logp, rollout_logp, adv, mask, is_expert, n_tokens, clip_low=0.2, clip_high=0.28, gamma=0.1,
              beta=0.0, ref_logp=None):
    """logp, rollout_logp, ref_logp, mask: [rows, T]; adv, is_expert (bool): [rows]. -> (loss, stats)."""
    # positions outside the mask (after a reply's end of turn, a truncated reply's masked tokens, the expert
    # row's unused rollout log-probs) may hold -inf or garbage: zeroed before any arithmetic, so 0 * inf never
    # makes a NaN
    m = mask.bool()
    logp, rollout_logp = torch.where(m, logp, 0.0), torch.where(m, rollout_logp, 0.0)
    kl = None   # k3 of the starting model vs now, per token: the --beta term and the log's kl_ref
    if ref_logp is not None:
        d = torch.where(m, ref_logp, 0.0) - logp
        kl = torch.exp(d) - d - 1
    a = adv[:, None]
    ratio = torch.exp(logp - rollout_logp)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)
    p = torch.exp(logp)
    off = a * p / (p + gamma)
    per_token = torch.where(is_expert[:, None], off, surrogate)
    if beta > 0:
        per_token = per_token - beta * torch.where(is_expert[:, None], torch.zeros_like(kl), kl)
    loss = -(per_token * mask).sum() / n_tokens
    with torch.no_grad():
        on = mask * (~is_expert)[:, None]
        clipped = ((ratio < 1 - clip_low) & (a < 0)) | ((ratio > 1 + clip_high) & (a > 0))
        d = rollout_logp - logp
        stats = {"clip_tokens": float((clipped * on).sum()), "on_tokens": float(on.sum()),
                 # k3 of the rollout policy vs now
                 "kl_rollout_sum": float(((torch.exp(-d) + d - 1) * on).sum())}
        if kl is not None:  # how far the run has moved from where it started
            stats["kl_ref_sum"] = float((kl * on).sum())
    return loss, stats


def update(policy, optimizer, groups, reference, lr):
    """6. The update: the loss of every kept group (one backward a loss unit, DDP syncing on the last), then
    the optimizer step, --updates-per-batch times on the same rollouts. -> the log's stats, summed."""
    args = policy.args
    units = [unit for g in groups if not g.drop["dropped"] for unit in loss_units(policy, g)]
    n_tokens = torch.tensor(sum(float(u["mask"].sum()) for u in units), device=policy.device)
    if WORLD > 1:
        torch.distributed.all_reduce(n_tokens)  # token-level over the step: every rank's tokens count
        if not units:  # DDP needs a forward and backward on every rank: a dropped group's, times 0
            spare = next((u for g in groups for u in loss_units(policy, g)), None)
            units = [spare | {"weight": 0.0}] if spare else []
    if reference is not None:
        with torch.no_grad():
            for u in units:
                u["ref_logp"] = shared_prefix_logprobs(reference, u["inputs"], u["mask"])
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    policy.model.train()
    stats = {"loss": 0.0, "clip_tokens": 0.0, "on_tokens": 0.0, "kl_rollout_sum": 0.0}
    stats |= {"kl_ref_sum": 0.0} if reference is not None else {}
    train_tokens, norm = 0, torch.tensor(0.0)
    for update_index in range(args.updates_per_batch):
        for j, u in enumerate(units):
            sync = WORLD == 1 or j == len(units) - 1
            with contextlib.nullcontext() if sync else policy.model.no_sync():
                logp = shared_prefix_logprobs(policy, u["inputs"], u["mask"])
                # / WORLD: DDP averages the ranks' gradients: a mean over every token of the step
                loss, loss_stats = grpo_loss(logp, u["rollout_logp"], u["adv"], u["mask"], u["expert"],
                                             n_tokens.clamp(min=1) / WORLD, args.clip_low, args.clip_high,
                                             args.gamma, args.beta, u.get("ref_logp"))
                (loss * u.get("weight", 1.0)).backward()
            train_tokens += u["inputs"]["prompt"]["input_ids"].shape[1] + int(u["mask"].sum())  # tokens run
            if update_index == args.updates_per_batch - 1 and u.get("weight", 1.0):
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


def loss_units(policy, group):
    """A group as the loss runs it: offline one unit (its members share the prompt, run once: rows [members,
    T]); live one unit per step of each trajectory, with its trajectory's advantage. A reply cut by
    --max-new-tokens is masked out, or (--truncated zero) kept at zero advantage."""
    if policy.args.env == "offline":
        return [offline_unit(policy, group)]
    units = []
    for a, is_expert, turns in zip(group.adv.tolist(), group.expert, group.members):
        for turn in turns:
            ids = turn.ids[None].to(policy.device)
            inputs, mask, truncated = group_inputs(policy, turn.prompt, turn.image, ids)
            if policy.args.truncated == "mask":
                mask = mask * (~truncated)[:, None]
            a_step = 0.0 if (policy.args.truncated == "zero" and bool(truncated)) else a
            rollout_logp = (torch.zeros_like(mask) if turn.logp is None  # the expert's step: no ratio
                            else turn.logp[None, :mask.shape[1]].to(policy.device))
            units.append({"inputs": inputs, "mask": mask, "rollout_logp": rollout_logp,
                          "expert": torch.tensor([is_expert], device=policy.device),
                          "adv": torch.tensor([a_step], device=policy.device)})
    return units


def offline_unit(policy, group):
    """The offline group's rows: the samples (their exact tokens) and the expert's reply, padded to one
    length; a sample's truncation is score_replies', read from its own tokens before the padding (a pad
    token that is also a stop, as Qwen's <|endoftext|>, would end it there)."""
    first = group.members[0][0]  # every member answers the same prompt, with one reply
    rows = [turns[0].ids for turns in group.members]
    G = sum(not e for e in group.expert)
    completions = torch.nn.utils.rnn.pad_sequence(rows, True, policy.processor.tokenizer.pad_token_id)
    inputs, mask, _ = group_inputs(policy, first.prompt, first.image, completions)
    truncated = torch.tensor(group.truncated, dtype=torch.bool, device=mask.device)
    adv = group.adv.to(policy.device)
    if policy.args.truncated == "mask":
        mask = mask * (~truncated)[:, None]
    else:
        adv = torch.where(truncated, torch.zeros_like(adv), adv)
    T = rows[0].shape[0]
    rollout_logp = torch.zeros_like(mask)  # the expert row's stays 0, unused: its term has no ratio
    rollout_logp[:G, :T] = torch.stack([turns[0].logp for turns in group.members[:G]])
    mask[:G, T:] = 0  # a sample that never stopped ends where its rollout did, not at the expert's
    return {"inputs": inputs, "mask": mask, "rollout_logp": rollout_logp, "adv": adv,
            "expert": torch.tensor(group.expert, device=policy.device)}


# ==============================================================================================
# The plumbing: the run's setup, its log, the model (loading, sampling with log-probs, teacher-forced
# log-probs of a group), the training prompts, checkpoints, and live mode's browser and episodes.

def setup(args):
    """What the loop needs, built once: device and DDP, the training prompts, the model (from --ckpt, or --out
    when resuming), the optimizer, the frozen reference (--beta). -> (policy, optimizer, reference, the prompt
    stream where the run stands, optimizer steps done, the config saved with each checkpoint)."""
    check_files(args)
    device = pick_device(args.device)
    if WORLD > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" or (args.dtype == "auto" and cuda) else torch.float32
    random.seed(args.seed + RANK)
    torch.manual_seed(args.seed + RANK)
    state, start, opts, items = load_run(args)
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
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    policy = Policy(model, raw, processor, stops, banned_ids(processor, stops), autocast, opts, args)
    reference = None  # the KL anchor (--beta > 0): the starting model, frozen
    if args.beta > 0:
        frozen = load_model(args.ckpt, device, dtype=torch.float32)[0].requires_grad_(False)
        reference = dataclasses.replace(policy, model=frozen, raw=frozen)
    if args.curriculum:
        log_path = f"{args.out.rstrip('/')}.log.jsonl"
        stream = Curriculum(items, args.prompts_per_step, args.seed, log_path, step)
    else:
        stream = prompt_stream(items, args.prompts_per_step, args.seed)
        for _ in range(step):  # a resumed run continues the stream where it stopped
            next(stream)
    return policy, optimizer, reference, stream, step, vars(args) | opts


def load_run(args):
    """The run's starting point: the trainer state (--resume), the checkpoint to load, the prompt options (the
    flags, else the checkpoint's) and the training prompts, each checked. -> (state | None, path, opts,
    items)."""
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
    items, what = training_prompts(metrics.load_dataset_or_exit(args.data, check_images=True), args, opts)
    if len(items) < args.prompts_per_step:
        raise SystemExit(f"{args.data}: {len(items)} {what} in split {args.split!r}, "
                         f"fewer than --prompts-per-step {args.prompts_per_step}")
    return state, start, opts, items


class RunLog:
    """One line per step (stdout, or above tqdm's bar), <out>.log.jsonl, a few prompts' replies in
    <out>.samples.jsonl on --dump-every steps, wandb when asked: written by rank 0, beside the checkpoint
    folder. A resumed run drops the records after its last save."""

    def __init__(self, args, step, config):
        self.args = args
        self.files = self.bar = None
        if not MASTER:
            return
        base = args.out.rstrip("/")
        self.files = [metrics.open_log(f"{base}.{name}.jsonl", step) for name in ("log", "samples")]
        if args.wandb:
            import wandb
            wandb.init(project=args.wandb, config=config)
        if not args.no_progress:
            from tqdm import tqdm
            self.bar = tqdm(total=args.max_steps, initial=step, desc="grpo", dynamic_ncols=True)

    def step(self, step, lr, policy, prompts, samples, groups, stats, seconds):
        if not MASTER:
            return
        r = step_record(step, lr, policy, groups, stats, seconds)
        summary = (f"success {r['success']:.3f} | steps/episode {r['episode_steps']:.1f} | invalid "
                   f"{r['invalid']:.2f} | entropy {r['entropy']:.2f}" if "success" in r
                   else f"reward {r['reward']:.3f} (fmt {r['format']:.2f} op {r['op']:.2f} "
                   f"el {r['element']:.2f} guide {r['guide']:.2f}) | "
                   f"acc {r['accuracy']:.2f}")
        (self.bar.write if self.bar else print)(
            f"step {step}/{self.args.max_steps} | {summary} | dropped {r['dropped_frac']:.2f} "
            f"(same acc {r['same_accuracy_frac']:.2f}, reward {r['same_reward_frac']:.2f}) | "
            f"expert {r['expert_in']} | kl {r['kl_rollout']:.4f} | clip {r['clip_frac']:.3f} | "
            f"len {r['reply_len']:.1f} | roll {r['rollout_tok_s']:.0f} tok/s | "
            f"train {r['train_tok_s']:.0f} tok/s | {r['dt'] * 1000:.0f} ms")
        log_file, samples_file = self.files
        log_file.write(json.dumps(r) + "\n")
        log_file.flush()
        if dumps_at(step, self.args):
            rows = dump_rows(step, policy, prompts, samples)
            samples_file.writelines(json.dumps(row) + "\n" for row in rows)
            samples_file.flush()
        if self.args.wandb:
            import wandb
            wandb.log(r, step=step)
        if self.bar:
            self.bar.update(1)

    def close(self):
        if self.bar:
            self.bar.close()


def step_record(step, lr, policy, groups, stats, seconds):
    """The step's log record: means over the policy's samples (reward components, or episodes' success and
    length), the share of groups dropped and why, the expert's groups, the loss's stats, speeds."""
    n = max(1, len(groups) * policy.args.group_size)
    sums = {}
    for g in groups:
        sums |= {key: sums.get(key, 0) + value for key, value in g.log.items()}
    reply_tokens = sums.pop("reply_tokens", 0)
    fields = {key: value if key == "truncated" else value / n for key, value in sums.items()}
    if "invalid_steps" in sums:  # live: shares of the episodes' steps and of the replies' tokens
        fields |= {"invalid": sums["invalid_steps"] / max(1, sums["episode_steps"]),
                   "entropy": sums["reply_nll"] / max(1, reply_tokens),
                   "task_success": {}}
        for g in groups:  # what --curriculum reads back on --resume
            fields["task_success"].setdefault(g.task, []).extend(g.accuracy[:policy.args.group_size])
        del fields["invalid_steps"], fields["reply_nll"]
    fields |= {f"{key}_frac": sum(g.drop[key] for g in groups) / max(1, len(groups))
               for key in ("dropped", "same_accuracy", "same_reward")}
    on_tokens = max(1.0, stats["on_tokens"])
    cuda = policy.device.type == "cuda"
    return {"step": step, **fields, "expert_in": sum(any(g.expert) for g in groups), "loss": stats["loss"],
            "lr": lr, "dt": seconds["step"], "kl_rollout": stats["kl_rollout_sum"] / on_tokens,
            "clip_frac": stats["clip_tokens"] / on_tokens, "grad_norm": stats["grad_norm"],
            "kl_ref": stats["kl_ref_sum"] / on_tokens if "kl_ref_sum" in stats else None,
            "reply_len": reply_tokens / n, "rollout_tok_s": reply_tokens / max(seconds["rollout"], 1e-9),
            "train_tok_s": stats["train_tokens"] / max(seconds["train"], 1e-9),
            "cuda_peak_gib": torch.cuda.max_memory_allocated(policy.device) / 2**30 if cuda else None}


def dumps_at(step, args):  # the steps whose replies are written out: every --dump-every, and the first
    return bool(args.dump_every) and (step % args.dump_every == 0 or step == 1)


def dump_rows(step, policy, prompts, samples):
    """Rows for <out>.samples.jsonl: the replies to the step's first two prompts (live: every episode's)."""
    if policy.args.env == "live":
        return [{"step": step, "task": e["task"], "seed": e["seed"],
                 "success": [ep["success"] for ep, _ in trajs],
                 "replies": [[s["reply"] for s in steps] for _, steps in trajs]}
                for e, trajs in zip(prompts[:2], samples)]
    return [{"step": step, "id": ep["id"], "k": k, "gold": expert_reply(policy, ep, k)[1],
             "samples": s["texts"]} for (ep, k), s in zip(prompts[:2], samples)]


# ----------------------------------------------------------------------------------------------
# The model

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


class Curriculum:
    """--curriculum (live): each step draws its (task, seed) prompts from the tasks whose running success (the
    policy's last `window` episodes of the task) is strictly between 0 and 1, or not yet measured on `window`
    episodes (one group of 4 failures does not close a task) -- the tasks where a group of the policy's own
    episodes can tell better from worse -- and from every task when none is. A resumed run rebuilds the
    running success from the log's task_success up to its save."""
    window = 16

    def __init__(self, items, per_step, seed, log_path, step):
        self.items, self.per_step = items, per_step
        self.seed, self.step = seed, step  # step: draws so far (each draw seeds its own RNG)
        self.recent = {}     # task -> the policy's last `window` successes
        for line in open(log_path, encoding="utf-8") if step and os.path.exists(log_path) else []:
            with contextlib.suppress(json.JSONDecodeError):   # a line torn by the kill that ended the run
                record = json.loads(line)
                done = record["step"] <= step
                for task, successes in record.get("task_success", {}).items() if done else ():
                    self.record(task, successes)

    def __next__(self):
        self.step += 1
        drawable = [e for e in self.items if self.open(e["task"])]
        drawable = drawable if len(drawable) >= self.per_step else self.items
        return random.Random(f"{self.seed}:curriculum:{self.step}").sample(drawable, self.per_step)

    def open(self, task):
        r = self.recent.get(task, [])
        return len(r) < self.window or 0 < sum(r) < len(r)

    def record(self, task, successes):
        self.recent[task] = (self.recent.get(task, []) + list(successes))[-self.window:]


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

class LiveRollouts:
    """1. The rollout (live): one event loop, Playwright, browser and collect.py environment for the run."""

    def __init__(self, policy):
        from playwright.async_api import async_playwright

        import collect  # a stage, imported for --env live only (check_files looks for it first)
        self.policy, self.loop = policy, asyncio.new_event_loop()
        self.pw = self.loop.run_until_complete(async_playwright().start())
        self.env, self.browser = collect.make_env(policy.args.suite), collect.Browser(self.pw, headless=True)
        self.sampler = Sampler(policy)

    def rollout(self, prompts, step):
        """G episodes of each of the step's (task, seed), all at once -> per prompt its G trajectories
        [(episode, the policy's steps)]. They reach the update in memory; on a --dump-every step they are also
        written under <out>.rollouts/step-N (episodes.jsonl and screenshots), to look at."""
        args = self.policy.args
        folder = f"{args.out.rstrip('/')}.rollouts/step-{step}" if dumps_at(step, args) else None
        pairs = [(e["task"], e["seed"]) for e in prompts]
        episodes = live_episodes(self.env, self.browser, self.sampler, pairs, folder)
        return self.loop.run_until_complete(episodes)

    def close(self):
        self.loop.run_until_complete(self.browser.close())
        self.loop.run_until_complete(self.pw.stop())
        self.env.close()
        self.loop.close()


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


async def live_episodes(env, browser, sampler, pairs, folder=None):
    """G episodes of every (task, seed), all at once -> per pair a list of (episode, policy steps). folder:
    where they are also written (None: memory only)."""
    import collect
    args = sampler.policy.args

    async def rollouts(g):  # the G rollouts share episode ids: on disk each writes its own folder
        policies = {}

        def make(task, seed):  # a fault's retry gets a fresh policy: the last one made played the episode
            policies[task, seed] = LivePolicy(sampler)
            return policies[task, seed]
        out = os.path.join(folder, f"r{g}") if folder else None
        episodes = await collect.run_episodes(
            env, pairs, make, out, workers=len(pairs), max_steps=args.episode_steps,
            action_timeout=args.action_timeout, policy_name="grpo", browser=browser, progress=False,
            raise_errors=True)
        by_job = {(ep["task"], ep["seed"]): ep for ep in episodes}
        return [(by_job[t, s], policies[t, s].steps) for t, s in pairs]

    per_g = await asyncio.gather(*(rollouts(g) for g in range(args.group_size)))
    return [[per_g[g][i] for g in range(args.group_size)] for i in range(len(pairs))]


if __name__ == "__main__":
    main()
