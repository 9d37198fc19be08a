"""replay.py: byte-identical reruns, the probes, compare, garbage output, teacher-forced log-probs."""
import json
import os
import re
import shutil

import pytest
import torch

import metrics
import replay


def run(tmp_path, name, ckpt, data, *extra):
    out = str(tmp_path / name)
    replay.main(["--ckpt", ckpt, "--data", data, "--split", "all", "--out", out, "--no-progress",
                 "--max-new-tokens", "24", *map(str, extra)])
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read()


def predictions(out):
    with open(os.path.join(out, "predictions.jsonl")) as f:
        return [json.loads(l) for l in f]


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "idefics3"])
def test_two_runs_give_identical_bytes(tiny_models, toy_data, tmp_path, arch):
    a = run(tmp_path, "a", tiny_models[arch], toy_data, "--batch-size", 4)
    b = run(tmp_path, "b", tiny_models[arch], toy_data, "--batch-size", 4)
    assert read(os.path.join(a, "results.json")) == read(os.path.join(b, "results.json"))
    assert read(os.path.join(a, "predictions.jsonl")) == read(os.path.join(b, "predictions.jsonl"))
    res = json.loads(read(os.path.join(a, "results.json")))
    assert res["protocol"] == replay.PROTOCOL_VERSION and len(res["checkpoint"]["sha256"]) == 64
    assert res["data"]["steps"] == 24 and res["data"]["episodes"] == 8
    # a random model writes garbage: every step is an invalid action, scored as wrong, and the run completes
    assert res["metrics"]["valid"]["micro"] == 0 and res["metrics"]["step"]["micro"] == 0
    assert res["metrics"]["task_success"]["n"] == 8
    assert "guide_reward" in res["metrics"]


def test_an_interrupted_replay_continues_to_the_same_bytes(tiny_models, toy_data, tmp_path, monkeypatch):
    ckpt, real, calls = tiny_models["qwen2_5_vl"], replay.predict, []
    whole = run(tmp_path, "whole", ckpt, toy_data, "--batch-size", 4)

    def killed_in_the_third_batch(*a):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*a)
    monkeypatch.setattr(replay, "predict", killed_in_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "cut", ckpt, toy_data, "--batch-size", 4)
    partial = tmp_path / "cut" / replay.PARTIAL
    lines = partial.read_text().splitlines(keepends=True)
    assert len(lines) == 1 + 8 and not (tmp_path / "cut" / "results.json").exists()
    partial.write_text("".join(lines[:-1]) + lines[-1][:25])   # and a kill during the second batch's write
    with pytest.raises(SystemExit, match=r"whose options differ.*rerun its own command"):
        run(tmp_path, "cut", ckpt, toy_data, "--batch-size", 4, "--max-new-tokens", 12)

    calls.clear()
    monkeypatch.setattr(replay, "predict", lambda *a: calls.append(1) or real(*a))
    cut = run(tmp_path, "cut", ckpt, toy_data, "--batch-size", 4)
    assert len(calls) == 5   # 6 batches: the first kept, the torn second and the rest done again
    for name in ("results.json", "predictions.jsonl"):
        assert read(os.path.join(cut, name)) == read(os.path.join(whole, name))
    assert not partial.exists() and not (tmp_path / "whole" / replay.PARTIAL).exists()
    assert (tmp_path / "cut" / (replay.PARTIAL + ".torn")).exists()   # the torn bytes kept, not dropped
    partial.write_text("garbage\n")
    with pytest.raises(SystemExit, match="no header"):
        run(tmp_path, "cut", ckpt, toy_data, "--batch-size", 4)


def test_fingerprints_follow_the_inputs(tiny_models, toy_data, tmp_path):
    a = run(tmp_path, "a", tiny_models["qwen2_5_vl"], toy_data, "--limit", 4)
    b = run(tmp_path, "b", tiny_models["idefics3"], toy_data, "--limit", 4)
    c = run(tmp_path, "c", tiny_models["qwen2_5_vl"], toy_data, "--limit", 3)
    ra, rb, rc = (json.loads(read(os.path.join(x, "results.json"))) for x in (a, b, c))
    assert ra["checkpoint"]["sha256"] != rb["checkpoint"]["sha256"]
    assert ra["data"]["sha256"] == rb["data"]["sha256"] != rc["data"]["sha256"]


def test_steps_are_in_a_fixed_order(toy_data):
    items = replay.replay_steps(list(reversed(metrics.load_dataset(toy_data))), "all")
    keys = [(ep["id"], k) for ep, k in items]
    assert keys == sorted(keys) and len(keys) == 24
    test_ids = [ep["id"] for ep, _ in replay.replay_steps(metrics.load_dataset(toy_data), "test")]
    assert test_ids == ["toy.buttons.3"] * 3 + ["toy.buttons.7"] * 3


def test_probes_force_the_specified_guide(tiny_models, toy_data, tmp_path):
    episodes = metrics.load_dataset(toy_data)
    by_key = {(ep["id"], k): ep["steps"][k] for ep in episodes for k in range(len(ep["steps"]))}
    outs = {p: predictions(run(tmp_path, p, tiny_models["qwen2_5_vl"], toy_data, "--probe", p, "--limit", 9))
            for p in ("gold", "other_step", "paraphrase", "none")}
    for p in outs["gold"]:
        assert p["forced_guide"] == by_key[(p["id"], p["step"])]["guide"]
        assert p["output"].startswith(f"Guide: {p['forced_guide']}\nAction:")
    for p in outs["paraphrase"]:
        assert p["forced_guide"] == by_key[(p["id"], p["step"])]["guide_alt"]["paraphrase"]
        assert p["output"].startswith(f"Guide: {p['forced_guide']}\nAction:")
    guides_elsewhere = lambda eid: {s["guide"] for (e, _), s in by_key.items() if e != eid}
    for p in outs["other_step"]:
        assert p["forced_guide"] in guides_elsewhere(p["id"])
        assert p["output"].startswith(f"Guide: {p['forced_guide']}\nAction:")
    again = predictions(run(tmp_path, "other_again", tiny_models["qwen2_5_vl"], toy_data, "--probe", "other_step",
                            "--limit", 9))
    assert [p["forced_guide"] for p in again] == [p["forced_guide"] for p in outs["other_step"]]
    assert all(p["forced_guide"] is None for p in outs["none"])
    # the prompt itself is unchanged by a probe: only the reply's beginning is forced
    ep, k = replay.replay_steps(episodes, "all")[0]
    assert replay.guide_prefix("Click **OK**.") == "Guide: Click **OK**.\nAction:"
    with pytest.raises(SystemExit, match="guide_first"):
        run(tmp_path, "bad", tiny_models["qwen2_5_vl"], toy_data, "--probe", "gold", "--order", "action_only")


def test_compare_identical_runs_gives_zero_differences(tiny_models, toy_data, tmp_path, capsys):
    a = run(tmp_path, "a", tiny_models["qwen2_5_vl"], toy_data, "--probe", "gold", "--limit", 6)
    b = run(tmp_path, "b", tiny_models["qwen2_5_vl"], toy_data, "--probe", "gold", "--limit", 6)
    capsys.readouterr()
    rows = replay.main(["compare", a, b])
    assert rows and all(r["diff"] == 0 and r["lo"] == 0 and r["hi"] == 0 for r in rows)
    assert "guide_reward" in {r["metric"] for r in rows}
    assert "+0.0000" in capsys.readouterr().out


def test_garbage_and_partial_outputs_are_invalid_actions(toy_data):
    ep = metrics.load_dataset(toy_data)[0]
    gold = ep["steps"][0]
    garbage = ["", "\x00\x01garbage", "Guide: Click it.\nAction: click(", "Action: explode(3)", "Guide: only a guide"]
    for text in garbage:
        s = metrics.score_step(text, gold, "som", "guide_first", ep["viewport"])
        assert s["valid"] == 0 and s["step"] == 0 and s["joint"] == 0


def test_batched_log_probs_equal_one_at_a_time(tiny_models, toy_data):
    model, processor, _ = replay.load_model(tiny_models["qwen2_5_vl"], torch.device("cpu"), torch.float32)
    items = replay.replay_steps(metrics.load_dataset(toy_data), "all")[:4]
    opts = {"grounding": "som", "order": "guide_first", "elements": "none"}
    prompts, images = map(list, zip(*(metrics.chat_prompt(processor, ep, k, opts) for ep, k in items)))
    conts = [" click(1)", ' type(4, "a much longer continuation")', " stop()", " click(3)"]
    batched = replay.continuation_logprobs(model, processor, prompts, images, conts)
    single = [replay.continuation_logprobs(model, processor, [p], [im], [c])[0]
              for p, im, c in zip(prompts, images, conts)]
    assert batched == pytest.approx(single, abs=1e-3)
    # by hand for one row: the model's log-softmax at each continuation token
    tok = processor.tokenizer
    ids = tok(conts[0], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    enc = processor(text=[prompts[0] + conts[0] + tok.eos_token], images=[images[0]], return_tensors="pt")
    with torch.no_grad():
        logp = model(**enc).logits.log_softmax(-1)[0]
    n = enc["input_ids"].shape[1]
    manual = sum(float(logp[n - len(ids) - 1 + j, t]) for j, t in enumerate(ids))
    assert single[0] == pytest.approx(manual, abs=1e-4)
    r = replay.guide_reward(model, processor, prompts[:2], images[:2], ["Click the **OK** button.", ""],
                            [" click(1)"[1:], "stop()"])
    assert len(r) == 2 and r[1] == pytest.approx(0.0, abs=1e-4)  # an empty guide is the baseline itself


def test_a_checkpoint_with_only_the_old_sft_config_keeps_its_options(tiny_models, toy_data, tmp_path):
    """Checkpoints written before train_config.json have sft_config.json: replay still takes its prompt
    options from it (a flag still wins), and neither file counts in the checkpoint's fingerprint (they
    hold paths and step counts, not the model), so results of old and new checkpoints compare."""
    old = tmp_path / "old"
    shutil.copytree(tiny_models["qwen2_5_vl"], old)
    (old / "sft_config.json").write_text(json.dumps({"grounding": "coord", "order": "action_only", "elements": "text"}))
    res = json.loads(read(os.path.join(run(tmp_path, "a", str(old), toy_data, "--limit", 2), "results.json")))
    options = lambda res: [res["options"][k] for k in ("grounding", "order", "elements", "guide_reward")]
    assert options(res) == ["coord", "action_only", "text", False]
    res = json.loads(read(os.path.join(run(tmp_path, "b", str(old), toy_data, "--limit", 1, "--order", "guide_first"),
                                       "results.json")))
    assert options(res) == ["coord", "guide_first", "text", True]
    fresh = replay.checkpoint_fingerprint(tiny_models["qwen2_5_vl"])
    assert res["checkpoint"]["sha256"] == fresh
    (old / metrics.TRAIN_CONFIG).write_text(json.dumps({"grounding": "som"}))
    assert replay.checkpoint_fingerprint(str(old)) == fresh
    (old / "generation_config.json").write_text("{}")  # a file the model is loaded with does count
    assert replay.checkpoint_fingerprint(str(old)) != fresh


def test_bad_input(tiny_models, toy_data, tmp_path, broken_checkpoints):
    with pytest.raises(SystemExit, match="not a Hugging Face checkpoint"):
        run(tmp_path, "x", str(tmp_path / "missing"), toy_data)
    no_config, truncated = broken_checkpoints
    with pytest.raises(SystemExit, match=re.escape(f"--ckpt {no_config}: not a Hugging Face checkpoint folder")):
        run(tmp_path, "x", str(no_config), toy_data)
    with pytest.raises(SystemExit, match=re.escape(f"--ckpt {truncated}: cannot load the checkpoint (SafetensorError")):
        run(tmp_path, "x", str(truncated), toy_data)
    with pytest.raises(SystemExit, match="no steps in split"):
        run(tmp_path, "x", tiny_models["qwen2_5_vl"], toy_data, "--split", "nope")
    with pytest.raises(SystemExit, match="no predictions.jsonl"):
        replay.main(["compare", str(tmp_path), str(tmp_path)])


def test_table_puts_offline_and_live_scores_side_by_side(tiny_models, toy_data, tmp_path, capsys):
    a = run(tmp_path, "a", tiny_models["qwen2_5_vl"], toy_data, "--limit", 3)
    live = tmp_path / "live"
    live.mkdir()
    (live / "results.json").write_text(json.dumps({"overall": {"success": {"micro": 0.25}}}))
    capsys.readouterr()
    rows = replay.main(["table", f"SFT:{a}:{live}", f"again:{a}"])
    assert rows["SFT"]["live_success"] == 0.25 and rows["again"]["live_success"] is None
    assert rows["SFT"]["step"] == 0.0
    out = capsys.readouterr().out
    assert "SFT" in out and "0.2500" in out and "live_success" in out


def baseline(tmp_path, name, which, data, *extra):
    out = str(tmp_path / name)
    replay.main(["--baseline", which, "--data", data, "--split", "all", "--out", out, "--no-progress",
                 *map(str, extra)])
    return out


def test_the_gold_baseline_is_the_scorers_ceiling_and_random_its_floor(toy_data, tmp_path):
    gold = json.loads(read(os.path.join(baseline(tmp_path, "gold", "gold", toy_data), "results.json")))
    assert gold["checkpoint"] == {"baseline": "gold"} and gold["data"]["steps"] == 24
    for m in ("element", "op_f1", "step", "task_success", "valid", "guide_rouge_l", "guide_grounding", "joint"):
        assert gold["metrics"][m]["micro"] == 1.0, m
    a, b = (baseline(tmp_path, n, "random", toy_data) for n in ("r1", "r2"))
    assert read(os.path.join(a, "predictions.jsonl")) == read(os.path.join(b, "predictions.jsonl"))
    rand = json.loads(read(os.path.join(a, "results.json")))
    assert rand["options"]["order"] == "action_only" and "guide_bleu" not in rand["metrics"]
    assert rand["metrics"]["valid"]["micro"] == 1.0 and rand["metrics"]["step"]["micro"] < 0.5
    # the random policy's own draw: a step's reply is metrics.random_action seeded by the step
    import random
    first = predictions(a)[0]
    ep = next(e for e in metrics.load_dataset(toy_data) if e["id"] == first["id"])
    drawn = metrics.random_action(random.Random(f"{ep['id']}:0"), [e["mark"] for e in ep["steps"][0]["elements"]])
    assert first["output"] == metrics.format_output(None, drawn, "som", "action_only", ep["viewport"])


def test_a_baseline_takes_no_model_options(toy_data, tmp_path, capsys):
    for argv, said in ((["--data", toy_data], "give a checkpoint"),
                       (["--baseline", "gold", "--ckpt", "x", "--data", toy_data], "give a checkpoint"),
                       (["--baseline", "gold", "--probe", "gold", "--data", toy_data], "a baseline has no model"),
                       (["--baseline", "random", "--order", "guide_first", "--data", toy_data], "random policy")):
        with pytest.raises(SystemExit):
            replay.parse_args([*argv, "--out", str(tmp_path / "x")])
        assert said in capsys.readouterr().err
