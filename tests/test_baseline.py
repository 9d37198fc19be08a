"""experiments/baseline.py on a two-task MiniWoB++ benchmark: the splits built and checked, a tiny SFT run on
train with its val curve suite by suite, replay and live runs on test, the report; a rerun redoes only what
is missing."""
import json
import os
import sys

import pytest
from conftest import make_toy_dataset

import collect
import metrics

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments"))
import baseline  # noqa: E402

TINY = {
    "benchmark": "mag-tiny", "version": "0.1",
    "protocol": {"observation": None, "run": dict(collect.RUN_DEFAULTS, max_steps=4)},
    "suites": {"miniwob": ["click-button", "login-user"]},
    "splits": {"train": {"seeds": {"miniwob": [0, 2]}, "guides": "template"},
               "val": {"seeds": {"miniwob": [50, 1]}, "guides": "template"},
               "test": {"seeds": {"miniwob": [100, 1]}, "guides": "template"}},
}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("baseline")
    definition = root / "mag-tiny.json"
    definition.write_text(json.dumps({**TINY, "protocol": {**TINY["protocol"],
                                                             "observation": metrics.observation_version()}}))
    for split in baseline.SPLITS:   # built and frozen, as a maintainer does; the study links and checks them
        collect.main(["--benchmark", str(definition), "--split", split, "--out", str(root / "ref" / split),
                      "--freeze", "--no-progress"])
    argv = ["--benchmark", str(definition), "--out", str(root / "study"), "--splits-from", str(root / "ref"),
            "--ckpt", "tiny", "--sft-steps", "4", "--sft-warmup", "1", "--batch-size", "4", "--eval-every", "2",
            "--max-new-tokens", "24"]
    return root, argv, baseline.main(argv)


def test_the_baseline_reports_every_policy_per_suite_and_its_val_curve(study):
    root, _, res = study
    out = root / "study"
    assert set(res["offline"]) == {"sft", "gold", "random"} and set(res["live"]) == {"sft", "expert", "random"}
    assert res["offline"]["gold"]["miniwob"]["step"][0] == 100 and res["live"]["expert"]["overall"]["success"][0] == 100
    for policy in res["offline"].values():
        lo_mid_hi = policy["overall"]["step"]
        assert lo_mid_hi[1] <= lo_mid_hi[0] <= lo_mid_hi[2]
    assert res["live"]["sft"]["miniwob"]["episodes"] == 2   # the test split's episodes, live
    assert [p["step"] for p in res["curve"]] == [2, 4] and all(set(p["val_step_by_suite"]) == {"miniwob"}
                                                               for p in res["curve"])
    table = (out / "table.md").read_text().splitlines()
    assert table[0] == "| policy | | miniwob | all |"
    assert table[2].startswith("| SFT from tiny (this baseline) | offline |")
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for split in baseline.SPLITS:   # each split the study read was checked: the definition's, byte for byte
        assert (out / "data" / split).resolve() == root / "ref" / split
        with open(out / "data" / split / "benchmark.json") as f:
            assert json.load(f)["matches"], split


def test_a_rerun_redoes_only_the_run_whose_output_was_lost(study, capsys):
    root, argv, res = study
    out = root / "study"
    (out / "done" / "replay" / "random").unlink()
    before = (out / "results.json").read_text()
    capsys.readouterr()
    baseline.main(argv)
    assert capsys.readouterr().out.count("done ") == 1   # reproduce.execute's one line per finished run
    assert (out / "results.json").read_text() == before   # the same numbers, every run's own files


def test_splits_built_before_are_linked_and_a_missing_one_named(tmp_path, study):
    root, argv, _ = study
    (tmp_path / "train").symlink_to(root / "ref" / "train")
    with pytest.raises(SystemExit, match="no val split there"):
        baseline.main([*argv[:2], "--out", str(tmp_path / "s"), "--splits-from", str(tmp_path)])
    plan = baseline.plan(baseline.parse_args(argv + ["--no-live"]))
    assert [r["name"] for r in plan] == ["data/train", "data/val", "data/test", "data/trainval", "ckpt/sft",
                                         "replay/sft", "replay/gold", "replay/random"]


def test_join_keeps_every_episode_and_names_a_torn_line(tmp_path, capsys):
    """data/trainval: two folders' episodes in one, screenshots hard-linked, nothing lost; a source whose last
    line was cut by a crash stops the join with that file named, and the joined folder is left as it was."""
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "joined"
    make_toy_dataset(str(a), n_episodes=3)
    make_toy_dataset(str(b), n_episodes=2, seed=1)
    eps_b = (b / "episodes.jsonl").read_text().splitlines(True)
    (b / "episodes.jsonl").write_text("".join(e.replace('"id": "', '"id": "b.') for e in eps_b))
    for d in (b / "img").iterdir():
        d.rename(b / "img" / ("b." + d.name))
    text = (b / "episodes.jsonl").read_text().replace('"img/', '"img/b.')
    (b / "episodes.jsonl").write_text(text)
    baseline.main(["join", str(out), str(a), str(b)])
    joined = metrics.load_dataset(str(out), check_images=True)
    assert len(joined) == 5 and os.stat(out / joined[0]["steps"][0]["screenshot"]).st_nlink == 2
    (b / "episodes.jsonl").write_text(text[:-40])   # a torn last line
    with pytest.raises(SystemExit):
        baseline.main(["join", str(out), str(a), str(b)])
    assert "episodes.jsonl" in capsys.readouterr().err and len(metrics.load_dataset(str(out))) == 5
