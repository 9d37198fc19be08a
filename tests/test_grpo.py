"""train_grpo.py: the loss against a written-out formula, rollout vs teacher-forced log-probs, the
expert's row, a learning signal, bit-exact resume (after a save cut short, too), bad checkpoints."""
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import browser_missing

import envs
import metrics
import train_grpo
import train_sft
from envs.example import Example

CPU = torch.device("cpu")
NO_AUTOCAST = torch.autocast("cpu", enabled=False)


# ----------------------------------------------------------------------------------------------
# The loss

def loss_by_hand(logp, old, adv, mask, expert, n_tokens, cl, ch, gamma, beta, ref):
    total = 0.0
    for i in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if not mask[i][t]:
                continue
            lp, a = logp[i][t], adv[i]
            if expert[i]:
                p = torch.exp(lp)
                term = a * p / (p + gamma)
            else:
                r = torch.exp(lp - old[i][t])
                term = torch.minimum(r * a, torch.clamp(r, 1 - cl, 1 + ch) * a)
                if beta:
                    d = ref[i][t] - lp
                    term = term - beta * (torch.exp(d) - d - 1)
            total = total - term
    return total / n_tokens


def fixed_tensors():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g, dtype=torch.float64) * 3
    old = logp + (torch.rand(4, 5, generator=g, dtype=torch.float64) - 0.5)  # ratios well outside [0.8, 1.28]
    ref = logp + (torch.rand(4, 5, generator=g, dtype=torch.float64) - 0.5)
    adv = torch.tensor([0.7, -0.4, -0.9, 0.6], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.float64)
    expert = torch.tensor([False, False, False, True])
    return logp, old, adv, mask, expert, ref


def test_device_flag():
    assert train_grpo.pick_device("cpu") == CPU
    with pytest.raises(SystemExit, match="--device gpu: not cpu, cuda or cuda:N"):
        train_grpo.pick_device("gpu")
    if not torch.cuda.is_available():
        assert train_grpo.pick_device("") == CPU
        with pytest.raises(SystemExit, match="no CUDA on this machine"):
            train_grpo.pick_device("cuda")


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_loss_matches_the_written_out_formula(beta):
    logp, old, adv, mask, expert, ref = fixed_tensors()
    n = 50.0  # the step's token count, fixed before accumulation (more than this group's 17)
    loss, stats = train_grpo.grpo_loss(logp, old, adv, mask, expert, n, 0.2, 0.28, 0.1, beta, ref)
    by_hand = loss_by_hand(logp, old, adv, mask, expert, n, 0.2, 0.28, 0.1, beta, ref)
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-12)
    ratio = torch.exp(logp - old)
    on = mask.bool() & ~expert[:, None]
    clipped = (((ratio < 0.8) & (adv[:, None] < 0)) | ((ratio > 1.28) & (adv[:, None] > 0))) & on
    assert stats["clip_tokens"] == clipped.sum().item() > 0 and stats["on_tokens"] == on.sum().item()
    # -inf outside the mask (a banned pad token after the end of turn) changes nothing, gradient included
    x = logp.clone().requires_grad_(True)
    padded = torch.where(mask.bool(), x, torch.tensor(float("-inf"), dtype=x.dtype))
    l2, _ = train_grpo.grpo_loss(padded, torch.where(mask.bool(), old, -torch.inf), adv, mask, expert, n,
                                 0.2, 0.28, 0.1, beta, ref)
    l2.backward()
    assert l2.item() == pytest.approx(loss.item(), rel=1e-12) and torch.isfinite(x.grad).all()


def test_loss_gradient_check_and_token_level_normalisation():
    logp, old, adv, mask, expert, ref = fixed_tensors()
    x = logp.clone().requires_grad_(True)
    f = lambda lp: train_grpo.grpo_loss(lp, old, adv, mask, expert, 17.0, 0.2, 0.28, 0.1, 0.05, ref)[0]
    assert torch.autograd.gradcheck(f, (x,))
    f(x).backward()
    # the clipped tokens carry no gradient; the expert's tokens get a * gamma * p / (p + gamma)^2 / n
    ratio = torch.exp(logp - old)
    p = torch.exp(logp[3])
    assert torch.allclose(x.grad[3] * 17, -(adv[3] * 0.1 * p / (p + 0.1) ** 2) * mask[3])
    dead = ((ratio > 1.28) & (adv[:, None] > 0)) & mask.bool() & ~expert[:, None]
    assert dead.any()
    kl_only = -0.05 * (-torch.exp(ref - logp) + 1) / 17  # d/dlogp of the KL term alone
    assert torch.allclose(x.grad[dead], (-kl_only)[dead])
    # token-level: two groups summed with the step's count == one loss over their concatenation
    a = train_grpo.grpo_loss(logp[:2], old[:2], adv[:2], mask[:2], expert[:2], 17.0)[0]
    b = train_grpo.grpo_loss(logp[2:], old[2:], adv[2:], mask[2:], expert[2:], 17.0)[0]
    whole = train_grpo.grpo_loss(logp, old, adv, mask, expert, 17.0)[0]
    assert (a + b).item() == pytest.approx(whole.item(), rel=1e-12)


def test_advantages_dr_grpo_and_std():
    a = train_grpo.advantages([1.0, 0.0, 0.0, 1.0], std_scale=False, baseline_n=4)
    assert a.tolist() == [0.5, -0.5, -0.5, 0.5]
    s = train_grpo.advantages([1.0, 0.0, 0.0, 1.0], std_scale=True, baseline_n=4)
    assert s[0].item() == pytest.approx(0.5 / (torch.tensor([1.0, 0, 0, 1]).std().item() + 1e-4))
    # the expert last, out of the baseline (--expert-baseline policy): an all-wrong group's samples get
    # no push at all (their shared tokens, the reply format, are not pushed down), the expert gets +1
    assert train_grpo.advantages([0.0, 0.0, 0.0, 1.0], std_scale=False, baseline_n=3).tolist() == [0, 0, 0, 1]
    assert train_grpo.advantages([0.0, 0.0, 0.0, 1.0], std_scale=False).tolist() == [-.25, -.25, -.25, .75]


def test_rewards_are_metrics_components(toy_data):
    ep = metrics.load_dataset(toy_data)[0]
    step = ep["steps"][1]  # type "word" into mark 4
    gold = metrics.format_output(step["guide"], step["action"], "som", "guide_first", ep["viewport"])
    c = train_grpo.reward_components(gold, step, "som", "guide_first", ep["viewport"])
    assert (c["format"], c["op"], c["element"], c["accuracy"]) == (1, 1, 1, 1)
    wrong = train_grpo.reward_components('Action: type(3, "other words")', step, "som", "guide_first", ep["viewport"])
    # "type other words" against "type word": one token of three and two
    assert (wrong["format"], wrong["op"], wrong["element"], wrong["accuracy"]) == (0, 0.4, 0, 0)
    garbage = train_grpo.reward_components("\x00 nonsense", step, "som", "guide_first", ep["viewport"])
    assert sum(v for k, v in garbage.items() if not k.startswith("_")) == 0


def test_a_wrong_op_earns_no_value_credit(toy_data):
    """The reward's op is metrics.op_f1: a click where the gold step stops with no answer earns nothing for
    the op, though both values are empty (the reward's old value F1 of two empty strings gave it 1)."""
    ep = metrics.load_dataset(toy_data)[0]
    click = next(s for s in ep["steps"] if s["action"]["op"] == "click")
    stop = dict(click, action={"op": "stop", "mark": None, "point": None, "value": ""})
    reply = metrics.format_output("Go.", click["action"], "som", "guide_first", ep["viewport"])
    c = train_grpo.reward_components(reply, stop, "som", "guide_first", ep["viewport"])
    assert c["op"] == 0 and c["accuracy"] == 0
    args = grpo_args()
    assert train_grpo.total_reward(c, args, False) == pytest.approx(args.w_format * c["format"])
    right = train_grpo.reward_components(reply, click, "som", "guide_first", ep["viewport"])
    assert train_grpo.total_reward(right | {"guide": 1.0}, args, True) == pytest.approx(1.0)  # the defaults sum to 1


def test_reward_accuracy_is_evaluations_step_success(toy_data):
    """One definition of the step score: the reward's accuracy, element, format and op are metrics.score_step's
    on the same replies (right, wrong mark, wrong value, wrong op, a point, garbage), in every order."""
    eps = metrics.load_dataset(toy_data)
    replies = ['Action: type(4, "word")', 'Action: type(3, "word")', 'Action: type(4, "other")', "Action: click(4)",
               "Action: stop()", "Action: click(500, 500)", "", "\x00 nonsense", "Guide: Hi.\nAction: click(1)"]
    seen = set()
    for ep in eps:
        for step in ep["steps"]:
            gold = metrics.format_output(step["guide"], step["action"], "som", "guide_first", ep["viewport"])
            for grounding in metrics.GROUNDINGS:
                for order in metrics.ORDERS:
                    for text in [gold, *replies]:
                        c = train_grpo.reward_components(text, step, grounding, order, ep["viewport"])
                        s = metrics.score_step(text, step, grounding, order, ep["viewport"])
                        assert (c["accuracy"], c["element"], c["format"], c["op"]) == \
                            (s["step"], s["element"], s["format"], s["op_f1"])
                        seen.add(s["step"])
    assert seen == {0, 1}


# ----------------------------------------------------------------------------------------------
# Rollouts and groups on tiny models

def grpo_args(**kw):
    argv = ["--data", "x", "--ckpt", "x", "--out", "x"]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return train_grpo.parse_args(argv)


OPTS = {"grounding": "som", "order": "guide_first", "elements": "none"}


def policy_for(path, opts=OPTS, **args):
    """A tiny checkpoint loaded as main loads it, as train_grpo's Policy (no DDP, no autocast)."""
    model, processor, _ = train_grpo.load_model(path, CPU, dtype=torch.float32)
    stops = train_grpo.stop_ids(model, processor)
    return train_grpo.Policy(model, model, processor, stops, train_grpo.banned_ids(processor, stops), NO_AUTOCAST,
                             dict(opts), grpo_args(**args))


def usable(toy_data, order="guide_first"):
    return metrics.usable_steps(metrics.load_dataset(toy_data), "all", "auto", order)


def full_rows_logprobs(policy, prompt_text, image, completions):
    """The reference the trainer's fast paths must equal: every row its own full sequence, the prompt
    prefilled once per row. -> log p(completion token t | prompt, tokens < t) [n, T], teacher-forced,
    and the completion mask. Every per-token tensor of the prompt (Qwen's mm_token_type_ids, ...) is
    extended over the completion with 0."""
    processor = policy.processor
    n, T = completions.shape
    enc = processor(text=[prompt_text] * n, images=metrics.images_arg(processor, [image] * n), return_tensors="pt")
    L = enc["input_ids"].shape[1]
    mask, _ = train_grpo.completion_mask(completions, policy.stops)
    batch = dict(enc)
    for key, v in enc.items():
        if torch.is_tensor(v) and v.shape[:2] == (n, L):
            extra = mask.to(v.dtype) if key == "attention_mask" else torch.zeros(n, T, dtype=v.dtype)
            batch[key] = torch.cat([v, extra], 1)
    batch["input_ids"] = torch.cat([enc["input_ids"], torch.where(mask.bool(), completions,
                                                                  processor.tokenizer.pad_token_id)], 1)
    logits = policy.model(**batch, logits_to_keep=T + 1).logits[:, :-1]
    logp = train_grpo.policy_logprobs(logits, policy.banned, policy.args.temperature)
    return logp.gather(-1, batch["input_ids"][:, -T:, None])[..., 0], mask


def prompts_of(policy, items):
    return map(list, zip(*(metrics.chat_prompt(policy.processor, ep, k, OPTS) for ep, k in items)))


def scored(policy, ep, k, sampled):
    """What main's loop does with one prompt's samples (2-4): rewards with the expert, advantages, the drop
    verdict. -> (the group, its loss unit)."""
    args = policy.args
    group = train_grpo.score_replies(policy, (ep, k), sampled)
    group.adv = train_grpo.advantages(group.rewards, args.std_scale,
                                      args.group_size if args.expert_baseline == "policy" else None)
    group.drop = train_grpo.drop_group(group.accuracy, group.rewards, args.drop_groups)
    return group, train_grpo.offline_unit(policy, group)


@pytest.mark.parametrize("arch", train_sft.TINY_ARCHS)
def test_rollout_log_probs_equal_teacher_forced(tiny_models, toy_data, arch):
    torch.manual_seed(0)
    policy = policy_for(tiny_models[arch], group_size=3, max_new_tokens=12, temperature=0.7)
    prompts, images = prompts_of(policy, usable(toy_data)[:2])
    image_token = "<image>" if arch == "idefics3" else "<|image_pad|>"
    assert policy.processor.tokenizer.convert_tokens_to_ids(image_token) in policy.banned.tolist()
    ids, roll, texts = train_grpo.sample(policy, prompts, images, 3)
    assert not torch.isin(ids, policy.banned).any()
    assert ids.shape[0] == 6 and len(texts) == 6
    for i in range(2):  # each prompt's group, unpadded, teacher-forced
        rows = ids[i * 3:(i + 1) * 3]
        with torch.no_grad():
            tf, mask = full_rows_logprobs(policy, prompts[i], images[i], rows)
        m = mask.bool()
        assert m.any()
        assert torch.allclose(tf[m], roll[i * 3:(i + 1) * 3][m], atol=1e-4)


def generate_per_sample(policy, prompts, images, n):
    """The rollout before prefill-once: one generate call over every prompt repeated n times (each
    row prefills its own copy of the prompt), greedy, with the same stops, pad and banned ids."""
    from transformers import GenerationConfig
    processor = policy.processor
    enc = processor(text=[p for p in prompts for _ in range(n)],
                    images=metrics.images_arg(processor, [im for im in images for _ in range(n)]),
                    return_tensors="pt", padding=True, padding_side="left")
    gen = GenerationConfig(do_sample=False, max_new_tokens=policy.args.max_new_tokens,
                           eos_token_id=policy.stops.tolist(), pad_token_id=processor.tokenizer.pad_token_id,
                           suppress_tokens=policy.banned.tolist())
    return policy.raw.generate(**enc, generation_config=gen)[:, enc["input_ids"].shape[1]:]


def replies(ids, stops):
    mask, _ = train_grpo.completion_mask(ids, stops)
    return [row[m.bool()].tolist() for row, m in zip(ids, mask)]


@pytest.mark.parametrize("arch", train_sft.TINY_ARCHS)
def test_prompt_prefilled_once_equals_one_prefill_per_sample(tiny_models, toy_data, arch):
    """sample() prefills each prompt once and repeats its KV cache for the G samples: on a left-padded
    batch (prompts of two lengths: Qwen-VL's rope offsets differ per prompt) and on one prompt (no
    padding, no mask), its greedy replies are generate's with one prefill per sample, its log-probs
    those of every full row teacher-forced; sampling is seeded."""
    policy = policy_for(tiny_models[arch], group_size=3, max_new_tokens=24)
    items = usable(toy_data)
    prompts, images = prompts_of(policy, [items[0], items[1]])
    lengths = {len(policy.processor(text=[p], images=metrics.images_arg(policy.processor, [im]))["input_ids"][0])
               for p, im in zip(prompts, images)}
    assert len(lengths) == 2  # the batch is padded
    masks = []  # the attention mask of every forward pass: none at all when the batch has no padding
    policy.raw.register_forward_pre_hook(lambda m, a, kw: masks.append(kw.get("attention_mask")), with_kwargs=True)
    for P in (2, 1):
        masks.clear()
        ids, logp, _ = train_grpo.sample(policy, prompts[:P], images[:P], 3, greedy=True)
        assert all(m is None for m in masks) == (P == 1) and len(masks) == ids.shape[1]
        with torch.no_grad():
            reference = generate_per_sample(policy, prompts[:P], images[:P], 3)
        ours = replies(ids, policy.stops)
        assert ours == replies(reference, policy.stops) and min(map(len, ours)) > 1
        for i in range(P):
            with torch.no_grad():
                tf, mask = full_rows_logprobs(policy, prompts[i], images[i], ids[i * 3:(i + 1) * 3])
            m = mask.bool()
            assert torch.allclose(logp[i * 3:(i + 1) * 3][m], tf[m], atol=1e-5, rtol=0)
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append(train_grpo.sample(policy, prompts, images, 3)[:2])
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert len({tuple(r) for r in replies(runs[0][0], policy.stops)}) > 1  # the samples of a prompt differ


def test_expert_row_is_the_policys_format_with_the_right_mask(tiny_models, toy_data):
    torch.manual_seed(0)
    policy = policy_for(tiny_models["qwen2_5_vl"], group_size=3, max_new_tokens=10)
    ep, k = usable(toy_data)[1]
    sampled = train_grpo.offline_rollout(policy, [(ep, k)])[0]
    roll = sampled["logp"]
    group, g = scored(policy, ep, k, sampled)
    rewards = group.rewards
    assert g["expert"].tolist() == [False, False, False, True] and len(rewards) == 4
    tok = policy.processor.tokenizer
    step = ep["steps"][k]
    target = metrics.format_output(step["guide"], step["action"], "som", "guide_first", ep["viewport"])
    n = int(g["mask"][3].sum())
    expert_tokens = g["inputs"]["ids"][3][:n].tolist()
    assert tok.decode(expert_tokens) == target + tok.eos_token  # exactly the SFT target, end of turn included
    assert g["mask"][3].tolist() == [1.0] * n + [0.0] * (g["mask"].shape[1] - n)
    assert g["inputs"]["ids"][3][n:].tolist() == [tok.pad_token_id] * (g["mask"].shape[1] - n)
    assert rewards[3] == pytest.approx(1.0) and group.accuracy[3] == 1  # every component right, guide ROUGE 1
    assert not group.drop["dropped"]  # a random model's samples are all wrong; the expert gives the group its signal
    assert g["adv"][3] > 0 > g["adv"][0]

    def group_with(expert, **more):
        changed = dataclasses.replace(policy, args=grpo_args(expert=expert, group_size=3, **more))
        group, unit = scored(changed, ep, k, sampled)
        return unit | group.drop
    # the policy's samples alone as the baseline: they sum to zero, the expert gets its lead over them
    own = group_with("always", expert_baseline="policy")
    assert own["adv"][:3].sum().item() == pytest.approx(0, abs=1e-6)
    assert own["adv"][3].item() == pytest.approx(rewards[3] - sum(rewards[:3]) / 3)
    # --truncated zero keeps a cut sample's tokens: only those it sampled, not padding up to the expert's length
    cut = group_with("always", truncated="zero")
    assert cut["mask"][:3, roll.shape[1]:].sum() == 0 and cut["mask"][3].sum() == n
    off = group_with("off")
    assert not off["expert"].any() and off["dropped"]  # without the expert: nothing right, nothing to learn
    wrong_only = group_with("when_wrong")
    assert wrong_only["expert"].tolist() == [False, False, False, True]


def test_drop_groups_accuracy_or_reward(tiny_models, toy_data):
    """--drop-groups: a group whose members have the same action accuracy (all wrong) but different shaped
    rewards (one reply has the right op and a well-formed line) is dropped under `accuracy` (DAPO's rule,
    the default) and kept under `reward`; a group whose rewards are all equal is dropped under both."""
    policy = policy_for(tiny_models["qwen2_5_vl"], group_size=3, max_new_tokens=16)
    ep, k = usable(toy_data)[1]  # type "word" into mark 4
    text, image = metrics.chat_prompt(policy.processor, ep, k, OPTS)
    tok = policy.processor.tokenizer

    def group(rule, texts):
        rows = [torch.tensor(tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]) for t in texts]
        ids = torch.nn.utils.rnn.pad_sequence(rows, True, tok.pad_token_id)
        rollout_logp = torch.full(ids.shape, -1.0)
        args = grpo_args(expert="off", group_size=3, drop_groups=rule)
        sampled = {"prompt": text, "image": image, "ids": ids, "logp": rollout_logp, "texts": texts}
        return scored(dataclasses.replace(policy, args=args), ep, k, sampled)[0]
    partly_right = ['Guide: Type it.\nAction: type(2, "zzz")', "nonsense", "more nonsense"]
    for rule, dropped in (("accuracy", True), ("reward", False)):
        g = group(rule, partly_right)
        assert g.accuracy == [0, 0, 0] and g.rewards[0] > g.rewards[1] == g.rewards[2]
        assert g.drop["same_accuracy"] and not g.drop["same_reward"] and g.drop["dropped"] == dropped
        assert g.adv[0] > 0 > g.adv[1]  # the signal `reward` keeps
    for rule in ("accuracy", "reward"):
        g = group(rule, ["nonsense", "more nonsense", "still nonsense"])
        assert g.drop["same_accuracy"] and g.drop["same_reward"] and g.drop["dropped"]


@pytest.mark.parametrize("arch", train_sft.TINY_ARCHS)
def test_shared_prefix_pass_equals_full_rows_with_gradients(tiny_models, toy_data, arch, monkeypatch):
    """The update's pass (prompt once, its cache repeated, log-probs through the LM head in chunks)
    gives the log-probs and gradients of every full row, and so does it under gradient checkpointing."""
    monkeypatch.setattr(train_grpo, "chunked_logprobs", functools.partial(train_grpo.chunked_logprobs, size=7))
    torch.manual_seed(0)
    policy = policy_for(tiny_models[arch], group_size=4, max_new_tokens=10)
    ep, k = usable(toy_data)[0]
    text, image = metrics.chat_prompt(policy.processor, ep, k, OPTS)
    ids, _, _ = train_grpo.sample(policy, [text], [image], 4)
    inputs, mask, _ = train_grpo.group_inputs(policy, text, image, ids)

    def grads(p, fn):
        p.model.zero_grad()
        logp = fn(p)
        torch.where(mask.bool(), logp, 0.0).sum().backward()
        return logp.detach(), {n: q.grad.clone() for n, q in p.model.named_parameters() if q.grad is not None}
    full, g_full = grads(policy, lambda p: full_rows_logprobs(p, text, image, ids)[0])
    # eager attention: an explicit causal mask, which a replay finding a stale cache (longer keys) would not fit
    model, _, _ = train_grpo.load_model(tiny_models[arch], CPU, dtype=torch.float32, attn="eager")
    checkpointed = dataclasses.replace(policy, model=model, raw=model)
    train_grpo.enable_checkpointing(checkpointed.raw)
    checkpointed.raw.train()  # checkpointing acts in training mode only
    m = mask.bool()
    for p in (policy, checkpointed):
        shared, g_shared = grads(p, lambda p: train_grpo.shared_prefix_logprobs(p, inputs, mask))
        assert torch.allclose(full[m], shared[m], atol=1e-5)
        assert g_full.keys() == g_shared.keys() and len(g_full) > 10  # the vision tower too, through the prompt's cache
        assert all(torch.allclose(g_full[n], g_shared[n], atol=1e-4) for n in g_full)


# ----------------------------------------------------------------------------------------------
# End to end

def grpo(out, ckpt, data, *extra):
    train_grpo.main(["--ckpt", ckpt, "--data", data, "--out", out, "--split", "all", "--no-progress", *map(str, extra)])
    with open(out + ".log.jsonl") as f:
        return [json.loads(l) for l in f]


def sampled_scores(path, data, n=8, seed=123):
    """Mean total reward and action accuracy of n samples (T = 1) on every training prompt."""
    torch.manual_seed(seed)
    opts = {"grounding": "som", "order": "action_only", "elements": "none"}
    policy = policy_for(path, opts, max_new_tokens=16, order="action_only")
    items = usable(data, "action_only")
    rewards, acc = [], []
    for b in range(0, len(items), 8):
        chunk = items[b:b + 8]
        prompts, images = map(list, zip(*(metrics.chat_prompt(policy.processor, ep, k, opts) for ep, k in chunk)))
        _, _, texts = train_grpo.sample(policy, prompts, images, n)
        for i, (ep, k) in enumerate(chunk):
            for text in texts[i * n:(i + 1) * n]:
                c = train_grpo.reward_components(text, ep["steps"][k], "som", "action_only", ep["viewport"])
                rewards.append(train_grpo.total_reward(c, policy.args, False))
                acc.append(c["accuracy"])
    return sum(rewards) / len(rewards), sum(acc) / len(acc)


def test_learning_signal_raises_reward_and_accuracy(tiny_models, toy_data, tmp_path):
    """A weak policy (a short SFT: a right reply in ~3% of samples) gets better at its own training
    prompts in a bounded number of GRPO steps (measured on 192 fresh samples before and after)."""
    import train_sft
    base, tuned = str(tmp_path / "sft"), str(tmp_path / "grpo")
    train_sft.main(["--data", toy_data, "--ckpt", tiny_models["qwen2_5_vl"], "--out", base, "--split", "all",
                    "--val-split", "", "--order", "action_only", "--batch-size", "8", "--lr", "1e-2", "--warmup", "5",
                    "--max-steps", "50", "--no-progress"])
    log = grpo(tuned, base, toy_data, "--group-size", 4, "--prompts-per-step", 4, "--max-new-tokens", 16, "--lr", 1e-3,
               "--max-steps", 30, "--save-every", 100)
    assert all(r["expert_in"] == 4 for r in log)
    before, after = sampled_scores(base, toy_data), sampled_scores(tuned, toy_data)
    assert after[0] > before[0] + 0.05, (before, after)
    assert after[1] > before[1] + 0.05, (before, after)


class Crash(Exception):
    pass


def test_resume_is_bit_exact(tiny_models, toy_data, tmp_path, monkeypatch, capsys):
    """A run killed after its step-2 save and resumed ends with the weights and log of one run straight
    through. The kill is the worst a save allows -- between metrics.publish_dir's two renames, when only
    <out>.old and the finished <out>.tmp are on disk -- and the checkpoint names its options file as
    checkpoints did before train_config.json (sft_config.json): --resume puts <out> back from .old and
    reads the options there (the run is action_first; the resuming command line does not say so)."""
    opts = ["--group-size", 3, "--prompts-per-step", 2, "--max-new-tokens", 10, "--lr", 1e-3, "--max-steps", 4,
            "--save-every", 2]
    whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
    grpo(whole, tiny_models["qwen2_5_vl"], toy_data, *opts, "--order", "action_first")
    real = train_grpo.save_checkpoint

    def save_then_crash(*a):
        real(*a)
        raise Crash()

    monkeypatch.setattr(train_grpo, "save_checkpoint", save_then_crash)
    with pytest.raises(Crash):
        grpo(split, tiny_models["qwen2_5_vl"], toy_data, *opts, "--order", "action_first")
    monkeypatch.setattr(train_grpo, "save_checkpoint", real)
    os.replace(os.path.join(split, metrics.TRAIN_CONFIG), os.path.join(split, "sft_config.json"))
    shutil.copytree(split, split + ".tmp")
    os.replace(split, split + ".old")
    capsys.readouterr()
    log = grpo(split, tiny_models["qwen2_5_vl"], toy_data, *opts, "--resume")
    out = capsys.readouterr()
    assert "restored from" in out.err and "resumed" in out.out and '"order": "action_first"' in out.out
    from safetensors.torch import load_file
    a, b = load_file(os.path.join(whole, "model.safetensors")), load_file(os.path.join(split, "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    with open(whole + ".log.jsonl") as f:
        assert [json.loads(line)["reward"] for line in f] == [r["reward"] for r in log]
    assert not os.path.exists(split + ".old") and not os.path.exists(split + ".tmp")
    assert metrics.trained_options(split)["order"] == "action_first"
    assert os.path.exists(os.path.join(split, metrics.TRAIN_CONFIG))  # written under its new name from now on


def test_bad_checkpoints_give_clear_errors(tiny_models, toy_data, tmp_path):
    with pytest.raises(SystemExit, match="not a Hugging Face checkpoint"):
        grpo(str(tmp_path / "o"), str(tmp_path / "missing"), toy_data, "--max-steps", 1)
    broken = str(tmp_path / "broken")
    shutil.copytree(tiny_models["qwen2_5_vl"], broken)
    with open(os.path.join(broken, "model.safetensors"), "r+b") as f:
        f.truncate(1000)
    with pytest.raises(SystemExit, match="cannot load the checkpoint"):
        grpo(str(tmp_path / "o"), broken, toy_data, "--max-steps", 1)
    with pytest.raises(SystemExit, match="nothing to resume"):
        grpo(str(tmp_path / "fresh"), tiny_models["qwen2_5_vl"], toy_data, "--resume", "--max-steps", 1)
    out = str(tmp_path / "run")
    grpo(out, tiny_models["qwen2_5_vl"], toy_data, "--group-size", 2, "--prompts-per-step", 1, "--max-new-tokens", 4,
         "--max-steps", 1)
    with open(os.path.join(out, "trainer_state.pt"), "wb") as f:
        f.write(b"not a torch file")
    with pytest.raises(SystemExit, match="unreadable"):
        grpo(out, tiny_models["qwen2_5_vl"], toy_data, "--resume", "--max-steps", 2)


def test_resume_refuses_an_optimizer_state_that_does_not_fit(tiny_models, toy_data, tmp_path, capsys):
    """train_grpo.py's --resume checks the saved optimizer state against the model as train_sft.py does (it called
    optimizer.load_state_dict unguarded: a traceback), and leaves the checkpoint as it was."""
    out = str(tmp_path / "run")
    opts = ["--group-size", 2, "--prompts-per-step", 1, "--max-new-tokens", 4]
    grpo(out, tiny_models["qwen2_5_vl"], toy_data, *opts, "--max-steps", 1)
    path = os.path.join(out, "trainer_state.pt")
    state = torch.load(path, weights_only=True)
    first = next(k for k, v in state["optimizer"]["state"].items() if v["exp_avg"].dim() == 2)
    shrunk = {k: {**v, "exp_avg": torch.zeros(3) if k == first else v["exp_avg"]}
              for k, v in state["optimizer"]["state"].items()}
    cases = [({"state": {}, "param_groups": []}, "(0 parameter groups of [] tensors, where this model's"),
             ({**state["optimizer"], "state": shrunk}, f"parameter {first}'s exp_avg is [3], the parameter")]
    for optimizer, why in cases:
        torch.save({**state, "optimizer": optimizer}, path)
        before = open(path, "rb").read()
        with pytest.raises(SystemExit) as e:
            grpo(out, tiny_models["qwen2_5_vl"], toy_data, *opts, "--resume", "--max-steps", 2)
        assert str(e.value).startswith(f"--resume: {path}: the optimizer state does not fit this model ")
        assert why in str(e.value), str(e.value)
        assert open(path, "rb").read() == before and "resumed" not in capsys.readouterr().out


def torchrun(ckpt, data, out, *extra):
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train_grpo.py")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script,
                           "--ckpt", ckpt, "--data", data, "--split", "all", "--out", out, "--no-progress",
                           "--group-size", "2", "--prompts-per-step", "2", "--max-new-tokens", "8", "--device", "cpu",
                           *extra], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]  # the ranks' tracebacks, not only the exit status
    with open(out + ".log.jsonl") as f:
        return [json.loads(line) for line in f]


def test_torchrun_two_cpu_ranks(tiny_models, toy_data, tmp_path):
    """DDP on two gloo ranks: each rank rolls out its own share of the step's prompts; the run ends
    with one checkpoint and one log line per step (written by rank 0); it resumes on two ranks, after
    a save cut short too (rank 0 alone puts the checkpoint back before the ranks read it)."""
    out = str(tmp_path / "ddp")
    log = torchrun(tiny_models["qwen2_5_vl"], toy_data, out, "--max-steps", "2")
    assert [r["step"] for r in log] == [1, 2] and all(r["expert_in"] == 1 for r in log)  # rank 0's one prompt
    assert os.path.exists(os.path.join(out, "model.safetensors"))
    states = torch.load(os.path.join(out, "trainer_state.pt"), weights_only=True)["rng"]  # what --resume reads
    assert len(states) == 2 and not torch.equal(states[0]["torch"], states[1]["torch"])  # each rank's own stream
    os.replace(out, out + ".old")  # killed between publish_dir's renames
    log = torchrun(tiny_models["qwen2_5_vl"], toy_data, out, "--max-steps", "3", "--resume")
    assert [r["step"] for r in log] == [1, 2, 3] and not os.path.exists(out + ".old")
    assert torch.load(os.path.join(out, "trainer_state.pt"), weights_only=True)["step"] == 3
    # without the expert every group of a random model is dropped: each rank runs a spare group with its
    # loss times zero, so DDP's gradient all-reduce still meets on every rank (it hung before)
    log = torchrun(tiny_models["qwen2_5_vl"], toy_data, out + "-noexp", "--max-steps", "2", "--expert", "off")
    assert [r["dropped_frac"] for r in log] == [1.0, 1.0]


# ----------------------------------------------------------------------------------------------
# Live mode

def live_units(policy, expert, trajectories):
    """main's 2-4 for one live (task, seed), then its loss units. -> (group, units)."""
    args = policy.args
    group = train_grpo.score_episodes(policy, expert, trajectories)
    group.adv = train_grpo.advantages(group.rewards, args.std_scale,
                                      len(trajectories) if args.expert_baseline == "policy" else None)
    group.drop = train_grpo.drop_group(group.accuracy, group.rewards, args.drop_groups)
    return group, train_grpo.loss_units(policy, group)


def test_live_groups_give_every_step_its_trajectorys_advantage(tiny_models, toy_data):
    policy = policy_for(tiny_models["qwen2_5_vl"], env="live")
    expert = metrics.load_dataset(toy_data)[0]
    text, image = metrics.chat_prompt(policy.processor, expert, 0, OPTS)
    tok = policy.processor.tokenizer

    def traj(success, n_steps, truncated_step=None):
        reply = tok("Action: click(1)", add_special_tokens=False)["input_ids"]
        ids = [torch.tensor(reply + ([] if s == truncated_step else [tok.eos_token_id])) for s in range(n_steps)]
        steps = [{"prompt": text, "image": image, "ids": i, "logp": torch.full((len(i),), -1.0), "reply": ""}
                 for i in ids]
        return {"success": success, "steps": [{"action": None}] * n_steps}, steps

    group, units = live_units(policy, expert, [traj(True, 2), traj(False, 3)])
    # rewards: 1, 0 and the expert's 1 -> mean 2/3: advantages +1/3, -2/3, +1/3, on every step of each
    assert len(units) == 2 + 3 + len(expert["steps"])
    advs = [round(u["adv"].item(), 4) for u in units]
    assert advs == [0.3333] * 2 + [-0.6667] * 3 + [0.3333] * len(expert["steps"])
    assert [bool(u["expert"]) for u in units] == [False] * 5 + [True] * len(expert["steps"])
    assert group.log["success"] == 1 and group.expert == [False, False, True] and not group.drop["dropped"]
    # without the expert, a group where every episode failed teaches nothing
    no_expert = dataclasses.replace(policy, args=grpo_args(expert="off", env="live"))
    group, units = live_units(no_expert, expert, [traj(False, 2), traj(False, 1)])
    assert group.drop["dropped"] == 1 and units[0]["adv"].tolist() == [0.0]  # what a DDP rank with nothing runs (x 0)
    # --truncated zero: a reply cut by --max-new-tokens loses its own advantage, not its trajectory's other steps'
    zero = dataclasses.replace(policy, args=grpo_args(truncated="zero", expert="off", env="live"))
    _, units = live_units(zero, expert, [traj(True, 3, truncated_step=1), traj(False, 1)])
    assert [u["adv"].item() for u in units] == [0.5, 0.0, 0.5, -0.5] and all(u["mask"].all() for u in units)


def miniwob_expert_data(tmp_path):
    import collect
    data = str(tmp_path / "mw")
    collect.main(["--suite", "miniwob", "--tasks", "click-button", "--episodes", "1", "--seed", "3", "--out", data,
                  "--no-progress"])
    eps = metrics.load_dataset(data)
    for ep in eps:  # guides as annotate.py's template would write them (a fixture, not a stage)
        for s in ep["steps"]:
            s["guide"] = "Click the button." if s["action"]["op"] == "click" else "The task is done."
            s["guide_status"] = "auto"
    metrics.write_dataset(data, eps)
    return data


LIVE = ("--env", "live", "--suite", "miniwob", "--prompts-per-step", 1, "--group-size", 2, "--episode-steps", 2,
        "--max-new-tokens", 12)


@pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")
def test_live_mode_runs_episodes_in_the_browser(tiny_models, tmp_path, monkeypatch):
    """Two GRPO steps in MiniWoB++ episodes (G = 2 per task and seed) from a recorded expert episode. The
    rollouts reach the update in memory: step 1's update, redone from its rollouts alone on the starting
    model, gives the very weights the run saved; only a --dump-every step writes its episodes to disk."""
    data = miniwob_expert_data(tmp_path)
    out = str(tmp_path / "g")
    seen = []
    real = train_grpo.LiveRollouts.rollout
    monkeypatch.setattr(train_grpo.LiveRollouts, "rollout",
                        lambda self, prompts, step: seen.append((prompts, real(self, prompts, step))) or seen[-1][1])
    monkeypatch.setattr(train_grpo, "save_checkpoint", functools.partial(first_save_only, train_grpo.save_checkpoint))
    log = grpo(out, tiny_models["qwen2_5_vl"], data, *LIVE, "--max-steps", 2, "--dump-every", 5, "--save-every", 1)
    assert [r["step"] for r in log] == [1, 2]
    assert all(r["success"] == 0 and r["expert_in"] == 1 and r["dropped_frac"] == 0 and 1 <= r["episode_steps"] <= 2
               for r in log)
    # the live log: invalid replies (a share of the steps), the sampled tokens' entropy, each task's successes
    assert all(0 <= r["invalid"] <= 1 and r["entropy"] > 0 and r["kl_ref"] is None for r in log)
    assert all(r["task_success"] == {"click-button": [0.0, 0.0]} for r in log)
    with open(out + ".samples.jsonl") as f:
        dumps = [json.loads(l) for l in f]
    assert [d["step"] for d in dumps] == [1] and len(dumps[0]["replies"]) == 2
    assert os.path.isdir(out + ".rollouts/step-1/r1") and not os.path.exists(out + ".rollouts/step-2")
    # step 1 again, from its rollouts in memory
    args = train_grpo.parse_args(["--ckpt", tiny_models["qwen2_5_vl"], "--data", data, "--out", str(tmp_path / "again"),
                                  "--split", "all", *map(str, LIVE)])
    policy, optimizer, _, _, _, _ = train_grpo.setup(args)
    prompts, samples = seen[0]
    groups = []
    for prompt, sampled in zip(prompts, samples):
        group = train_grpo.score_episodes(policy, prompt, sampled)
        group.adv = train_grpo.advantages(group.rewards, args.std_scale)
        group.drop = train_grpo.drop_group(group.accuracy, group.rewards, args.drop_groups)
        groups.append(group)
    train_grpo.update(policy, optimizer, groups, None, args.lr)
    saved = train_grpo.load_model(out, CPU, dtype=torch.float32)[0].state_dict()
    mine = policy.raw.state_dict()
    assert mine.keys() == saved.keys() and len(mine) > 10 and all(torch.equal(saved[k], v) for k, v in mine.items())


def test_curriculum_draws_the_tasks_whose_success_is_between_0_and_1(tmp_path):
    items = [{"task": t, "seed": s} for t in "abc" for s in range(4)]
    log = tmp_path / "g.log.jsonl"
    c = train_grpo.Curriculum(items, 2, 0, str(log), 0)
    assert {e["task"] for _ in range(20) for e in next(c)} == {"a", "b", "c"}  # nothing measured yet: all open
    c.record("a", [1.0] * 4)    # a group's worth of successes: not yet judged
    assert c.open("a") and {e["task"] for _ in range(20) for e in next(c)} == {"a", "b", "c"}
    c.record("a", [1.0] * 12)   # solved, on `window` episodes
    c.record("b", [0.0] * 16)   # never
    c.record("c", [1.0, 0.0])   # a group of these tells better from worse
    assert {e["task"] for _ in range(20) for e in next(c)} == {"c"}
    c.record("a", [0.0])        # 'a' slips: open again
    assert {e["task"] for _ in range(20) for e in next(c)} == {"a", "c"}
    c.record("a", [1.0] * 16)   # the running success forgets after `window` episodes
    c.record("c", [0.0] * 16)
    assert c.open("b") is False and c.open("a") is False and {e["task"] for e in next(c)} <= set("abc")  # none: all
    # --resume rebuilds the running success from the log up to the save (a torn last line is skipped)
    records = [{"step": 1, "task_success": {"a": [1.0, 1.0], "c": [1.0]}}, {"step": 2, "task_success": {"c": [0.0]}},
               {"step": 3, "task_success": {"c": [1.0] * 16}}]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 4, "task_su')
    resumed = train_grpo.Curriculum(items, 2, 0, str(log), 2)
    fresh = train_grpo.Curriculum(items, 2, 0, str(tmp_path / "none.jsonl"), 0)
    for r in records[:2]:
        next(fresh)
        for task, successes in r["task_success"].items():
            fresh.record(task, successes)
    assert resumed.recent == fresh.recent == {"a": [1.0, 1.0], "c": [1.0, 0.0]} and resumed.open("a")
    assert [next(resumed) for _ in range(3)] == [next(fresh) for _ in range(3)]


def first_save_only(save, out, *a):
    """The run's first checkpoint, kept: the weights after step 1."""
    if not os.path.exists(out):
        save(out, *a)


def test_offline_guide_reward_runs_and_needs_guide_first(tiny_models, toy_data, tmp_path):
    log = grpo(str(tmp_path / "g"), tiny_models["qwen2_5_vl"], toy_data, "--group-size", 2, "--prompts-per-step", 1,
               "--max-new-tokens", 8, "--max-steps", 1, "--guide-reward", "offline")
    assert log[0]["guide"] < 0  # a log-probability of the gold action
    with pytest.raises(SystemExit, match="guide_first"):
        grpo(str(tmp_path / "h"), tiny_models["qwen2_5_vl"], toy_data, "--max-steps", 1, "--guide-reward", "offline",
             "--order", "action_first")


def test_train_config_holds_the_whole_config(tiny_models, toy_data, tmp_path):
    """train_config.json holds the run's whole config, as train_sft.py's does (it held 4 keys), and the
    readers still find the prompt options in it."""
    out = str(tmp_path / "g")
    grpo(out, tiny_models["qwen2_5_vl"], toy_data, "--group-size", 2, "--prompts-per-step", 1, "--max-new-tokens", 4,
         "--max-steps", 1, "--drop-groups", "reward", "--order", "action_first")
    with open(os.path.join(out, metrics.TRAIN_CONFIG)) as f:
        config = json.load(f)
    saved = torch.load(os.path.join(out, "trainer_state.pt"), weights_only=True)["config"]
    assert config == saved | {"trained_by": "train_grpo.py"}
    assert config["drop_groups"] == "reward" and config["group_size"] == 2 and config["data"] == toy_data
    trained = metrics.prompt_options(trained=metrics.trained_options(out))  # what replay and evaluate read
    assert trained == {"grounding": "som", "order": "action_first", "elements": "none"}


class TwoButtons(Example):
    """envs/example.py's suite with one task of one step: the episode ends at the first click, won by Blue's."""
    viewport, scale = (160, 60), 1

    def all_tasks(self):
        return ["click-blue"]

    async def reset(self, page, task, seed):
        await page.goto(self.url(task), wait_until="load")
        await page.evaluate("""() => { document.body.innerHTML = '<p style="margin:4px">Click Blue.</p>'
            + '<button id="red">Red</button> <button id="blue">Blue</button>'; window.result = null;
            for (const b of document.querySelectorAll('button')) b.onclick = () => { window.result = b.id === 'blue'; };
        }""")
        return "Click Blue.", None

    def expert(self, task):
        async def click_blue(page, instruction):
            yield envs.Move("click", css="#blue", why="to do what the task says")
        return click_blue


def greedy_successes(ckpt, out):
    """The checkpoint's wins in 4 held-out episodes of the two buttons, greedy (evaluate.py --policy ckpt)."""
    import evaluate
    res = evaluate.main(["--suite", "example", "--policy", "ckpt", "--ckpt", ckpt, "--episodes", "4", "--seed", "100",
                         "--max-steps", "1", "--max-new-tokens", "12", "--out", out, "--no-progress"])
    return sum(r["success"] for r in res["per_episode"])


@pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "")
def test_live_grpo_raises_the_success_of_an_agent_on_a_real_page(tiny_models, tmp_path, monkeypatch):
    """The algorithm, live, at a tiny scale: an agent fine-tuned to click Red three times in four learns from its
    own episodes' successes alone (no expert in the groups) to click Blue: greedy, it wins none of four held-out
    episodes before and all four after (docs/training.md: the recipes tried, run by run)."""
    import collect
    monkeypatch.setattr(collect, "make_env", lambda suite, **kw: TwoButtons())
    data = str(tmp_path / "buttons")
    collect.main(["--suite", "example", "--episodes", "8", "--seed", "0", "--out", data, "--no-progress"])
    eps = metrics.load_dataset(data)
    for ep in eps:   # SFT data: Blue's click in 2 of 8 episodes, Red's in 6
        (step,) = ep["steps"]
        red = next(e for e in step["elements"] if e["text"] == "Red")
        if ep["seed"] >= 2:
            step["action"] = metrics.make_action("click", mark=red["mark"], point=metrics.box_center(red["bbox"]))
        step["guide"], step["guide_status"] = "Click the button.", "auto"
    metrics.write_dataset(data, eps)
    sft, out = str(tmp_path / "sft"), str(tmp_path / "grpo")
    train_sft.main(["--data", data, "--ckpt", tiny_models["qwen2_5_vl"], "--out", sft, "--split", "all", "--order",
                    "action_only", "--no-progress", "--val-split", "", "--eval-every", "0", "--batch-size", "8",
                    "--lr", "1e-2", "--warmup", "5", "--max-steps", "40"])
    # a reply that does not parse earns less than a wrong click (--w-live-format): pushing Red's mark down must
    # not hand its probability to garbage; the warm-up lets Adam's moments average before full steps, and two
    # clipped updates per batch move the policy in steps the clip bounds (without them, runs fell to 0 midway)
    log = grpo(out, sft, data, "--env", "live", "--suite", "example", "--expert", "off", "--prompts-per-step", 2,
               "--group-size", 8, "--episode-steps", 1, "--max-new-tokens", 12, "--lr", 1e-3, "--warmup", 4,
               "--updates-per-batch", 2, "--w-live-format", 0.5, "--max-steps", 16, "--save-every", 100,
               "--dump-every", 100)
    before, after = greedy_successes(sft, str(tmp_path / "e0")), greedy_successes(out, str(tmp_path / "e1"))
    sampled = [r["success"] for r in log]
    assert (before, after) == (0, 4), sampled
    assert sum(sampled[-4:]) / 4 > sum(sampled[:4]) / 4 + 0.25, sampled
