"""metrics.py export: a dataset folder as Parquet files + a dataset card that datasets.load_dataset reads back,
record for record and byte for byte; bad input refused with one line (exit 2) and nothing written."""
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, make_toy_dataset

import metrics

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def export(src, out, capsys=None):
    metrics._main(["export", *([src] if isinstance(src, str) else src), "--out", out])
    return capsys.readouterr().out if capsys else None


def load(out, tmp_path):
    """The exported folder as the Hub would serve it, each screenshot's PNG bytes and path undecoded."""
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(out, cache_dir=str(tmp_path / "hf-cache"))
    return {split: ds[split].cast_column("image", datasets.Image(decode=False)) for split in ds}


def rebuilt(row):
    """The episode (without steps) and the step a row was made from: the columns, the JSON ones parsed,
    `extra` over them; a paraphrase alone stands for guide_alt."""
    extra = json.loads(row["extra"])
    head = {k: row[k] for k in metrics.EPISODE_COLUMNS} | {"meta": json.loads(row["meta"])} | extra["episode"]
    alt = {"paraphrase": row["paraphrase"]} if row["paraphrase"] is not None else None
    step = {k: row[k] for k in metrics.STEP_COLUMNS} | {"elements": json.loads(row["elements"]), "guide_alt": alt,
                                                       "screenshot": row["image"]["path"]} | extra["step"]
    return head, step


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The toy dataset with keys no column holds (an episode's error, a step's guide_meta and exec_error, a
    guide_alt with its author), one episode without a split, and a benchmark verdict beside it; exported."""
    pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("export")
    src = make_toy_dataset(str(root / "toy"))
    episodes = metrics.load_dataset(src)
    episodes[0]["error"] = None
    episodes[0]["meta"] = {"policy": "expert", "seconds": 1.5, "blocked": ["http://x/é"]}
    episodes[1]["steps"][0].update(guide_meta={"drafter": "template", "n": 3}, exec_error="timeout")
    episodes[1]["steps"][1]["guide_alt"]["paraphrase_by"] = "template"
    episodes[2]["steps"][2]["guide_alt"] = None
    del episodes[2]["split"]   # a val episode in the toy: without a split it goes to train
    metrics.write_dataset(src, episodes)
    with open(os.path.join(src, "benchmark.json"), "w") as f:
        json.dump({"benchmark": "mag-bench", "version": "1.0", "split": "val", "fingerprint": "ab12" * 16,
                   "matches": True, "differences": []}, f)
    out = str(root / "out")
    metrics._main(["export", src, "--out", out])
    return src, out


def test_export_round_trips_every_step_and_png(exported, tmp_path):
    src, out = exported
    episodes = metrics.load_dataset(src)
    ds = load(out, tmp_path)
    want = {}
    for ep in episodes:
        want.setdefault(ep.get("split", "train"), []).extend((ep, step) for step in ep["steps"])
    assert {split: len(rows) for split, rows in ds.items()} == {"train": 15, "val": 3, "test": 6}
    assert {split: len(steps) for split, steps in want.items()} == {split: len(ds[split]) for split in ds}
    for split, rows in ds.items():
        for row, (ep, step) in zip(rows, want[split], strict=True):
            head, got = rebuilt(row)
            expected = {k: v for k, v in ep.items() if k not in ("steps", "_root")}
            assert head == dict(expected, split=ep.get("split", "train"))
            # canonical JSON: the same keys and values, integers still integers
            assert json.dumps(got, sort_keys=True) == json.dumps(step, sort_keys=True)
            with open(os.path.join(src, step["screenshot"]), "rb") as f:
                assert row["image"]["bytes"] == f.read()
    assert json.loads(ds["train"][0]["meta"])["blocked"] == ["http://x/é"]


def test_export_card_names_splits_counts_and_provenance(exported):
    yaml = pytest.importorskip("yaml")
    src, out = exported
    with open(os.path.join(out, "README.md"), encoding="utf-8") as f:
        text = f.read()
    _, header, body = text.split("---\n", 2)
    card = yaml.safe_load(header)
    assert card["license"] == "other"
    assert card["configs"] == [{"config_name": "default", "data_files": [
        {"split": s, "path": f"data/{s}-*"} for s in ("train", "val", "test")]}]
    assert {s["name"]: s["num_examples"] for s in card["dataset_info"]["splits"]} == {"train": 15, "val": 3,
                                                                                     "test": 6}
    assert [f["name"] for f in card["dataset_info"]["features"]][:3] == ["id", "suite", "task"]
    assert sorted(os.listdir(os.path.join(out, "data"))) == [
        f"{s}-00000-of-00001.parquet" for s in ("test", "train", "val")]
    assert f"python collect.py --benchmark mag-bench --split val --out {src}" in body
    assert "ab12" * 16 in body and "byte for byte" in body
    assert f'datasets.load_dataset("{out}")' in body and 'row = ds["train"][0]' in body and "BSD-3-Clause" in body
    assert "guides on all 24 of 24 steps (auto 24); 1 of 8 episodes record no split (exported as `train`)" in body
    assert "$" not in body   # every placeholder of assets/dataset_card.md filled


def card_snippet(out, tmp_path):
    """The card's loading snippet, run as printed (only the cache folder added)."""
    with open(os.path.join(out, "README.md"), encoding="utf-8") as f:
        code = f.read().split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(code.replace(f'load_dataset("{out}")', f'load_dataset("{out}", cache_dir="{tmp_path / "hf"}")'), scope)
    return scope, code


def test_export_of_an_unannotated_test_only_shard_says_so_and_its_snippet_runs(tmp_path):
    """A shard built without guides, every episode in test: the card's snippet reads ds["test"] (no KeyError on
    a missing train) and the card claims no guides and no whole split."""
    pytest.importorskip("datasets")
    src = make_toy_dataset(str(tmp_path / "toy"), n_episodes=3)
    episodes = metrics.load_dataset(src)
    for ep in episodes:
        ep["split"] = "test"
        for step in ep["steps"]:
            step.update(guide=None, guide_status=None, guide_alt=None)
    metrics.write_dataset(src, episodes)
    with open(os.path.join(src, "benchmark.json"), "w") as f:
        json.dump({"benchmark": "mag-bench", "version": "1.0", "split": "test", "shard": [2, 4],
                   "fingerprint": None, "matches": True, "differences": []}, f)
    out = str(tmp_path / "out")
    export(src, out)
    scope, code = card_snippet(out, tmp_path)
    assert 'ds["test"][0]' in code and scope["row"]["id"] == "toy.buttons.0"
    assert json.loads(scope["row"]["elements"])[0]["mark"] == 1
    with open(os.path.join(out, "README.md"), encoding="utf-8") as f:
        body = f.read()
    assert f"--split test --shard 2/4 --out {src}` (mag-bench 1.0: shard 2/4: 3 episodes, a part of " \
           "the split, each matching the split's); no guides (not annotated: every `guide` is null)" in body
    assert "its guides written" not in body and "its split, byte for byte" not in body


def test_export_cuts_a_split_into_files(tmp_path, monkeypatch, capsys):
    pytest.importorskip("datasets")
    src = make_toy_dataset(str(tmp_path / "toy"))
    monkeypatch.setattr(metrics, "SHARD_BYTES", 4000)   # a toy screenshot is about 1.6 kB
    said = export(src, str(tmp_path / "out"), capsys)
    names = sorted(os.listdir(tmp_path / "out" / "data"))
    train = [n for n in names if n.startswith("train-")]
    assert len(train) > 2 and train == [f"train-{i:05d}-of-{len(train):05d}.parquet" for i in range(len(train))]
    ds = load(str(tmp_path / "out"), tmp_path)
    steps = [(ep["id"], k) for ep, k in metrics.iter_steps(metrics.load_dataset(src)) if ep["split"] == "train"]
    assert [(row["id"], row["step"]) for row in ds["train"]] == steps
    assert said.startswith("export: 8 episodes, steps train 12, val 6, test 6;")


def corrupt_png(src):
    with open(os.path.join(src, "img", "toy.buttons.1", "2.png"), "r+b") as f:
        f.truncate(200)
    return os.path.join(src, "img", "toy.buttons.1", "2.png")


def bad_json_line(src):
    with open(os.path.join(src, "episodes.jsonl"), "a") as f:
        f.write("{not json\n")
    return os.path.join(src, "episodes.jsonl") + ":9"


@pytest.mark.parametrize("damage", [corrupt_png, bad_json_line])
def test_export_refuses_a_broken_source(tmp_path, damage):
    pytest.importorskip("datasets")
    src = make_toy_dataset(str(tmp_path / "toy"))
    where = damage(src)
    out = str(tmp_path / "out")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "metrics.py"), "export", src, "--out", out],
                         capture_output=True, text=True)
    assert run.returncode == 2 and where in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not os.path.exists(out) and not os.path.exists(out + ".tmp")


def test_export_refuses_an_existing_out_and_an_id_twice(tmp_path, capsys):
    pytest.importorskip("datasets")
    src = make_toy_dataset(str(tmp_path / "toy"))
    os.makedirs(tmp_path / "out")
    with pytest.raises(SystemExit) as e:
        export(src, str(tmp_path / "out"))
    assert e.value.code == 2 and "already exists" in capsys.readouterr().err
    assert os.listdir(tmp_path / "out") == []
    with pytest.raises(SystemExit) as e:
        export([src, src], str(tmp_path / "twice"))
    assert e.value.code == 2 and f"episode 'toy.buttons.0' is in {src} too" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "twice")


def test_export_without_datasets_names_the_pip_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)   # `import datasets` raises ImportError
    src = make_toy_dataset(str(tmp_path / "toy"))
    with pytest.raises(SystemExit) as e:
        export(src, str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert e.value.code == 2 and "pip install datasets" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "out")
