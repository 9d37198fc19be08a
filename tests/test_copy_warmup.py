"""experiments/copy_warmup.py: every labelled token is a true copy (the pair it ends occurs earlier, so an
induction head can predict it), and the warmed folder is a checkpoint SFT can start from."""
import os
import random
import sys

import torch
from conftest import ROOT

import train_sft

sys.path.insert(0, os.path.join(ROOT, "experiments"))
import copy_warmup  # noqa: E402


def test_every_labelled_token_is_predictable_by_copying_and_the_offset_varies():
    rng = random.Random(0)
    words = list(range(100, 140))
    labelled, offsets = 0, set()
    for _ in range(200):
        ids, labels = copy_warmup.copy_sequence(rng, words, 64)
        assert len(ids) == len(labels) == 64 and set(ids) <= set(words)
        span = [i for i, lab in enumerate(labels) if lab != -100]
        assert 7 <= len(span) <= 31 and span == list(range(span[0], span[-1] + 1))   # one repeat, 8-32 pieces
        for i in span:
            labelled += 1
            assert labels[i] == ids[i]
            earlier = {(ids[j - 1], ids[j]) for j in range(1, i)}
            assert (ids[i - 1], ids[i]) in earlier, (i, ids)
        offsets.add(next(d for d in range(len(span) + 1, 64) if ids[span[0] - d - 1:span[0] - d + len(span)]
                         == ids[span[0] - 1:span[-1] + 1]))
    assert labelled > 200 * 7 and len(offsets) > 20   # no one offset to learn instead of copying


def test_a_sequence_follows_the_start_it_is_given():
    ids, labels = copy_warmup.batch(random.Random(0), list(range(100, 140)), 3, 64, start=[7])
    assert ids.shape == labels.shape == (3, 65) and (ids[:, 0] == 7).all() and (labels[:, :2] == -100).all()


def test_the_warmed_model_is_a_checkpoint_sft_loads(tiny_models, tmp_path):
    out = tmp_path / "warm"
    log = copy_warmup.main(["--ckpt", tiny_models["qwen2_5_vl"], "--out", str(out), "--steps", "4",
                            "--batch-size", "2", "--length", "32", "--log-every", "2"])
    assert [r["step"] for r in log] == [2, 4] and all(0 <= r["copy_accuracy"] <= 1 for r in log)
    model, processor, _ = train_sft.load_model(str(out), torch.device("cpu"))
    start = train_sft.load_model(tiny_models["qwen2_5_vl"], torch.device("cpu"))[0]
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, start.state_dict()[k])]
    assert changed and (out / "copy_warmup.json").exists()
