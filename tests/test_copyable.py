"""The card's promise that a stage can be copied into another project: train_grpo.py + metrics.py
(+ replay.py for the offline guide reward), train_sft.py + metrics.py and replay.py + metrics.py each
run from an empty folder; a copy without the file a flag needs says which file at start-up; every
stage's --help prints its runbook."""
import importlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("collect", "annotate", "train_sft", "train_grpo", "evaluate", "replay")


def copied(tmp_path, *files):
    """An empty folder holding only `files`, copied from the repository."""
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in files:
        shutil.copy(os.path.join(ROOT, name), folder / name)
    return folder


def run_in(folder, script, *argv):
    """`python script argv` in `folder`, with nothing of the repository on the import path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1",
                                                                         "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, script, *map(str, argv)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)


def test_train_grpo_runs_from_a_copy(tiny_models, toy_data, tmp_path):
    folder = copied(tmp_path, "train_grpo.py", "metrics.py", "replay.py")
    out = folder / "grpo"
    done = run_in(folder, "train_grpo.py", "--ckpt", tiny_models["qwen2_5_vl"], "--data", toy_data, "--out", out,
                  "--split", "all", "--group-size", 2, "--prompts-per-step", 1, "--max-new-tokens", 8,
                  "--max-steps", 2, "--guide-reward", "offline", "--drop-groups", "reward", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(f"{out}.log.jsonl") as f:
        log = [json.loads(line) for line in f]
    assert [r["step"] for r in log] == [1, 2] and all(r["guide"] < 0 for r in log)  # replay's log-probability
    assert all({"dropped_frac", "same_accuracy_frac", "same_reward_frac"} <= r.keys() for r in log)
    assert os.path.exists(out / "model.safetensors")


def test_train_sft_runs_from_a_copy(tiny_models, toy_data, tmp_path):
    folder = copied(tmp_path, "train_sft.py", "metrics.py")
    done = run_in(folder, "train_sft.py", "--ckpt", tiny_models["qwen2_5_vl"], "--data", toy_data, "--out", "sft",
                  "--split", "all", "--val-split", "", "--batch-size", 2, "--max-steps", 2, "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.path.exists(folder / "sft" / "model.safetensors")


def test_replay_runs_from_a_copy(tiny_models, toy_data, tmp_path):
    folder = copied(tmp_path, "replay.py", "metrics.py")
    done = run_in(folder, "replay.py", "--ckpt", tiny_models["qwen2_5_vl"], "--data", toy_data, "--out", "r",
                  "--limit", 2, "--max-new-tokens", 8)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(folder / "r" / "results.json") as f:
        assert json.load(f)


@pytest.mark.parametrize("flag, missing", [(["--guide-reward", "offline"], "replay.py"),
                                           (["--env", "live"], "collect.py")])
def test_train_grpo_names_the_file_a_flag_needs(tmp_path, flag, missing):
    """Without the file, the run stops at start-up -- before the (here missing) data and checkpoint are read
    -- with one line naming the file to copy (it was a ModuleNotFoundError inside the first rollout)."""
    folder = copied(tmp_path, "train_grpo.py", "metrics.py")
    done = run_in(folder, "train_grpo.py", "--ckpt", "no_ckpt", "--data", "no_data", "--out", "o", *flag)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"{' '.join(flag)} needs {missing} beside train_grpo.py: "
                                   "copy it from the MAG repository")


@pytest.mark.parametrize("stage", STAGES)
def test_help_prints_the_runbook(stage, capsys):
    """--help prints the whole docstring (it printed its first line): the runbook's commands are in it."""
    module = importlib.import_module(stage)
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    text = capsys.readouterr().out
    assert "Runbook" in text and f"python {stage}.py" in text
    runbook = module.__doc__.split("Runbook")[1].strip().splitlines()[0]
    assert runbook in text
    # a command continued with a backslash stays on two lines; a docstring that is not raw joined them with
    # the next line's indent ("--episodes 2                              --out /tmp/mag-smoke")
    joined = [line for line in text.splitlines() if re.search(r"(python|torchrun) .*\S {3,}--[a-z]", line)]
    assert not joined, joined
    source = open(module.__file__, encoding="utf-8").read()
    continued = [line.rstrip() for line in source.split('"""')[1].splitlines() if line.endswith("\\")]
    assert all(line in text for line in continued), continued
