"""Broken datasets through every stage's entry point: each is refused at load with one line naming the
file:line, the episode, the step and the field, and exit code 2 -- never a traceback, a crash later on, or
a silently different score. The clean toy dataset passes everywhere (no false positives).

The model stages are given an empty folder as checkpoint: the dataset is validated before any
model is loaded, so a broken dataset must stop them first, and the clean one must get as far as the
checkpoint error.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, make_toy_dataset

import annotate
import evaluate
import metrics
import replay
import train_grpo
import train_sft


def edit(d, fn):
    """Apply fn(episodes) to the parsed lines of d/episodes.jsonl and write them back (NaN stays NaN)."""
    file = os.path.join(d, "episodes.jsonl")
    eps = [json.loads(line) for line in open(file)]
    fn(eps)
    with open(file, "w") as f:
        f.writelines(json.dumps(ep) + "\n" for ep in eps)


def step(eps, k=1, ep=1):
    return eps[ep]["steps"][k]


def setf(path, value):
    """A mutation setting eps[1] step 1's field at `path` (a tuple of keys) to `value`."""
    def fn(eps):
        obj = step(eps)
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return lambda d: edit(d, fn)


def shot(d, k=1):
    return os.path.join(d, "img", "toy.buttons.1", f"{k}.png")


def write(path, data):
    os.remove(path)
    with open(path, "wb") as f:
        f.write(data)


def damage(d, how):
    """The real PNG cut in half after its header, or with one byte of its image data changed (its CRC then fails)."""
    with open(shot(d), "rb") as f:
        data = bytearray(f.read())
    i = data.index(b"IDAT") + 12
    data[i] ^= 0xFF
    write(shot(d), bytes(data[:len(data) // 2]) if how == "cut" else bytes(data))


def symlink_outside(d):
    outside = os.path.join(os.path.dirname(d), "outside.png")
    shutil.copy(shot(d), outside)
    os.remove(shot(d))
    os.symlink(outside, shot(d))


def resized(d):
    """One screenshot of another size than its episode's viewport (a sound PNG all the same)."""
    from PIL import Image
    Image.new("RGB", (100, 80), "white").save(shot(d))


def torn_middle(d):
    file = os.path.join(d, "episodes.jsonl")
    lines = open(file).read().split("\n")
    lines[0] = lines[0][:len(lines[0]) // 2]
    open(file, "w").write("\n".join(lines))


def duplicate_id(d):
    def fn(eps):
        eps[1]["id"] = eps[0]["id"]
    edit(d, fn)


def episode_field(key, value):
    def fn(eps):
        eps[1][key] = value
    return lambda d: edit(d, fn)


# (name, mutation, what the error line must contain, whether the fault is in an image file)
CASES = [
    ("bbox string", setf(("elements", 1, "bbox"), [1, "a", 3, 4]), "step 1: elements[1].bbox: not 4 finite", 0),
    ("bbox NaN", setf(("elements", 0, "bbox"), [float("nan"), 20, 54, 44]), "step 1: elements[0].bbox", 0),
    ("bbox 1e308", setf(("elements", 0, "bbox"), [10, 20, 1e308, 44]), "step 1: elements[0].bbox", 0),
    ("bbox Infinity", setf(("elements", 2, "bbox"), [10, 20, float("inf"), 44]), "step 1: elements[2].bbox", 0),
    ("bbox inverted", setf(("elements", 0, "bbox"), [54, 20, 10, 44]), "step 1: elements[0].bbox: not [x0", 0),
    ("bbox three numbers", setf(("elements", 0, "bbox"), [1, 2, 3]), "step 1: elements[0].bbox", 0),
    ("negative mark", setf(("elements", 0, "mark"), -1), "step 1: elements[0].mark: not a positive", 0),
    ("mark true", setf(("elements", 0, "mark"), True), "step 1: elements[0].mark", 0),
    ("duplicate marks", setf(("elements", 1, "mark"), 1), "step 1: elements[1].mark: mark 1 appears twice", 0),
    ("element not an object", setf(("elements", 2), 3), "step 1: elements[2]: not a JSON object", 0),
    ("element text a number", setf(("elements", 2, "text"), 7), "step 1: elements[2].text", 0),
    ("action mark not on screen", setf(("action", "mark"), 9), "step 1: action.mark: 9 is not among", 0),
    ("action mark a string", setf(("action", "mark"), "4"), "step 1: action.mark: not a positive", 0),
    ("unknown op", setf(("action", "op"), "teleport"), "step 1: action.op: not one of", 0),
    ("point with a string", setf(("action", "point"), ["a", 80]), "step 1: action.point", 0),
    ("point NaN", setf(("action", "point"), [float("nan"), 80]), "step 1: action.point", 0),
    ("value a number", setf(("action", "value"), 5), "step 1: action.value", 0),
    ("bad guide_status", setf(("guide_status",), "great"), "step 1: guide_status", 0),
    ("steps misnumbered", setf(("step",), 5), "step 1: step: steps are numbered", 0),
    ("lone surrogate in a guide", setf(("guide",), "Type \ud800 here."), "step 1: guide: a lone surrogate", 0),
    ("lone surrogate in guide_alt", setf(("guide_alt", "paraphrase"), "\udfff"), "step 1: guide_alt.paraphrase", 0),
    ("lone surrogate in instruction", episode_field("instruction", "Press \ud800"), "instruction: a lone", 0),
    ("reward NaN", episode_field("reward", float("nan")), "reward: not a finite number", 0),
    ("viewport strings", episode_field("viewport", ["160", "120"]), "viewport: not [w, h]", 0),
    ("viewport not the screenshots' size", episode_field("viewport", [16, 12]),
     "0.png is 160x120 pixels, but the episode's viewport is [16, 12]", 0),
    ("a screenshot of another size", resized, "1.png is 100x80 pixels, but the episode's viewport is [160, 120]", 0),
    ("meta null", episode_field("meta", None), "meta: not a JSON object (None)", 0),
    ("meta a string", episode_field("meta", "x"), "meta: not a JSON object ('x')", 0),
    ("duplicate episode ids", duplicate_id, "episode 'toy.buttons.0': id: already used on line 1", 0),
    ("absolute screenshot path", setf(("screenshot",), "/etc/passwd"), "step 1: screenshot: an absolute path", 0),
    ("../ in a screenshot path", setf(("screenshot",), "img/../../x.png"), "step 1: screenshot: `..`", 0),
    ("NUL in a screenshot path", setf(("screenshot",), "img/a\u0000.png"), "step 1: screenshot: a NUL byte", 0),
    ("torn middle line", torn_middle, "episodes.jsonl:1: not valid JSON", 0),
    ("screenshot not a PNG", lambda d: write(shot(d), b"GIF89a not a png at all"), "step 1: screenshot: ", 1),
    ("screenshot a truncated PNG", lambda d: write(shot(d), b"\x89PNG\r\n\x1a\n\0\0"), "step 1: screenshot: ", 1),
    ("screenshot cut after its header", lambda d: damage(d, "cut"), "step 1: screenshot: ", 1),
    ("screenshot with a damaged byte", lambda d: damage(d, "flip"), "step 1: screenshot: ", 1),
    ("screenshot a directory", setf(("screenshot",), "img/toy.buttons.1"), "step 1: screenshot: ", 1),
    ("screenshot missing", lambda d: os.remove(shot(d)), "step 1: screenshot: image", 1),
    ("screenshot a symlink out", symlink_outside, "step 1: screenshot: 'img/toy.buttons.1/1.png' leads outside", 1),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(params=CASES, ids=IDS)
def broken(request, tmp_path):
    name, mutate, expect, image = request.param
    d = make_toy_dataset(str(tmp_path / "data"), n_episodes=2)
    mutate(d)
    line = ":1:" if name in ("torn middle line",) else ":2:"
    return d, f"episodes.jsonl{line}", expect, image


def one_line(err, where, expect):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert where in lines[0] and expect in lines[0], lines[0]
    if "episode '" in expect or ":1:" not in where:
        assert "episode 'toy.buttons." in lines[0]


def test_check_cli(broken):
    d, where, expect, _ = broken
    r = subprocess.run([sys.executable, os.path.join(ROOT, "metrics.py"), "check", d], capture_output=True,
                       text=True, encoding="utf-8", errors="backslashreplace")
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    one_line(r.stderr, where, expect)


def stage_runs(d, tmp_path):
    missing = str(tmp_path / "no-such-ckpt")   # a folder without config.json: no model is ever built
    os.makedirs(missing, exist_ok=True)
    return {"train_sft": lambda: train_sft.main(["--data", d, "--ckpt", missing, "--out", str(tmp_path / "sft"),
                                                 "--max-steps", "1"]),
            "replay": lambda: replay.main(["--ckpt", missing, "--data", d, "--out", str(tmp_path / "replay")]),
            "train_grpo": lambda: train_grpo.main(["--data", d, "--ckpt", missing, "--out", str(tmp_path / "grpo"),
                                                   "--max-steps", "1"]),
            "annotate draft": lambda: annotate.main(["draft", d]),
            "annotate draft --drafter api": lambda: annotate.main(["draft", "--drafter", "api", "--api-base",
                                                                   "http://127.0.0.1:9/v1", "--api-model", "m", d])}


@pytest.mark.parametrize("stage", ["train_sft", "replay", "train_grpo", "annotate draft",
                                   "annotate draft --drafter api"])
def test_stage_entry_points(broken, stage, tmp_path, capsys):
    d, where, expect, image = broken
    run = stage_runs(d, tmp_path)[stage]
    if image and stage == "annotate draft":
        run()   # the template drafter never opens a screenshot: nothing it does depends on the image
        assert "draft: " in capsys.readouterr().out
        return
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        run()
    assert e.value.code == 2, e.value.code
    one_line(capsys.readouterr().err, where, expect)


def test_clean_toy_dataset_passes_everywhere(tmp_path, capsys):
    """No false positives: the clean dataset passes check and reaches each model stage's checkpoint error."""
    d = make_toy_dataset(str(tmp_path / "data"), n_episodes=4)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "metrics.py"), "check", d], capture_output=True, text=True)
    assert r.returncode == 0 and "4 episodes, 12 steps" in r.stdout, r.stderr
    for stage, run in stage_runs(d, tmp_path).items():
        if stage.startswith("annotate"):
            continue
        with pytest.raises(SystemExit) as e:
            run()
        assert "no-such-ckpt: not a Hugging Face checkpoint" in str(e.value.code), (stage, e.value.code)
    annotate.main(["draft", d])
    assert "0 new drafts" in capsys.readouterr().out and len(metrics.load_dataset(d, check_images=True)) == 4


def as_run(d, n):
    """The toy dataset as an evaluation run folder (a run.json beside it), as evaluate.py --report reads one."""
    config = {"suite": "toy", "tasks": ["buttons"], "seed": 0, "episodes_per_task": n, "shard": None,
              "policy": "expert", "grounding": "som", "order": "action_only", "api_model": None, "max_steps": 30}
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(config, f)


@pytest.mark.parametrize("meta", ["left out", None, "x"])
def test_evaluate_report_reads_meta(meta, tmp_path, capsys):
    """A run's `meta` may be left out (docs/data.md: the report reads on without it); present, it is an
    object, else --report stops with the line naming it (it ended in a KeyError or AttributeError)."""
    d = make_toy_dataset(str(tmp_path / "run"), n_episodes=2)
    as_run(d, 2)
    edit(d, lambda eps: eps[1].pop("meta") if meta == "left out" else eps[1].update(meta=meta))
    if meta == "left out":
        res = evaluate.main(["--report", d, "--n-boot", "10"])
        assert res["episodes"] == 2 and res["per_episode"][1]["seconds"] is None
        assert os.path.getsize(os.path.join(d, "report.html")) > 1000
        return
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--report", d])
    assert f"episodes.jsonl:2: episode 'toy.buttons.1': meta: not a JSON object ({meta!r})" in str(e.value.code)


def test_evaluate_report_refuses_a_viewport_that_is_not_the_screenshots_size(tmp_path):
    """The report places its overlays in percent of the viewport: a viewport that is not the screenshots'
    size is named, with the first screenshot that shows it."""
    d = make_toy_dataset(str(tmp_path / "run"), n_episodes=2)
    as_run(d, 2)
    episode_field("viewport", [16, 12])(d)
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--report", d])
    assert e.value.code == 2


def test_screenshot_sizes_are_read_from_the_header_only(tmp_path, monkeypatch):
    """The template drafter's check reads 24 bytes of each PNG and never decodes one (datasets hold
    thousands): PIL is not even opened."""
    d = make_toy_dataset(str(tmp_path / "data"), n_episodes=2)
    import PIL.Image
    monkeypatch.setattr(PIL.Image, "open", lambda *a, **k: pytest.fail("PIL opened a screenshot"))
    assert len(metrics.load_dataset(d, check_images="size")) == 2
    episode_field("viewport", [16, 12])(d)
    with pytest.raises(metrics.DatasetError, match=r"is 160x120 pixels, but the episode's viewport is \[16, 12\]"):
        metrics.load_dataset(d, check_images="size")


@pytest.mark.parametrize("content", ["", "\n\n"], ids=["empty", "blank lines"])
@pytest.mark.parametrize("stage", ["metrics.py check", "train_sft", "replay", "train_grpo", "annotate draft",
                                   "annotate draft --drafter api"])
def test_empty_dataset_is_refused(content, stage, tmp_path, capsys):
    """An episodes.jsonl without episodes passed `metrics.py check` ("0 episodes", exit 0) and annotate.py
    draft; every stage that reads a dataset refuses it with one line naming the file."""
    d = make_toy_dataset(str(tmp_path / "data"), n_episodes=2)
    with open(os.path.join(d, "episodes.jsonl"), "w") as f:
        f.write(content)
    if stage == "metrics.py check":
        r = subprocess.run([sys.executable, os.path.join(ROOT, "metrics.py"), "check", d], capture_output=True,
                           text=True)
        code, out, err = r.returncode, r.stdout, r.stderr
    else:
        with pytest.raises(SystemExit) as e:
            stage_runs(d, tmp_path)[stage]()
        code, (out, err) = e.value.code, capsys.readouterr()
    assert code == 2 and out == "" and err.strip() == f"{d}/episodes.jsonl: no episodes in it (an empty dataset)"
