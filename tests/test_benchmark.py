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
        "episode toy.buttons.2 step 1: screenshot img/toy.buttons.2/1.png"]
    episodes = metrics.load_dataset(data)
    episodes[1]["steps"][2]["guide"] = "Another sentence."
    episodes[3]["meta"] = {"seconds": 9.9}   # meta is not the benchmark's
    changed = metrics.data_manifest(data, episodes)
    assert metrics.differences(changed, reference) == ["episode toy.buttons.1 step 2: guide"]
    episodes[0]["instruction"] = "Something else."
    found = metrics.differences(metrics.data_manifest(data, episodes), reference)
    assert len(found) == 2 and "episode toy.buttons.0: its record differs" in found[0]
    assert metrics.describe_differences(found) == (
        f"2 episodes differ: {found[0]} | episode toy.buttons.1 step 2: guide")
    assert metrics.differences(reference[1:] + [dict(reference[0], id="toy.other.0")], reference) == [
        "episode toy.buttons.0 is missing", "episode toy.other.0 is not in the benchmark"]
    assert metrics.fingerprint(reference) != metrics.fingerprint(changed)
    os.remove(copy / "img" / "toy.buttons.3" / "0.png")
    with pytest.raises(metrics.DatasetError, match="toy.buttons.3's screenshot img/toy.buttons.3/0.png"):
        metrics.data_manifest(str(copy))


def test_every_differing_field_and_the_first_differing_mark_are_named(tmp_path):
    """Elements read before a table filled, an edited action and url, a flipped PNG byte: all named, each
    episode listed; a manifest without per-field hashes (mag-v1's) still says which step."""
    data = make_toy_dataset(str(tmp_path / "data"), n_episodes=3)
    reference = metrics.data_manifest(data)
    episodes = metrics.load_dataset(data)
    step = episodes[0]["steps"][1]
    assert len(step["elements"]) >= 2
    step["elements"] = step["elements"][:1] + [dict(step["elements"][1], text="Collapse all")] + \
        step["elements"][1:]
    step["action"] = dict(step["action"], value="other")
    for later in episodes[0]["steps"][2:]:
        later["url"] = "http://127.0.0.1/elsewhere"
    episodes[2]["steps"][0]["guide_status"] = "edited"
    found = metrics.differences(metrics.data_manifest(data, episodes), reference)
    n = len(step["elements"])
    more = len(episodes[0]["steps"]) - 1
    assert found == [f"episode toy.buttons.0 step 1: elements (from mark 2, {n} marks here, {n - 1} in the "
                     f"benchmark), action; {more} steps differ",
                     "episode toy.buttons.2 step 0: other"]
    assert metrics.describe_differences(found) == f"2 episodes differ: {found[0]} | {found[1]}"
    bare = [{k: v for k, v in row.items() if k != "detail"} for row in reference]
    assert metrics.fingerprint(bare) == metrics.fingerprint(reference)   # the fingerprint leaves detail out
    assert metrics.differences(metrics.data_manifest(data, episodes), bare)[1] == \
        "episode toy.buttons.2 step 0: the step's record (this manifest names no fields)"
    missing = metrics.differences(reference[:1], reference)
    assert metrics.describe_differences(missing) == \
        "2 episodes differ: 2 episodes are missing (the first: toy.buttons.1)"


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
    with pytest.raises(SystemExit, match=f"is NOT mag-small test: episode .* screenshot {shot}"):
        collect.main(["--benchmark", definition, "--split", "test", "--out", str(copy), "--resume",
                      "--reruns", "0", "--no-progress"])
    with open(copy / "benchmark.json") as f:
        verdict = json.load(f)
    assert not verdict["matches"]
    assert verdict["differences"] == [f"episode {steps_of} step 3: screenshot {shot}"]
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
    with pytest.raises(SystemExit, match=f"is NOT mag-small test: episode {row['id']} step 3: screenshot img"):
        collect.main(["--benchmark", definition, "--split", "test", "--out", str(copy), "--resume",
                      "--reruns", "1", "--no-progress"])
    assert [ep["id"] for ep in metrics.load_dataset(str(copy / "departed" / "1"))] == [row["id"]]
    assert not (copy / "departed" / "2").exists()


def build_shard(definition, out, k, *argv):
    return collect.main(["--benchmark", definition, "--split", "test", "--shard", f"{k}/2", "--out", str(out),
                         "--no-progress", *argv])


def test_two_shards_check_themselves_and_merge_into_the_split(built, tmp_path, capsys):
    definition, _, _ = built
    parts = [str(tmp_path / f"part{k}") for k in (1, 2)]
    lasts = []
    for k, part in enumerate(parts, 1):
        build_shard(definition, part, k)
        lasts.append(capsys.readouterr().out.strip().splitlines()[-1])   # the verdict ends the output
    assert lasts == ["benchmark: 3 of 3 episodes of shard 1/2 of mag-small test match",
                     "benchmark: 2 of 2 episodes of shard 2/2 of mag-small test match"]
    with open(os.path.join(parts[0], "benchmark.json")) as f:
        verdict = json.load(f)
    assert verdict["shard"] == [1, 2] and verdict["matches"] and verdict["fingerprint"] is None
    assert os.path.exists(os.path.join(parts[0], "drafts.jsonl"))   # the shard's guides: no block on merging
    # replay on a shard: how many are present, and that they match
    with pytest.raises(SystemExit, match=r"holds 3 of the 5 episodes of mag-small's test split \(all 3 match\)"):
        replay.main(["--benchmark", definition, "--ckpt", str(tmp_path / "none"), "--data", parts[0],
                     "--out", str(tmp_path / "run")])
    line = metrics.merge_datasets(str(tmp_path / "all"), parts)
    digest = metrics.load_benchmark(definition)["splits"]["test"]["fingerprint"]
    assert f"5 episodes from 2 folders (0 duplicates dropped) -> {tmp_path / 'all'}; mag-small test, byte for " \
           f"byte (fingerprint {digest})" in line
    with open(tmp_path / "all" / "benchmark.json") as f:
        merged = json.load(f)
    assert (merged["fingerprint"], merged["matches"], merged["shard"]) == (digest, True, None)


def test_a_shard_reruns_its_departing_episode_and_names_every_corrupted_field(built, tmp_path, capsys):
    definition, first, _ = built
    part = tmp_path / "part1"
    build_shard(definition, part, 1)
    copy, ep_id, shot = changed_copy(part, tmp_path / "copy")
    build_shard(definition, copy, 1, "--resume")
    printed = capsys.readouterr().out
    assert f"1 episodes depart from the frozen split; run again (1 of 4), the departed copies in {copy}/departed/1: " \
           f"{ep_id}" in printed and "benchmark: 3 of 3 episodes of shard 1/2 of mag-small test match" in printed
    assert (copy / shot).read_bytes() == (first / shot).read_bytes()
    # two corruptions in two episodes: both named, each with its field
    episodes = metrics.load_dataset(str(copy))
    guided = next(ep for ep in episodes if ep["id"] != ep_id)
    guided["steps"][0]["guide"] = "Another sentence."
    metrics.write_dataset(str(copy), episodes)
    with open(copy / shot, "ab") as f:
        f.write(b"\0")
    with pytest.raises(SystemExit) as e:
        build_shard(definition, copy, 1, "--resume", "--reruns", "0")
    assert f"is NOT shard 1/2 of mag-small test: 2 episodes differ: episode {ep_id} step 3: screenshot {shot}" \
        in str(e.value)
    assert f"episode {guided['id']} step 0: guide" in str(e.value)


def test_steps_that_never_settled_are_flagged_and_counted(built, tmp_path, capsys, monkeypatch):
    """A step whose observations never agree is recorded all the same, flagged in its episode's meta (outside
    the fingerprint) and counted in the build's verdict and benchmark.json."""
    definition, _, _ = built
    real = collect.observe_agreed

    async def restless_first_step(page, env, cap_ms, quiet_ms):
        *obs, agreed = await real(page, env, cap_ms, quiet_ms)
        return (*obs, agreed and page.url.endswith("login-user.html"))   # click-button's steps: never agreed
    monkeypatch.setattr(collect, "observe_agreed", restless_first_step)
    build_shard(definition, tmp_path / "part2", 2)
    episodes = {ep["task"]: ep for ep in metrics.load_dataset(str(tmp_path / "part2"))}
    flagged = list(range(len(episodes["click-button"]["steps"])))
    assert episodes["click-button"]["meta"]["unsettled"] == flagged
    assert "unsettled" not in episodes["login-user"]["meta"]
    assert f"benchmark: 2 of 2 episodes of shard 2/2 of mag-small test match; {len(flagged)} steps never settled" \
        in capsys.readouterr().out
    with open(tmp_path / "part2" / "benchmark.json") as f:
        assert json.load(f)["unsettled_steps"] == len(flagged)


def test_freezing_a_frozen_split_or_naming_no_definition_is_one_line_before_any_work(built, tmp_path, capsys):
    definition, _, _ = built
    for argv, message in ((["--benchmark", definition, "--split", "test", "--freeze"], "test split is frozen already"),
                          (["--benchmark", str(tmp_path / "no.json"), "--split", "test"], "no definition at")):
        with pytest.raises(SystemExit) as e:
            collect.main(argv + ["--out", str(tmp_path / "out"), "--no-progress"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err and "Traceback" not in err
        assert not (tmp_path / "out").exists()   # refused before the build


def test_a_shard_of_a_split_not_frozen_is_built_and_says_so(built, tmp_path, capsys):
    definition, _, _ = built
    collect.main(["--benchmark", definition, "--split", "train", "--shard", "2/2", "--out", str(tmp_path / "p"),
                  "--no-progress"])
    assert "benchmark: 2 episodes of shard 2/2 of mag-small train built; the definition has no fingerprint for " \
           "train yet" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--freeze records a whole split"):
        collect.main(["--benchmark", definition, "--split", "train", "--shard", "2/2", "--out", str(tmp_path / "p"),
                      "--resume", "--freeze"])


def test_another_browser_is_refused_before_any_work(tmp_path, capsys):
    path = write_definition(tmp_path)
    with open(path) as f:
        definition = json.load(f)
    definition["protocol"].update(browser="Chromium 99.0.1.2 (elsewhere)", observation="0123456789ab",
                                  harness_commit="1210646")
    with open(path, "w") as f:
        json.dump(definition, f)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        collect.main(["--benchmark", path, "--split", "test", "--out", str(out), "--no-progress"])
    assert str(e.value).startswith(f"collect: the browser is {collect.browser_version()}, mag-small's is "
                                   "Chromium 99.0.1.2 (elsewhere); the observation snippets are "
                                   f"{metrics.observation_version()}, mag-small's are 0123456789ab (rebuild it "
                                   "with the harness of commit 1210646")
    assert "--other-browser" in str(e.value) and not out.exists()
    with pytest.raises(SystemExit) as e:   # evaluate.py's live run: the same check, before any episode
        evaluate.main(["--benchmark", path, "--policy", "random", "--out", str(out), "--no-progress"])
    assert str(e.value).startswith(f"evaluate: the browser is {collect.browser_version()}, mag-small's is ")
    assert not out.exists()
    res = evaluate.main(["--benchmark", path, "--policy", "random", "--shard", "5/5", "--out", str(out),
                         "--no-progress", "--other-browser"])
    assert res["episodes"] == 1 and res["config"]["protocol"]["comparable"] is False
    assert res["config"]["suite"] == "mag-small 0.1 (test) -- NOT comparable"
    assert "NOT comparable: the browser is" in capsys.readouterr().out


def test_replay_checks_the_builds_snippets_first_and_marks_an_override(built, tmp_path):
    definition, first, _ = built
    copy = shutil.copytree(first, tmp_path / "copy")
    with open(copy / "benchmark.json") as f:
        verdict = json.load(f)
    assert (verdict["browser"], verdict["observation"]) == (collect.browser_version(), metrics.observation_version())
    verdict["observation"] = "0123456789ab"
    (copy / "benchmark.json").write_text(json.dumps(verdict))
    argv = ["--benchmark", definition, "--baseline", "gold", "--data", str(copy), "--no-progress"]
    with pytest.raises(SystemExit, match=f"was built where the observation snippets are 0123456789ab, mag-small's "
                                         f"are {metrics.observation_version()}: .* \\(--other-browser"):
        replay.main(argv + ["--out", str(tmp_path / "refused")])
    results = replay.main(argv + ["--out", str(tmp_path / "run"), "--other-browser"])
    assert results["benchmark"]["comparable"] is False
    assert results["benchmark"]["problems"][0].startswith("the observation snippets are 0123456789ab")
    assert results["benchmark"]["scores"]["overall"]["step"]["micro"] == 1.0   # gold: the scorer's ceiling


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


@pytest.mark.parametrize("name, splits", [("mag-v1", "test,train,val"), ("mag-v1.1", "test,train,val"),
                                          ("mag-v1.2", "test,val")])
def test_the_shipped_definition_and_its_manifests_agree(name, splits):
    """tasks/<name>.json: each frozen split's manifest is the definition's job list, fingerprint and sizes."""
    bench = metrics.load_benchmark(name)
    frozen = [split for split, spec in bench["splits"].items() if spec.get("fingerprint")]
    assert ",".join(sorted(frozen)) == splits
    for split in frozen:
        spec, manifest = bench["splits"][split], metrics.read_manifest(bench, split)
        assert metrics.fingerprint(manifest) == spec["fingerprint"], split
        assert [row["id"] for row in manifest] == sorted(metrics.episode_id(*job)
                                                         for job in metrics.benchmark_jobs(bench, split))
        assert (len(manifest), sum(len(row["steps"]) for row in manifest)) == (spec["episodes"], spec["steps"])


def test_v1_2_is_v1_1_with_label_studio_added():
    """mag-v1.2 keeps v1.1's suites, tasks and seeds and adds every Label Studio task (tasks/labelstudio.json)
    on seeds of its own; only the observation and the settle's cap differ in its protocol."""
    old, new = metrics.load_benchmark("mag-v1.1"), metrics.load_benchmark("mag-v1.2")
    assert list(new["suites"]) == [*old["suites"], "labelstudio"]
    assert all(new["suites"][suite] == tasks for suite, tasks in old["suites"].items())
    with open(os.path.join(os.path.dirname(metrics.__file__), "tasks", "labelstudio.json")) as f:
        assert new["suites"]["labelstudio"] == sorted(name for name in json.load(f) if name != "_about")
    for split, spec in old["splits"].items():
        assert new["splits"][split]["seeds"] == {**spec["seeds"], "labelstudio": new["splits"][split]["seeds"][
            "labelstudio"]}
    assert new["protocol"]["observation"] == metrics.observation_version()   # main builds it
    assert {k: v for k, v in new["protocol"]["run"].items() if k != "settle_cap_ms"} == {
        k: v for k, v in old["protocol"]["run"].items() if k != "settle_cap_ms"}
    assert len(metrics.benchmark_jobs(new, "test")) == 600 + 2 * 50
