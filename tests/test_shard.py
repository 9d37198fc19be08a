"""Past one machine: --shard K/N splits collection and evaluation into disjoint parts, `metrics.py merge`
joins them (validating, de-duplicating, refusing conflicts), evaluate.py --report renders merged runs.
Three shards merged must equal one unsharded run: the same episodes, the same screenshot bytes."""
import filecmp
import json
import os
import shutil

import pytest

import collect
import evaluate
import metrics

TASKS = "click-button,enter-text"   # MiniWoB++: deterministic screenshots for a seed


def collect_run(out, *argv):
    return collect.main(["--suite", "miniwob", "--tasks", TASKS, "--episodes", "3", "--seed", "40",
                         "--out", str(out), "--no-progress", *argv])


def by_id(path):
    return {e["id"]: e for e in metrics.load_dataset(path)}


def assert_same_dataset(a_dir, b_dir):
    a, b = by_id(a_dir), by_id(b_dir)
    assert sorted(a) == sorted(b)
    for i in a:
        assert metrics._same_episode(a[i], b[i]), i
        for step in a[i]["steps"]:
            assert filecmp.cmp(os.path.join(a_dir, step["screenshot"]), os.path.join(b_dir, step["screenshot"]),
                               shallow=False), step["screenshot"]


def test_shards_are_disjoint_and_cover_the_job_list():
    jobs = [(t, s) for t in "abcde" for s in range(7)]
    parts = [metrics.shard(jobs, (k, 3)) for k in (1, 2, 3)]
    assert sorted(j for p in parts for j in p) == sorted(jobs)
    assert sum(len(p) for p in parts) == len(jobs)
    assert all({t for t, _ in p} == set("abcde") for p in parts)   # every shard gets a share of every task
    assert metrics.shard(jobs, None) == jobs
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/2"):
        with pytest.raises(Exception, match="expected K/N"):
            metrics.shard_spec(bad)
    assert metrics.shard_spec(" 2/ 4") == (2, 4)


def test_three_collection_shards_merged_equal_one_run(tmp_path, capsys):
    collect_run(tmp_path / "one")
    for k in (1, 2, 3):
        summary = collect_run(tmp_path / f"part{k}", "--shard", f"{k}/3")
        assert summary["episodes"] == 2
    # a shard run again with --resume has nothing left to do
    assert collect_run(tmp_path / "part2", "--shard", "2/3", "--resume")["episodes"] == 2
    assert "0 episodes to run (2 already done)" in capsys.readouterr().out
    parts = [str(tmp_path / f"part{k}") for k in (1, 2, 3)]
    # a shard given twice: its episodes are the same apart from meta, kept once
    print(metrics.merge_datasets(str(tmp_path / "all"), parts + [parts[0]]))
    assert "6 episodes from 4 folders (2 duplicates dropped)" in capsys.readouterr().out
    assert_same_dataset(str(tmp_path / "one"), str(tmp_path / "all"))
    assert metrics._main(["check", str(tmp_path / "all")]) is None


def test_merge_refuses_conflicts_and_names_what(tmp_path, capsys):
    collect_run(tmp_path / "a", "--shard", "1/2")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    lines = (tmp_path / "b" / "episodes.jsonl").read_text().splitlines()
    ep = json.loads(lines[0])
    ep["success"] = not ep["success"]
    (tmp_path / "b" / "episodes.jsonl").write_text("\n".join([json.dumps(ep)] + lines[1:]) + "\n")
    with pytest.raises(metrics.DatasetError, match=f"episode '{ep['id']}' differs between .*a and .*b"):
        metrics.merge_datasets(str(tmp_path / "out"), [str(tmp_path / "a"), str(tmp_path / "b")])
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(str(tmp_path / "out") + ".tmp")
    # a torn line in a source: named, nothing written
    (tmp_path / "b" / "episodes.jsonl").write_text("\n".join(lines) + "\n" + '{"id": "torn')
    with pytest.raises(SystemExit):
        metrics._main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")])
    assert "episodes.jsonl:" in capsys.readouterr().err and not os.path.exists(tmp_path / "out")
    # a missing screenshot in a source
    (tmp_path / "b" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    shot = tmp_path / "b" / json.loads(lines[-1])["steps"][0]["screenshot"]
    os.remove(shot)
    with pytest.raises(metrics.DatasetError, match="0.png is missing"):
        metrics.merge_datasets(str(tmp_path / "out"), [str(tmp_path / "a"), str(tmp_path / "b")])
    # annotation logs: merge first, then annotate
    (tmp_path / "a" / "drafts.jsonl").write_text("")
    with pytest.raises(metrics.DatasetError, match="annotation logs"):
        metrics.merge_datasets(str(tmp_path / "out"), [str(tmp_path / "a")])
    os.remove(tmp_path / "a" / "drafts.jsonl")
    # episodes an API endpoint failed and no rerun redid (evaluate.py set them aside): the shard is not done
    a_lines = (tmp_path / "a" / "episodes.jsonl").read_text().splitlines()
    undone = json.loads(a_lines[0])
    (tmp_path / "a" / "episodes.jsonl").write_text("\n".join(a_lines[1:]) + "\n")
    (tmp_path / "a" / metrics.API_FAILED).write_text(json.dumps(undone) + "\n")
    with pytest.raises(metrics.DatasetError, match=f"{metrics.API_FAILED}.*run that shard's evaluation again"):
        metrics.merge_datasets(str(tmp_path / "out"), [str(tmp_path / "a")])
    (tmp_path / "a" / "episodes.jsonl").write_text("\n".join(a_lines) + "\n")   # redone: merged as usual
    assert "merge: 3 episodes" in metrics.merge_datasets(str(tmp_path / "redone"), [str(tmp_path / "a")])
    # the target exists already
    os.makedirs(tmp_path / "out")
    with pytest.raises(metrics.DatasetError, match="already exists"):
        metrics.merge_datasets(str(tmp_path / "out"), [str(tmp_path / "a")])


def evaluate_run(out, *argv):
    return evaluate.main(["--suite", "miniwob", "--tasks", TASKS, "--policy", "expert", "--episodes", "3",
                          "--seed", "40", "--out", str(out), "--no-progress", "--n-boot", "200", *argv])


def test_three_evaluation_shards_merged_report_like_one_run(tmp_path, capsys):
    one = evaluate_run(tmp_path / "one")
    for k in (1, 2, 3):
        part = evaluate_run(tmp_path / f"part{k}", "--shard", f"{k}/3", "--workers", str(k))
        assert part["episodes"] == 2 and part["config"]["shard"] == f"{k}/3"
    parts = [str(tmp_path / f"part{k}") for k in (1, 2, 3)]
    metrics._main(["merge", *parts[:2], "--out", str(tmp_path / "some")])
    assert "render its report with: python evaluate.py --report" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "some" / "report.html")   # rendered by evaluate.py, not copied
    evaluate.main(["--report", str(tmp_path / "some")])
    assert "2 of 6 planned episodes are not in" in capsys.readouterr().out
    metrics._main(["merge", *parts, "--out", str(tmp_path / "all")])
    merged = evaluate.main(["--report", str(tmp_path / "all")])
    assert_same_dataset(str(tmp_path / "one"), str(tmp_path / "all"))
    for key in ("episodes", "errors", "steps", "overall", "by_task"):
        assert merged[key] == one[key], key
    untimed = lambda res: [{k: v for k, v in row.items() if k != "seconds"} for row in res["per_episode"]]  # noqa: E731
    assert untimed(merged) == untimed(one)
    assert os.path.getsize(tmp_path / "all" / "report.html") > 1000
    with open(tmp_path / "all" / "run.json") as f:
        assert "shard" not in json.load(f)
    # the merged run continues like any run: nothing left to do
    assert untimed(evaluate_run(tmp_path / "all")) == untimed(one)
    # shards of two different runs are refused, naming the setting
    evaluate_run(tmp_path / "other", "--shard", "1/3", "--max-steps", "9")
    with pytest.raises(metrics.DatasetError, match="not shards of one run: they differ in max_steps"):
        metrics.merge_datasets(str(tmp_path / "mixed"), [parts[1], str(tmp_path / "other")])
    with pytest.raises(metrics.DatasetError, match="is a dataset but .* is an evaluation run"):
        collect_run(tmp_path / "plain", "--shard", "2/3")
        metrics.merge_datasets(str(tmp_path / "mixed"), [parts[0], str(tmp_path / "plain")])
    with pytest.raises(SystemExit, match="not an evaluation run"):
        evaluate.main(["--report", str(tmp_path / "plain")])
    # --report only reads: a torn last line is named, and the run folder is left as it was
    with open(tmp_path / "some" / "episodes.jsonl", "ab") as f:
        f.write(b'{"id": "cut sho')
    before = sorted(os.listdir(tmp_path / "some")), (tmp_path / "some" / "episodes.jsonl").read_bytes()
    with pytest.raises(SystemExit, match=r"episodes.jsonl:\d+: not valid JSON \(the last line is cut short"):
        evaluate.main(["--report", str(tmp_path / "some")])
    assert (sorted(os.listdir(tmp_path / "some")), (tmp_path / "some" / "episodes.jsonl").read_bytes()) == before
