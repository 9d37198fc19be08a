"""experiments/copy_probe.py: it counts exactly the value's tokens, reads the prediction at the right position
(a model that always predicts the next token scores 1, one a token off scores 0), and runs on a checkpoint."""
import json
import os
import random
import sys
import types

import torch
from conftest import ROOT

import metrics
import train_sft

sys.path.insert(0, os.path.join(ROOT, "experiments"))
import copy_probe  # noqa: E402


def test_the_typing_steps_and_their_value_tokens(tiny_models, toy_data):
    items = copy_probe.typing_steps(metrics.load_dataset(toy_data), "all", "guide_first")
    assert len(items) == 8 and all(k == 1 for _, k in items)   # step 1 types the word the task names
    tok = train_sft.load_model(tiny_models["qwen2_5_vl"], torch.device("cpu"))[1].tokenizer
    target = 'Guide: Type "delta" into the **Name** field.\nAction: type(4, "delta")'
    ids = tok(target, add_special_tokens=False)["input_ids"]
    picked = copy_probe.value_tokens(tok, target, "delta")
    assert "".join(tok.decode([ids[j]]) for j in picked) == "delta" * 2
    assert copy_probe.value_tokens(tok, target, "delt") == []   # a prefix is not the quoted value


class Shifted:
    """A stand-in model whose prediction at each position is the token `shift` places after it."""
    def __init__(self, shift):
        self.shift = shift

    def __call__(self, input_ids, **_):
        nxt = torch.roll(input_ids, -self.shift, dims=1)
        return types.SimpleNamespace(logits=torch.nn.functional.one_hot(nxt).float())


def test_the_accuracy_reads_the_prediction_for_each_value_token(tiny_models, toy_data):
    processor = train_sft.load_model(tiny_models["qwen2_5_vl"], torch.device("cpu"))[1]
    items = copy_probe.typing_steps(metrics.load_dataset(toy_data), "all", "guide_first")
    opts = {"grounding": "som", "order": "guide_first", "elements": "text"}
    right, counted = copy_probe.copy_accuracy(Shifted(1), processor, items, opts)
    assert counted >= 16 and right == counted
    assert copy_probe.copy_accuracy(Shifted(2), processor, items, opts)[0] < counted / 4


def test_the_repeat_in_prompt_is_read_after_the_prompt(tiny_models, toy_data):
    processor = train_sft.load_model(tiny_models["qwen2_5_vl"], torch.device("cpu"))[1]
    items = copy_probe.typing_steps(metrics.load_dataset(toy_data), "all", "guide_first")
    opts = {"grounding": "som", "order": "guide_first", "elements": "text"}
    words = copy_probe.copy_warmup.word_tokens(processor.tokenizer, 3)
    right, counted = copy_probe.repeat_in_prompt(Shifted(1), processor, items, opts, random.Random(0), words)
    assert counted >= 8 * 7 and right == counted   # every labelled token of the appended task, each read once
    assert copy_probe.repeat_in_prompt(Shifted(2), processor, items, opts, random.Random(0), words)[0] < counted / 4


def test_the_probe_runs_on_a_checkpoint(tiny_models, toy_data, tmp_path):
    rows = copy_probe.main([tiny_models["qwen2_5_vl"], "--data", toy_data, "--split", "all", "--n", "4",
                            "--json", str(tmp_path / "p.json")])
    assert json.loads((tmp_path / "p.json").read_text()) == rows
    [r] = rows
    assert r["steps"] == 4 and r["recorded_tokens"] > 0 and r["fresh_tokens"] > 0
    assert all(0 <= r[c] <= 1 for c in ("recorded", "fresh", "repeat", "in_prompt"))
