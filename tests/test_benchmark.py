"""MAG-Bench at a small scale: a definition with a handful of tasks and seeds over two suites, built twice
to the same fingerprint, a changed screenshot or record named, replay refusing data that is not the
benchmark's, and the expert scoring 100 % live."""
import json
import os
import shutil

import pytest
from conftest import make_toy_dataset

import collect
import evaluate
import metrics
import replay

SMALL = {
    "benchmark": "mag-small", "version": "0.1",
    "protocol": {"observation": None, "run": dict(collect.RUN_DEFAULTS)},
    "suites": {"miniwob": ["click-button", "login-user"], "backoffice": ["close-ticket"]},
    "splits": {"train": {"seeds": {"miniwob": [0, 2], "backoffice": [0, 1]}, "guides": "template"},
               "test": {"seeds": {"miniwob": [100, 2], "backoffice": [100, 1]}, "guides": "template"}},
}


def write_definition(folder, **changes):
    bench = json.loads(json.dumps(SMALL))
    bench["protocol"]["observation"] = metrics.observation_version()
    bench.update(changes)
    path = os.path.join(folder, "mag-small.json")
    with open(path, "w") as f:
        json.dump(bench, f)
    return path


# ----------------------------------------------------------------------------------------------
# The definition and the fingerprint, without a browser.

@pytest.mark.parametrize("change, message", [
    ({"splits": {"train": {"seeds": {"miniwob": [0, 5], "backoffice": [0, 1]}, "guides": "template"},
                 "test": {"seeds": {"miniwob": [4, 2], "backoffice": [9, 1]}, "guides": "template"}}},
     "test seeds of miniwob are training seeds too: [4]"),
    ({"splits": {"test": {"seeds": {"miniwob": [0, 1]}, "guides": "template"}}}, "test backoffice: seeds must be"),
    ({"splits": {"dev": {"seeds": {}, "guides": "template"}}}, "unknown split 'dev'"),
    ({"splits": {"test": {"seeds": {"miniwob": [0, 1], "backoffice": [0, 1]}, "guides": "llm"}}},
     "guides must be one of"),
    ({"protocol": {"run": {"max_steps": 30}}}, "protocol.run must set exactly"),
])
def test_a_broken_definition_is_refused_by_name(tmp_path, change, message):
    path = write_definition(tmp_path, **change)
    with pytest.raises(metrics.DatasetError, match="mag-small.json") as e:
        metrics.load_benchmark(path)
    assert message in str(e.value)


def test_the_job_list_follows_the_definition(tmp_path):
    bench = metrics.load_benchmark(write_definition(tmp_path))
    assert metrics.benchmark_jobs(bench, "test") == [
        ("miniwob", "click-button", 100), ("miniwob", "click-button", 101), ("miniwob", "login-user", 100),
        ("miniwob", "login-user", 101), ("backoffice", "close-ticket", 100)]
    with pytest.raises(metrics.DatasetError, match="no split 'val'"):
        metrics.benchmark_jobs(bench, "val")
    with pytest.raises(metrics.DatasetError, match="no definition at"):
        metrics.load_benchmark("no-such-benchmark")


def test_a_changed_screenshot_or_record_is_named(tmp_path):
    data = make_toy_dataset(str(tmp_path / "data"), n_episodes=4)
    reference = metrics.data_manifest(data)
    assert metrics.differences(reference, reference) == []
    copy = shutil.copytree(data, tmp_path / "copy")
    with open(copy / "img" / "toy.buttons.2" / "1.png", "ab") as f:
        f.write(b"\0")
    assert metrics.differences(metrics.data_manifest(str(copy)), reference) == [
        "episode toy.buttons.2 step 1: the screenshot img/toy.buttons.2/1.png differs"]
    episodes = metrics.load_dataset(data)
    episodes[1]["steps"][2]["guide"] = "Another sentence."
    episodes[3]["meta"] = {"seconds": 9.9}   # meta is not the benchmark's
    changed = metrics.data_manifest(data, episodes)
    assert metrics.differences(changed, reference) == [
        "episode toy.buttons.1 step 2: the step's record differs (elements, action, guide ...)"]
    episodes[0]["instruction"] = "Something else."
    found = metrics.differences(metrics.data_manifest(data, episodes), reference)
    assert len(found) == 2 and "episode toy.buttons.0: its record differs" in found[0]
    assert metrics.describe_differences(found).startswith("2 episodes differ; the first: episode toy.buttons.0")
    assert metrics.differences(reference[1:] + [dict(reference[0], id="toy.other.0")], reference) == [
        "episode toy.buttons.0 is missing", "episode toy.other.0 is not in the benchmark"]
    assert metrics.fingerprint(reference) != metrics.fingerprint(changed)
    os.remove(copy / "img" / "toy.buttons.3" / "0.png")
    with pytest.raises(metrics.DatasetError, match="toy.buttons.3's screenshot img/toy.buttons.3/0.png"):
        metrics.data_manifest(str(copy))


# ----------------------------------------------------------------------------------------------
# Built, checked, scored: one build of the test split per module, in a real browser.

@pytest.fixture(scope="module")
def built(tmp_path_factory, django_cache):
    """The small benchmark's test split built and frozen (the reference), then built again from scratch."""
    root = tmp_path_factory.mktemp("bench")
    definition = write_definition(root)
    first, second = root / "first", root / "second"
    collect.main(["--benchmark", definition, "--split", "test", "--out", str(first), "--workers", "2",
                  "--freeze", "--no-progress"])
    collect.main(["--benchmark", definition, "--split", "test", "--out", str(second), "--workers", "1",
                  "--no-progress"])
    return definition, first, second


def test_two_builds_have_one_fingerprint(built):
    definition, first, second = built
    bench = metrics.load_benchmark(definition)
    test = bench["splits"]["test"]
    assert (test["episodes"], len(test["fingerprint"])) == (5, 64)
    assert os.path.exists(os.path.join(tmp := os.path.dirname(definition), "mag-small", "test.jsonl")), tmp
    for folder in (first, second):
        with open(folder / "benchmark.json") as f:
            verdict = json.load(f)
        assert verdict["matches"] and verdict["fingerprint"] == test["fingerprint"]
    episodes = metrics.load_dataset(str(second))
    assert {ep["split"] for ep in episodes} == {"test"} and all(ep["success"] for ep in episodes)
    steps = [s for ep in episodes for s in ep["steps"]]
    assert len(steps) == test["steps"]
    assert all(s["guide"] and s["guide_status"] == "auto" and s["guide_alt"]["paraphrase"] for s in steps)
    with pytest.raises(metrics.DatasetError, match="frozen already"):
        metrics.freeze_benchmark(bench, "test", metrics.data_manifest(str(second)))


def changed_copy(first, folder):
    """A copy of a built split with one screenshot of its back-office episode replaced -> (its id, the shot)."""
    copy = shutil.copytree(first, folder)
    ep = next(ep for ep in metrics.load_dataset(str(copy)) if ep["suite"] == "backoffice")
    shot = ep["steps"][3]["screenshot"]
    shutil.copyfile(copy / ep["steps"][0]["screenshot"], copy / shot)
    return copy, ep["id"], shot


def test_a_changed_copy_is_not_the_benchmark(built, tmp_path):
    definition, first, _ = built
    copy, steps_of, shot = changed_copy(first, tmp_path / "copy")   # same size, other pixels
    with pytest.raises(SystemExit, match=f"is NOT mag-small test: episode .* the screenshot {shot} differs"):
        collect.main(["--benchmark", definition, "--split", "test", "--out", str(copy), "--resume",
                      "--reruns", "0", "--no-progress"])
    with open(copy / "benchmark.json") as f:
        verdict = json.load(f)
    assert not verdict["matches"]
    assert verdict["differences"] == [f"episode {steps_of} step 3: the screenshot {shot} differs"]
    # replay refuses it before loading any model
    with pytest.raises(SystemExit, match=f"is not mag-small's test split .*{shot}"):
        replay.main(["--benchmark", definition, "--ckpt", str(tmp_path / "none"), "--data", str(copy),
                     "--out", str(tmp_path / "run")])


def test_a_departing_episode_is_run_again_and_kept_aside(built, tmp_path, capsys):
    definition, first, _ = built
    copy, ep_id, shot = changed_copy(first, tmp_path / "copy")
    changed = (copy / shot).read_bytes()
    collect.main(["--benchmark", definition, "--split", "test", "--out", str(copy), "--resume", "--no-progress"])
    assert f"1 episodes depart from the frozen split; run again (1 of 4), the departed copies in " \
           f"{copy}/departed/1: {ep_id}" in capsys.readouterr().out
    with open(copy / "benchmark.json") as f:
        assert json.load(f)["matches"]
    assert (copy / shot).read_bytes() == (first / shot).read_bytes()
    # nothing is lost: the departed record, screenshots and drafts are in departed/1
    assert (copy / "departed" / "1" / shot).read_bytes() == changed
    assert [ep["id"] for ep in metrics.load_dataset(str(copy / "departed" / "1"))] == [ep_id]
    with open(copy / "departed" / "1" / "drafts.jsonl") as f:
        assert {json.loads(line)["episode"] for line in f} == {ep_id}
    assert sorted(ep["id"] for ep in metrics.load_dataset(str(copy))) == \
        sorted(ep["id"] for ep in metrics.load_dataset(str(first)))


def test_an_episode_that_departs_on_every_rerun_is_named(built, tmp_path):
    """A reference no rerun can give (its manifest says another screenshot): two tries, then the verdict."""
    definition, first, _ = built
    root = tmp_path / "bench"
    shutil.copytree(os.path.dirname(definition), root, ignore=shutil.ignore_patterns("first", "second"))
    definition = str(root / "mag-small.json")
    bench = metrics.load_benchmark(definition)
    manifest = metrics.read_manifest(bench, "test")
    row = next(r for r in manifest if r["id"].startswith("backoffice."))
    row["steps"][3][1] = "0" * 12
    with open(metrics.manifest_path(bench, "test"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in manifest)
    with open(definition) as f:
        text = json.load(f)
    text["splits"]["test"]["fingerprint"] = metrics.fingerprint(manifest)
    with open(definition, "w") as f:
        json.dump(text, f)
    copy = shutil.copytree(first, tmp_path / "copy")
    with pytest.raises(SystemExit, match=f"is NOT mag-small test: episode {row['id']} step 3: the screenshot"):
        collect.main(["--benchmark", definition, "--split", "test", "--out", str(copy), "--resume",
                      "--reruns", "1", "--no-progress"])
    assert [ep["id"] for ep in metrics.load_dataset(str(copy / "departed" / "1"))] == [row["id"]]
    assert not (copy / "departed" / "2").exists()


def test_replay_scores_the_benchmark_per_suite(built, tiny_models, tmp_path):
    definition, first, _ = built
    results = replay.main(["--benchmark", definition, "--ckpt", tiny_models["qwen2_5_vl"], "--data", str(first),
                           "--max-new-tokens", "8", "--batch-size", "8", "--out", str(tmp_path / "run"),
                           "--no-progress"])
    bench = results["benchmark"]
    assert (bench["name"], bench["split"]) == ("mag-small", "test")
    assert bench["fingerprint"] == metrics.load_benchmark(definition)["splits"]["test"]["fingerprint"]
    scores = bench["scores"]
    assert list(scores) == ["overall", "backoffice", "miniwob"]   # the episodes' order: by id
    assert (scores["miniwob"]["episodes"], scores["backoffice"]["episodes"]) == (4, 1)
    assert scores["overall"]["steps"] == scores["miniwob"]["steps"] + scores["backoffice"]["steps"]
    for row in scores.values():
        lo, hi = row["task_success"]["micro_ci"]
        assert lo <= row["task_success"]["micro"] <= hi


def test_the_expert_scores_100_percent_live(built, tmp_path):
    definition, _, _ = built
    out = tmp_path / "live"
    res = evaluate.main(["--benchmark", definition, "--policy", "expert", "--workers", "2", "--out", str(out),
                         "--no-progress"])
    assert res["episodes"] == 5 and res["overall"]["success"]["micro"] == 1.0
    assert {s: v["success"]["micro"] for s, v in res["by_suite"].items()} == {"miniwob": 1.0, "backoffice": 1.0}
    assert "backoffice/close-ticket" in res["by_task"]
    with open(out / "report.html") as f:
        assert "<h2>Per suite</h2>" in f.read()
    again = evaluate.main(["--report", str(out)])   # rendered again from the folder and the definition
    assert again["by_suite"] == res["by_suite"]


def test_the_shipped_definition_and_its_manifests_agree():
    """tasks/mag-v1.json: each frozen split's manifest is the definition's job list, fingerprint and sizes."""
    bench = metrics.load_benchmark("mag-v1")
    frozen = [split for split, spec in bench["splits"].items() if spec.get("fingerprint")]
    assert "test" in frozen
    for split in frozen:
        spec, manifest = bench["splits"][split], metrics.read_manifest(bench, split)
        assert metrics.fingerprint(manifest) == spec["fingerprint"], split
        assert [row["id"] for row in manifest] == sorted(metrics.episode_id(*job)
                                                         for job in metrics.benchmark_jobs(bench, split))
        assert (len(manifest), sum(len(row["steps"]) for row in manifest)) == (spec["episodes"], spec["steps"])
