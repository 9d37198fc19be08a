"""train_sft.py: tiny models through the Auto classes, the label mask, overfitting, bit-exact resume, bad input."""
import hashlib
import json
import os
import re
import shutil

import pytest
import torch
from conftest import make_toy_dataset

import metrics
import train_sft

CPU = torch.device("cpu")
NO_AUTOCAST = torch.autocast("cpu", enabled=False)


def sft_args(**kw):
    argv = ["--data", "x", "--ckpt", "x", "--out", "x"]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return train_sft.parse_args(argv)


def toy_items(toy_data, n=8, order="guide_first"):
    return metrics.usable_steps(metrics.load_dataset(toy_data), "all", "auto", order)[:n]


@pytest.mark.parametrize("arch", train_sft.TINY_ARCHS)
def test_tiny_model_loads_through_auto_classes_and_runs(tiny_models, toy_data, arch):
    from transformers import AutoModelForImageTextToText, AutoProcessor
    path = tiny_models[arch]
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    assert arch.replace("_", "").lower() in type(model).__name__.replace("_", "").lower()
    args = sft_args()
    items = toy_items(toy_data, 3)
    enc = train_sft.encode_batch(processor, items, args)
    loss = train_sft.target_logprob_sum(model, enc, NO_AUTOCAST) / (enc["labels"] != -100).sum()
    loss = loss.item()
    assert 3 < loss < 12  # ~log(vocab) for a random model
    args.max_new_tokens = 8
    outs = train_sft.generate(model, processor, items, args, CPU, NO_AUTOCAST)
    assert len(outs) == 3 and all(isinstance(o, str) for o in outs)


def test_builder_is_deterministic(tmp_path):
    a = train_sft.build_tiny(str(tmp_path / "a"), "qwen2_5_vl", size="test")
    b = train_sft.build_tiny(str(tmp_path / "b"), "qwen2_5_vl", size="test")
    for name in ("model.safetensors", "tokenizer.json"):
        digest = [hashlib.sha256(open(os.path.join(p, name), "rb").read()).hexdigest() for p in (a, b)]
        assert digest[0] == digest[1], name


def test_tiny_names_an_architecture_and_a_size_in_either_order():
    assert train_sft.tiny_spec("tiny") == ("qwen2_5_vl", "demo")
    assert train_sft.tiny_spec("tiny:idefics3") == ("idefics3", "demo")
    assert train_sft.tiny_spec("tiny:nano") == ("qwen2_5_vl", "nano")
    assert train_sft.tiny_spec("tiny:nano:qwen3_vl") == train_sft.tiny_spec("tiny:qwen3_vl:nano")
    assert train_sft.tiny_spec("tiny:qwen3_vl:nano") == ("qwen3_vl", "nano")
    with pytest.raises(ValueError, match="'huge' is neither an architecture .* nor a size"):
        train_sft.tiny_spec("tiny:huge")


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "idefics3"])
def test_label_mask_covers_exactly_the_target_and_end_of_turn(tiny_models, toy_data, arch):
    from transformers import AutoProcessor
    processor = AutoProcessor.from_pretrained(tiny_models[arch])
    tok = processor.tokenizer
    items = toy_items(toy_data, 3)[1:3]  # a type step and a stop step: different lengths, so one row is padded
    args = sft_args()
    enc = train_sft.encode_batch(processor, items, args)
    for i, (ep, k) in enumerate(items):
        ids, labels, mask = enc["input_ids"][i].tolist(), enc["labels"][i].tolist(), enc["attention_mask"][i].tolist()
        n = sum(mask)
        target_text = train_sft.target_text(ep, k, "som", "guide_first")
        target = tok(target_text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        start = n - len(target)
        for j in range(len(ids)):  # token by token: prompt, image, target, end of turn, padding
            if start <= j < n:
                assert labels[j] == ids[j], (j, tok.decode([ids[j]]))
            else:
                assert labels[j] == -100, (j, tok.decode([ids[j]]))
        assert tok.decode([t for t in labels if t != -100]) == target_text + tok.eos_token
        prompt = tok.decode(ids[:start])
        assert prompt.rstrip().endswith(("assistant", "Assistant:"))  # everything before the reply is masked
    assert 0 in enc["attention_mask"].tolist()[0] + enc["attention_mask"].tolist()[1]  # padding was there to mask


def test_action_only_target_has_no_guide(tiny_models, toy_data):
    ep, k = toy_items(toy_data, 1, order="action_only")[0]
    assert train_sft.target_text(ep, k, "som", "action_only") == "Action: click(%d)" % ep["steps"][k]["action"]["mark"]
    assert train_sft.target_text(ep, k, "coord", "guide_first").startswith("Guide: Click the **")


def train(out, data, ckpt, *extra):
    train_sft.main(["--data", data, "--ckpt", ckpt, "--out", out, "--split", "all", "--no-progress", "--val-split", "",
                    "--eval-every", "0", *map(str, extra)])


def test_the_nano_size_builds_deterministically_and_trains_a_step(toy_data, tmp_path, monkeypatch):
    """--ckpt tiny:nano: the same files on every build (its tokenizer's words are a committed asset), the
    tokenizer knows those words whole, and one SFT step runs."""
    a = train_sft.build_tiny(str(tmp_path / "a"), "qwen2_5_vl", size="nano")
    b = train_sft.build_tiny(str(tmp_path / "b"), "qwen2_5_vl", size="nano")
    for name in ("model.safetensors", "tokenizer.json"):
        digest = [hashlib.sha256(open(os.path.join(p, name), "rb").read()).hexdigest() for p in (a, b)]
        assert digest[0] == digest[1], name
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a)
    assert len(tok) == train_sft.TINY_SIZES["nano"]["vocab"]
    assert len(tok("Username", add_special_tokens=False)["input_ids"]) == 1   # an element name, one token
    monkeypatch.setenv("MAG_CACHE", str(tmp_path / "cache"))
    train(str(tmp_path / "sft"), toy_data, "tiny:nano", "--max-steps", 1, "--batch-size", 2)
    assert os.path.exists(tmp_path / "cache" / "tiny" / f"qwen2_5_vl-nano-v{train_sft.TINY_VERSION}" / "config.json")
    assert os.path.exists(tmp_path / "sft" / "model.safetensors")


def test_overfits_eight_examples_to_exact_outputs(tiny_models, toy_data, tmp_path):
    out = str(tmp_path / "sft")
    train(out, toy_data, tiny_models["qwen2_5_vl"], "--limit", 8, "--batch-size", 8, "--lr", 1e-2, "--warmup", 10,
          "--max-steps", 80)
    model, processor, _ = train_sft.load_model(out, CPU)
    items = toy_items(toy_data, 8)
    outs = train_sft.generate(model, processor, items, sft_args(), CPU, NO_AUTOCAST)
    targets = [train_sft.target_text(ep, k, "som", "guide_first") for ep, k in items]
    assert outs == targets
    log = [json.loads(l) for l in open(out + ".log.jsonl")]
    assert len(log) == 80 and log[-1]["loss"] < 0.05 < log[0]["loss"]
    # the validation pass scores what it generates, overall and suite by suite (ids "<suite>.<task>.<seed>")
    items[4:] = [({**ep, "id": "other." + ep["id"]}, k) for ep, k in items[4:]]
    res = train_sft.evaluate(model, processor, items, sft_args(eval_gen_n=8, eval_loss_n=8), CPU, NO_AUTOCAST)
    suite = items[0][0]["id"].split(".")[0]
    assert res["val_step_acc"] == 1 and res["val_step_by_suite"] == {suite: 1.0, "other": 1.0}


def test_log_counts_every_token_the_model_runs_and_mfu(tiny_models, toy_data, tmp_path):
    """tok/s counts prompt, image and reply tokens (the batch's attention mask), not only the targets; MFU is
    6 * parameters * tokens/s over --peak-tflops."""
    out = str(tmp_path / "sft")
    train(out, toy_data, tiny_models["qwen2_5_vl"], "--batch-size", 4, "--max-steps", 1, "--peak-tflops", 0.5)
    (r,) = [json.loads(line) for line in open(out + ".log.jsonl")]
    model, processor, _ = train_sft.load_model(tiny_models["qwen2_5_vl"], CPU)
    stream = train_sft.batches(metrics.usable_steps(metrics.load_dataset(toy_data), "all", "verified,edited,auto",
                                                    "guide_first"), 4, 16, 0)
    enc = train_sft.encode_batch(processor, next(stream), sft_args(split="all"))
    assert r["tokens"] == int(enc["attention_mask"].sum()) > 5 * r["target_tokens"]
    n = sum(p.numel() for p in model.parameters())
    assert r["tok_per_s"] == pytest.approx(r["tokens"] / r["dt"])
    assert r["mfu"] == pytest.approx(6 * n * r["tokens"] / r["dt"] / 0.5e12)


class Crash(Exception):
    pass


# --fresh-values: a resumed run draws the same fresh strings (the toy task names the word its step 1 types)
RESUME_OPTS = ["--batch-size", 2, "--grad-accum", 2, "--lr", 3e-3, "--warmup", 2, "--max-steps", 6, "--save-every", 3,
               "--fresh-values", 0.5]


@pytest.fixture(scope="module")
def straight_run(tiny_models, toy_data, tmp_path_factory):
    """Six steps without a stop, a checkpoint every three: what every interrupted-and-resumed run must equal."""
    out = str(tmp_path_factory.mktemp("straight") / "whole")
    train(out, toy_data, tiny_models["qwen2_5_vl"], *RESUME_OPTS)
    return out


# Bit-exact on CPU. On CUDA, bf16 autocast and kernels whose backward need not repeat bit for bit (SDPA's
# flash backward accumulates with atomics) make two identical runs differ in the last bits: equal within a
# tolerance well under one step's change (lr 3e-3), so a lost or repeated step still fails.
EXACT = not torch.cuda.is_available()


def same_weights(a_dir, b_dir):
    from safetensors.torch import load_file
    a, b = (load_file(os.path.join(d, "model.safetensors")) for d in (a_dir, b_dir))
    same = torch.equal if EXACT else lambda x, y: torch.allclose(x, y, rtol=0, atol=1e-3)
    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


class Losses(list):
    """A run's logged losses; == is exact on CPU, within 1% on CUDA (see EXACT)."""
    def __eq__(self, other):
        return list(self) == list(other) if EXACT else list(self) == pytest.approx(list(other), rel=1e-2)


def logged_losses(out):
    with open(out + ".log.jsonl") as f:
        return Losses(json.loads(line)["loss"] for line in f)


def test_resume_is_bit_exact(tiny_models, toy_data, tmp_path, monkeypatch, straight_run):
    opts = RESUME_OPTS
    whole, split = straight_run, str(tmp_path / "split")
    real_save = train_sft.save_checkpoint

    def save_then_crash(out, model, processor, optimizer, step, config):
        real_save(out, model, processor, optimizer, step, config)
        raise Crash(step)  # the run dies right after its first checkpoint

    monkeypatch.setattr(train_sft, "save_checkpoint", save_then_crash)
    with pytest.raises(Crash):
        train(split, toy_data, tiny_models["qwen2_5_vl"], *opts)
    monkeypatch.setattr(train_sft, "save_checkpoint", real_save)
    assert torch.load(os.path.join(split, "trainer_state.pt"), weights_only=True)["step"] == 3
    train(split, toy_data, tiny_models["qwen2_5_vl"], *opts, "--resume")

    assert same_weights(whole, split)
    assert logged_losses(whole) == logged_losses(split)  # and the logged losses agree step by step
    assert not os.path.exists(split + ".tmp") and not os.path.exists(split + ".old")
    # the prompt options for replay.py and evaluate.py, under the new name only; the run's starting point kept
    assert metrics.trained_options(split)["order"] == "guide_first"
    with open(os.path.join(split, metrics.TRAIN_CONFIG)) as f:
        assert json.load(f)["ckpt"] == tiny_models["qwen2_5_vl"]
    assert os.path.exists(os.path.join(split, metrics.TRAIN_CONFIG))
    assert not os.path.exists(os.path.join(split, "sft_config.json"))


def test_a_kill_between_the_two_renames_of_a_save_is_undone_by_resume(tiny_models, toy_data, tmp_path, monkeypatch,
                                                                    capsys, straight_run):
    """metrics.publish_dir moves the old checkpoint to out.old, then the new one from out.tmp to out. A kill
    between the two leaves no `out` at all: --resume puts out.old (step 3) back and ends where a straight
    run ends, bit for bit; the half-published out.tmp of step 6 is thrown away."""
    split = str(tmp_path / "split")
    real_replace = os.replace

    def killed_between_renames(src, dst):
        if src == split + ".tmp" and dst == split and os.path.isdir(split + ".old"):
            raise Crash("killed")
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", killed_between_renames)
        with pytest.raises(Crash):
            train(split, toy_data, tiny_models["qwen2_5_vl"], *RESUME_OPTS)
    assert not os.path.exists(split) and os.path.isdir(split + ".old") and os.path.isdir(split + ".tmp")
    assert torch.load(os.path.join(split + ".old", "trainer_state.pt"), weights_only=True)["step"] == 3
    capsys.readouterr()

    train(split, toy_data, tiny_models["qwen2_5_vl"], *RESUME_OPTS, "--resume")
    printed = capsys.readouterr()
    assert f"restored from {split}.old" in printed.err and f"resumed from {split} at step 3" in printed.out
    assert torch.load(os.path.join(split, "trainer_state.pt"), weights_only=True)["step"] == 6
    assert same_weights(straight_run, split)
    # steps 4-6 were logged before the kill; the resume drops those records and logs them again: each step once
    assert logged_losses(split) == logged_losses(straight_run)
    # a new run into the same --out without --resume is refused: the checkpoint stays as it is
    with pytest.raises(SystemExit, match="a checkpoint is already there; continue it with --resume"):
        train(split, toy_data, tiny_models["qwen2_5_vl"], *RESUME_OPTS)
    assert same_weights(straight_run, split) and logged_losses(split) == logged_losses(straight_run)
    assert not os.path.exists(split + ".tmp") and not os.path.exists(split + ".old")


class RunsCodeOnLoad:
    """What a crafted trainer_state.pt could hold: unpickling it calls os.makedirs(marker)."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def test_resume_loads_only_tensors_and_plain_values(tiny_models, toy_data, tmp_path):
    out = tmp_path / "ckpt"
    shutil.copytree(tiny_models["qwen2_5_vl"], out)
    marker = tmp_path / "code-ran"
    state = out / "trainer_state.pt"
    torch.save({"step": 1, "rng": RunsCodeOnLoad(str(marker))}, state)
    with pytest.raises(SystemExit, match=re.escape(f"{state} is unreadable")):
        train(str(out), toy_data, str(out), "--resume", "--max-steps", 2)
    assert not marker.exists()  # refused before anything in the file ran
    torch.save({"step": 1}, state)   # a foreign file: loads, but is not this script's state
    with pytest.raises(SystemExit, match=re.escape(f"{state} is unreadable (ValueError: not a trainer state")):
        train(str(out), toy_data, str(out), "--resume", "--max-steps", 2)
    with open(state, "r+b") as f:
        f.truncate(20)
    with pytest.raises(SystemExit, match=re.escape(f"{state} is unreadable")):
        train(str(out), toy_data, str(out), "--resume", "--max-steps", 2)


def foreign_optimizers(saved):
    """What a trainer_state.pt's optimizer can hold that does not fit the model: (state, what the error says)."""
    moved = {"state": saved["state"], "param_groups": [dict(g) for g in saved["param_groups"]]}
    moved["param_groups"][1]["params"] = moved["param_groups"][1]["params"] + [moved["param_groups"][0]["params"][0]]
    moved["param_groups"][0]["params"] = moved["param_groups"][0]["params"][1:]
    shrunk = {"state": {k: dict(v) for k, v in saved["state"].items()}, "param_groups": saved["param_groups"]}
    first = next(k for k, v in shrunk["state"].items() if v["exp_avg"].dim() == 2)
    shrunk["state"][first]["exp_avg"] = torch.zeros(3)
    return [({"state": {}, "param_groups": []}, "(0 parameter groups of [] tensors, where this model's optimizer"),
            (moved, "parameter groups of ["),
            (shrunk, f"parameter {first}'s exp_avg is [3], the parameter ["),
            ("x", "(not an optimizer state (TypeError")]


def test_resume_refuses_an_optimizer_state_that_does_not_fit(straight_run, toy_data, tmp_path, capsys):
    """A foreign optimizer state in trainer_state.pt (another model's, edited by hand) is refused by --resume with
    the reason -- not a traceback from optimizer.load_state_dict, and not a silent start from a fresh optimizer --
    and the checkpoint is left as it was."""
    out = str(tmp_path / "ckpt")
    shutil.copytree(straight_run, out)
    path = os.path.join(out, "trainer_state.pt")
    state = torch.load(path, weights_only=True)
    for optimizer, why in foreign_optimizers(state["optimizer"]):
        torch.save({**state, "optimizer": optimizer}, path)
        before = {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}
        with pytest.raises(SystemExit) as e:
            train(out, toy_data, out, *RESUME_OPTS, "--resume")
        assert str(e.value).startswith(f"--resume: {path}: the optimizer state does not fit this model ")
        assert why in str(e.value) and "start a new --out" in str(e.value), str(e.value)
        assert before == {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}
        assert "resumed from" not in capsys.readouterr().out


def test_bad_input_names_what_is_wrong(tiny_models, toy_data, tmp_path, broken_checkpoints, capsys):
    for ckpt, why in ((str(tmp_path / "no/such/folder"), "no/such/folder"), ("someone/some-model", "HF_HUB_OFFLINE")):
        with pytest.raises(SystemExit) as exit_:   # one line, exit code 2, no traceback
            train(str(tmp_path / "o"), toy_data, ckpt, "--max-steps", 1)
        assert exit_.value.code == 2 and why in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no usable steps"):
        train(str(tmp_path / "o"), toy_data, tiny_models["qwen2_5_vl"], "--statuses", "verified", "--max-steps", 1)
    with pytest.raises(SystemExit, match="nothing to resume"):
        train(str(tmp_path / "fresh"), toy_data, tiny_models["qwen2_5_vl"], "--resume", "--max-steps", 1)
    no_config, truncated = broken_checkpoints
    with pytest.raises(SystemExit, match=re.escape(f"--ckpt {no_config}: not a Hugging Face checkpoint folder")):
        train(str(tmp_path / "o"), toy_data, str(no_config), "--max-steps", 1)
    with pytest.raises(SystemExit, match=re.escape(f"--ckpt {truncated}: cannot load the checkpoint (SafetensorError")):
        train(str(tmp_path / "o"), toy_data, str(truncated), "--max-steps", 1)
    data = make_toy_dataset(str(tmp_path / "broken"), n_episodes=2)
    os.remove(os.path.join(data, "img", "toy.buttons.1", "2.png"))
    with pytest.raises(SystemExit) as exit_:   # one line on stderr, exit code 2 (metrics.fail)
        train(str(tmp_path / "o"), data, tiny_models["qwen2_5_vl"], "--max-steps", 1)
    assert exit_.value.code == 2 and "toy.buttons.1/2.png" in capsys.readouterr().err


def test_a_hub_id_is_fetched_to_a_local_folder_before_loading(tiny_models, monkeypatch):
    """load_model reads local files only, so resolve_ckpt turns a hub id into the hub cache's folder first
    (snapshot_download, faked here: no network in tests)."""
    import huggingface_hub
    calls = []

    def fake_download(repo_id, **kw):
        calls.append((repo_id, kw))
        return tiny_models["qwen2_5_vl"]

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    assert train_sft.resolve_ckpt("someone/some-model") == tiny_models["qwen2_5_vl"]
    assert calls[0][0] == "someone/some-model" and "*.safetensors" in calls[0][1]["allow_patterns"]


def test_ddp_on_two_cpu_ranks_matches_one_process(tiny_models, toy_data, tmp_path):
    """torchrun with 2 ranks (gloo) and grad-accum 2 takes the same batches as one process with
    grad-accum 2: the same weights and the same logged losses."""
    import subprocess
    import sys
    opts = ["--data", toy_data, "--ckpt", tiny_models["qwen2_5_vl"], "--split", "all", "--val-split", "",
            "--no-progress", "--batch-size", "2", "--grad-accum", "2", "--max-steps", "3", "--lr", "3e-3",
            "--warmup", "1", "--device", "cpu"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train_sft.py")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script, *opts,
                    "--out", str(tmp_path / "ddp")], check=True, env=env, capture_output=True, timeout=300)
    train(str(tmp_path / "one"), toy_data, tiny_models["qwen2_5_vl"], *opts[6:])
    from safetensors.torch import load_file
    a, b = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("ddp", "one"))
    # gloo sums the two ranks' halves in another order: Adam's normalised step turns that 1e-7 gradient
    # difference on a near-zero gradient into up to ~2e-5 (seen); other batches would move weights by ~lr
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    logs = [[json.loads(l)["loss"] for l in open(str(tmp_path / name) + ".log.jsonl")] for name in ("ddp", "one")]
    assert logs[0] == pytest.approx(logs[1], rel=1e-5)


def test_fsdp_on_two_cpu_ranks_trains_saves_and_resumes(tiny_models, toy_data, tmp_path):
    """--fsdp (FSDP2) on 2 gloo ranks: the losses of one process, a checkpoint with the full
    (gathered) weights and optimizer state, and a resume that continues exactly where 4 straight
    steps would be (a constant learning rate, so the shorter first run has the same schedule)."""
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train_sft.py")
    opts = ["--data", toy_data, "--ckpt", tiny_models["qwen2_5_vl"], "--split", "all", "--val-split", "",
            "--no-progress", "--batch-size", "2", "--grad-accum", "2", "--lr", "3e-3", "--warmup", "0",
            "--min-lr-ratio", "1.0", "--device", "cpu", "--fsdp"]
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def torchrun(*extra):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script,
                        *opts, *extra], check=True, env=env, capture_output=True, timeout=300)
    torchrun("--max-steps", "4", "--out", str(tmp_path / "whole"))
    torchrun("--max-steps", "2", "--out", str(tmp_path / "split"))
    torchrun("--max-steps", "4", "--out", str(tmp_path / "split"), "--resume")
    from safetensors.torch import load_file
    a, b = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("whole", "split"))
    assert a.keys() == b.keys() and "lm_head.weight" not in a  # the tied copy is not saved twice
    # gloo sums the two ranks' halves in another order: Adam's normalised step turns that 1e-7 gradient
    # difference on a near-zero gradient into up to ~2e-5 (seen); other batches would move weights by ~lr
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    train(str(tmp_path / "one"), toy_data, tiny_models["qwen2_5_vl"], *opts[6:-1], "--max-steps", "4")
    logs = [[json.loads(l)["loss"] for l in open(str(tmp_path / n) + ".log.jsonl")] for n in ("whole", "one")]
    assert logs[0] == pytest.approx(logs[1], rel=1e-5)
    model, _, _ = train_sft.load_model(str(tmp_path / "whole"), CPU)  # loads back like any checkpoint
    assert torch.equal(model.lm_head.weight, model.get_input_embeddings().weight)


def login_episode():
    """A login-user episode as collect.py records it (elements cut to the two fields and the button)."""
    fields = [{"mark": 1, "tag": "input", "role": "textbox", "text": "Username", "bbox": [0, 0, 9, 9]},
              {"mark": 2, "tag": "input", "role": "textbox", "text": "Password", "bbox": [0, 10, 9, 19]},
              {"mark": 3, "tag": "button", "role": "button", "text": "Login", "bbox": [0, 20, 9, 29]}]
    moves = [("type", 1, "kasie", 'Type "kasie" into the **Username** field to log in as kasie.'),
             ("type", 2, "Ann7", 'Type "Ann7" into the **Password** field to log in as kasie.'),
             ("click", 3, None, "Click **Login** to log in as kasie (not Anna's account).")]
    steps = []
    for k, (op, mark, value, guide) in enumerate(moves):
        shown = [dict(e, value=moves[j][2]) if j < k and e["mark"] == moves[j][1] else e
                 for j, e in enumerate(fields)]
        steps.append({"step": k, "elements": shown, "guide": guide,
                      "action": {"op": op, "mark": mark, "point": None, "value": value}})
    return {"id": "miniwob.login-user.7", "viewport": [160, 210], "steps": steps,
            "instruction": 'Enter the username "kasie" and the password "Ann7" into the text fields and press '
                           "login. Anna's account is not yours."}


def test_fresh_values_swap_every_named_typed_value_consistently():
    """--fresh-values: the values the task names become one fresh string each, everywhere the step's prompt and
    target show them (task, history, guides, the fields' shown values), with their shape (case, digits); a word
    that only contains one ("Anna") and the recorded episode stay as they were."""
    import random
    ep = login_episode()
    before = json.dumps(ep)
    new, k = train_sft.with_fresh_values(ep, 1, random.Random(0))
    assert k == 1 and json.dumps(ep) == before
    user, pw = new["steps"][0]["action"]["value"], new["steps"][1]["action"]["value"]
    assert user != "kasie" and len(user) == 5 and user.islower() and user.isalpha()
    assert pw != "Ann7" and pw[0].isupper() and pw[1:3].islower() and pw[3].isdigit()
    assert new["instruction"] == (f'Enter the username "{user}" and the password "{pw}" into the text fields and '
                                  "press login. Anna's account is not yours.")
    assert new["steps"][1]["guide"] == f'Type "{pw}" into the **Password** field to log in as {user}.'
    assert new["steps"][1]["elements"][0]["value"] == user  # the username field shows what step 0 typed
    messages = metrics.build_messages(dict(new, _root="."), 1, "som", "guide_first", "text", image="unused")
    prompt = messages[1]["content"][1]["text"]
    assert "kasie" not in prompt and "Ann7" not in prompt and f'type(1, "{user}")' in prompt
    assert 'type(2, "' + pw + '")' in metrics.format_output(new["steps"][1]["guide"], new["steps"][1]["action"],
                                                            "som", "guide_first", new["viewport"])
    # a step that types nothing the task names, or clicks, is left alone; so is a value the task never names
    assert train_sft.with_fresh_values(ep, 2, random.Random(0)) == (ep, 2)
    other = dict(ep, instruction="Log in.")
    assert train_sft.with_fresh_values(other, 0, random.Random(0)) == (other, 0)


def test_fresh_values_stream_is_deterministic_and_takes_its_share():
    items = [(login_episode(), k) for k in (0, 1, 2)] * 40
    batches = [items[i:i + 4] for i in range(0, 120, 4)]
    stream = list(train_sft.fresh_values(iter(batches), 0.5, 3))
    assert stream == list(train_sft.fresh_values(iter(batches), 0.5, 3))  # a resumed run sees the same batches
    swapped = [ep["instruction"] != items[0][0]["instruction"] for batch in stream for ep, k in batch if k < 2]
    assert 0.3 < sum(swapped) / len(swapped) < 0.7
    assert list(train_sft.fresh_values(iter(batches), 0, 3)) == batches
