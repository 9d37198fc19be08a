"""metrics.py: the grammar, the scores (hand-computed), the dataset format and the drawing."""
import io
import json
import os
import random
import string

import pytest

import metrics
from metrics import (
    aggregate,
    check_format,
    element_correct,
    format_output,
    guide_grounding,
    make_action,
    op_f1,
    paired_bootstrap,
    parse_output,
    score_step,
)

VP = [480, 630]


def step(action, elements=None, guide=None, status=None):
    els = elements if elements is not None else [
        {"mark": 1, "tag": "input", "role": "textbox", "text": "Username", "bbox": [10, 10, 110, 40]},
        {"mark": 2, "tag": "button", "role": "button", "text": "Sign in", "bbox": [200, 100, 300, 140]},
        {"mark": 3, "tag": "a", "role": "link", "text": "Forgot your password? Reset it here now please",
         "bbox": [0, 500, 480, 530]},
    ]
    return {"step": 0, "url": "u", "screenshot": "img/x/0.png", "elements": els, "action": action,
            "guide": guide, "guide_status": status, "guide_alt": None}


# ---------------------------------------------------------------------------------------------- grammar

ACTIONS = [
    make_action("click", mark=2, point=[250.0, 120.0]),
    make_action("hover", mark=3, point=[240.0, 515.0]),
    make_action("type", mark=1, point=[60.0, 25.0], value='ada "the" lovelace, 1815\n\\'),
    make_action("select", mark=2, point=[250.0, 120.0], value="Économie"),
    make_action("press", value="Enter"),
    make_action("scroll", value="down"),
    make_action("stop", value=""),
    make_action("stop", value="42 apples"),
]


@pytest.mark.parametrize("order", metrics.ORDERS)
@pytest.mark.parametrize("grounding", metrics.GROUNDINGS)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a["op"] + str(bool(a["value"])))
def test_format_parse_round_trip(action, grounding, order):
    text = format_output("Click **Sign in** to log in.", action, grounding, order, VP)
    assert check_format(text, grounding, order, VP)
    guide, parsed = parse_output(text, grounding, order, VP)
    assert guide == (None if order == "action_only" else "Click **Sign in** to log in.")
    assert parsed["op"] == action["op"] and parsed["value"] == action["value"]
    if action["op"] in metrics.ELEMENT_OPS and grounding == "som":
        assert parsed["mark"] == action["mark"] and parsed["point"] is None
    elif action["op"] in metrics.ELEMENT_OPS:
        assert parsed["mark"] is None
        # the 0..1000 frame loses at most half a unit: 480/2000 = 0.24 px, 630/2000 = 0.315 px
        assert abs(parsed["point"][0] - action["point"][0]) <= 0.24 + 1e-9
        assert abs(parsed["point"][1] - action["point"][1]) <= 0.315 + 1e-9


def test_exact_strings():
    typed = make_action("type", mark=7, value="ada@example.com")
    assert metrics.format_action(typed, "som", VP) == 'type(7, "ada@example.com")'
    assert metrics.format_action(make_action("click", point=[240, 315]), "coord", VP) == "click(500, 500)"
    assert metrics.format_action(make_action("stop", value=""), "som", VP) == "stop()"
    pressed = make_action("press", value="Enter")
    assert format_output("G.", pressed, "som", "action_first", VP) == 'Action: press("Enter")\nGuide: G.'


@pytest.mark.parametrize("text", [
    "click(0)", "click(-1)", 'click("7")', "click(7.5)", "type(7)", "type(7, 'x')", 'type("x", 7)',
    "scroll(\"sideways\")", "press()", "click(7, 8)", "stop(1, 2)", "eval(1)", "__import__('os')", "click 7", "",
    "click(7", "click(7))", 'type(7, "a" "b")', 'type(7, "unterminated)', "Click(7)",
])
def test_parse_rejects_som(text):
    assert metrics.parse_action(text, "som", VP) is None


@pytest.mark.parametrize("text", ["click(7)", "click(1001, 5)", "click(5, -1)", 'type(10, 10)', "click(1, 2, 3)"])
def test_parse_rejects_coord(text):
    assert metrics.parse_action(text, "coord", VP) is None


def test_parse_tolerates_decoration_but_format_does_not():
    text = "**Guide:** Click the button.\n**Action:** `click(2)`"
    guide, action = parse_output(text, "som", "guide_first", VP)
    assert guide == "Click the button." and action["mark"] == 2
    assert not check_format("Action: click(2)\nGuide: x", "som", "guide_first", VP)   # wrong order
    assert not check_format("Guide: x\nAction: click(2)\nmore", "som", "guide_first", VP)  # extra line
    assert not check_format("Guide:\nAction: click(2)", "som", "guide_first", VP)        # empty guide
    assert check_format("Guide: x\nAction: click(2)", "som", "guide_first", VP)


def test_garbage_never_raises():
    rng = random.Random(0)
    alphabet = string.printable + "()\",\\Guide:Action:clicktype 0123456789éß🙂\u0000"
    valid = [format_output("Do it.", a, g, o, VP) for a in ACTIONS for g in metrics.GROUNDINGS for o in metrics.ORDERS]
    for i in range(10_000):
        if i % 2:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        else:  # a valid reply with a few random edits: the dangerous near-misses
            chars = list(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            text = "".join(chars)
        for g in metrics.GROUNDINGS:
            for o in metrics.ORDERS:
                s = score_step(text, step(make_action("click", mark=2, point=[250, 120])), g, o, VP)
                assert s["step"] in (0, 1)
    for junk in (None, 3, b"bytes", ["list"]):
        assert parse_output(junk, "som", "guide_first", VP) == (None, None)


# ---------------------------------------------------------------------------------------------- action scores

def test_op_f1_hand_computed():
    gold = make_action("type", mark=1, value="ada")
    assert op_f1(make_action("type", mark=1, value="ada"), gold) == 1.0
    # "type ada lovelace" vs "type ada": 2 common, P = 2/3, R = 1 -> F1 = 0.8
    assert op_f1(make_action("type", mark=1, value="ada lovelace"), gold) == pytest.approx(0.8)
    # "click" vs "type ada": no common token
    assert op_f1(make_action("click", mark=1), gold) == 0.0
    # case-insensitive: "TYPE ADA" vs "type ada"
    assert op_f1(make_action("type", mark=1, value="ADA"), gold) == 1.0
    # "type a a" vs "type a": clipped counts, common 2, P = 2/3, R = 1 -> 0.8
    assert op_f1(make_action("type", value="a a"), make_action("type", value="a")) == pytest.approx(0.8)
    assert op_f1(None, gold) == 0.0
    assert op_f1(make_action("click", mark=5), make_action("click", mark=2)) == 1.0  # the op ignores the target


def test_element_correct():
    gold = step(make_action("click", mark=2, point=[250, 120]))
    assert element_correct(make_action("click", mark=2), gold, "som") == 1
    assert element_correct(make_action("click", mark=1), gold, "som") == 0
    assert element_correct(make_action("click", point=[200, 100]), gold, "coord") == 1   # corner: edges count
    assert element_correct(make_action("click", point=[300, 140]), gold, "coord") == 1
    assert element_correct(make_action("click", point=[300.01, 120]), gold, "coord") == 0
    assert element_correct(make_action("press", value="Enter"), gold, "som") == 0
    assert element_correct(None, gold, "som") == 0
    enter = step(make_action("press", value="Enter"))
    assert element_correct(make_action("press", value="Tab"), enter, "som") == 1   # element-free: no target either
    assert element_correct(make_action("click", mark=1), enter, "som") == 0


def test_score_step_and_joint():
    gold = step(make_action("click", mark=2, point=[250, 120]), guide="Click Sign in to log in.", status="verified")
    s = score_step("Guide: Click Sign in to log in.\nAction: click(2)", gold, "som", "guide_first", VP)
    assert s["element"] == s["step"] == s["guide_grounding"] == s["joint"] == s["format"] == 1
    assert s["guide_bleu"] == pytest.approx(100.0) and s["guide_rouge_l"] == pytest.approx(1.0)
    assert s["guide_chrf"] == pytest.approx(100.0)
    # right action, guide names the wrong thing: no joint credit
    s = score_step("Guide: Click the Username field.\nAction: click(2)", gold, "som", "guide_first", VP)
    assert s["step"] == 1 and s["guide_grounding"] == 0 and s["joint"] == 0
    # right guide, wrong action: gated like WebLINX -- no joint credit without the action
    s = score_step("Guide: Click Sign in.\nAction: click(1)", gold, "som", "guide_first", VP)
    assert s["guide_grounding"] == 1 and s["step"] == 0 and s["joint"] == 0
    # action_only: no guide scores at all
    s = score_step("Action: click(2)", gold, "som", "action_only", VP)
    assert s["step"] == 1 and s["joint"] is None and s["guide_bleu"] is None
    # type: op F1 must be exactly 1 for step success
    gold = step(make_action("type", mark=1, point=[60, 25], value="ada"))
    s = score_step('Action: type(1, "ada l")', gold, "som", "action_only", VP)
    assert s["element"] == 1 and s["op_f1"] == pytest.approx(0.8) and s["step"] == 0
    s = score_step("Guide: Type ada.\nAction: type(100, 30, \"ada\")", gold, "coord", "guide_first", VP)
    assert s["step"] == 1 and s["guide_bleu"] is None   # no gold guide: reference scores are None


def test_guide_grounding_cases():
    click = step(make_action("click", mark=2))
    assert guide_grounding("Click **Sign in** at the top right.", click) == 1
    assert guide_grounding("Press the sign-in button.", click) == 1        # punctuation-insensitive
    assert guide_grounding("Sign in now.", click) == 0                     # no verb
    assert guide_grounding("Click the blue button.", click) == 0           # no name
    assert guide_grounding("", click) == 0 and guide_grounding(None, click) == 0
    long = step(make_action("click", mark=3))                              # first six words suffice
    assert guide_grounding("Click 'Forgot your password? Reset it here' below.", long) == 1
    assert guide_grounding("Click 'Forgot your password' below.", long) == 0
    typ = step(make_action("type", mark=1, value="ada@example.com"))
    assert guide_grounding("Type your name into the Username field.", typ) == 1
    assert guide_grounding("Enter ada@example.com in the first box.", typ) == 1   # the value names it
    assert guide_grounding("Click the Username field.", typ) == 0                  # verb does not fit the op
    press = step(make_action("press", value="Enter"))
    assert guide_grounding("Press Enter to submit.", press) == 1
    assert guide_grounding("Press the key.", press) == 0
    stop = step(make_action("stop", value=""))
    assert guide_grounding("You are done.", stop) == 1


# ---------------------------------------------------------------------------------------------- aggregation

def test_aggregate_micro_macro():
    rows = [{"step": 1, "joint": None}, {"step": 0, "joint": 1}, {"step": 1, "joint": 0}, {"step": 1, "joint": None}]
    groups = ["a", "a", "a", "b"]
    agg = aggregate(rows, groups)
    # micro: 3/4; macro: mean(2/3, 1) = 5/6
    assert agg["step"]["micro"] == pytest.approx(0.75) and agg["step"]["macro"] == pytest.approx(5 / 6)
    assert agg["joint"] == {"micro": 0.5, "macro": 0.5, "n": 2}   # None skipped; group b has no value


def test_paired_bootstrap():
    a = [1, 0, 1, 1, 0, 1, 1, 0, 1, 1]
    r = paired_bootstrap(a, a)
    assert r == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p": 1.0}
    r = paired_bootstrap([x + 0.5 for x in a], a)   # a constant shift has no variance
    assert r["diff"] == r["lo"] == r["hi"] == 0.5 and r["p"] == 0.0
    b = [0, 0, 1, 0, 0, 1, 0, 0, 1, 0]
    r1, r2 = paired_bootstrap(a, b, seed=3), paired_bootstrap(a, b, seed=3)
    assert r1 == r2 and r1["lo"] <= r1["diff"] <= r1["hi"] and r1["diff"] == pytest.approx(0.4)
    with pytest.raises(ValueError):
        paired_bootstrap([1], [1, 2])


# ---------------------------------------------------------------------------------------------- dataset

def episode(i=0, steps=None):
    return {"id": f"s.t.{i}", "suite": "s", "task": "t", "seed": i, "instruction": "do it", "start_url": "u",
            "viewport": VP, "success": True, "reward": 1.0,
            "steps": steps if steps is not None else [step(make_action("click", mark=2, point=[250, 120]))], "meta": {}}


def test_dataset_round_trip_and_validation(tmp_path):
    d = str(tmp_path)
    for i in range(3):
        metrics.append_episode(d, episode(i))
    eps = metrics.load_dataset(d)
    assert [e["id"] for e in eps] == ["s.t.0", "s.t.1", "s.t.2"] and eps[0]["_root"] == d
    metrics.write_dataset(d, eps)               # "_root" is never written back
    assert "_root" not in open(os.path.join(d, "episodes.jsonl")).readline()
    assert list(metrics.iter_steps(eps)) == [(eps[0], 0), (eps[1], 0), (eps[2], 0)]
    with pytest.raises(metrics.DatasetError, match="image .* is missing"):
        metrics.load_dataset(d, check_images=True)


def test_bad_line_is_named(tmp_path):
    d = str(tmp_path)
    metrics.append_episode(d, episode(0))
    bad = episode(1)
    bad["steps"][0]["action"]["op"] = "teleport"
    with open(os.path.join(d, "episodes.jsonl"), "a") as f:
        f.write(json.dumps(bad) + "\n{not json}\n")
    with pytest.raises(metrics.DatasetError, match=r"episodes.jsonl:2: episode 's.t.1' step 0: action.op: not one of"):
        metrics.load_dataset(d)


def test_torn_last_line_reported_and_repaired(tmp_path):
    d = str(tmp_path)
    metrics.append_episode(d, episode(0))
    metrics.append_episode(d, episode(1))
    file = os.path.join(d, "episodes.jsonl")
    full = open(file, "rb").read()
    open(file, "wb").write(full[:-40])          # a write cut short by a crash
    with pytest.raises(metrics.DatasetError, match=r"episodes.jsonl:2: not valid JSON \(the last line is cut short"):
        metrics.load_dataset(d)
    note = metrics.repair_dataset(d)
    assert "torn last line" in note and ":2:" in note
    assert [e["id"] for e in metrics.load_dataset(d)] == ["s.t.0"]
    assert open(file + ".torn", "rb").read() == full[len(full.split(b"\n")[0]) + 1:-40] + b"\n"   # nothing lost
    assert metrics.repair_dataset(d) is None    # idempotent
    # a complete last record that only lacks its newline is kept
    with open(file, "ab") as f:
        f.write(json.dumps(episode(2)).encode())
    assert "newline" in metrics.repair_dataset(d)
    assert len(metrics.load_dataset(d)) == 2


# ---------------------------------------------------------------------------------------------- drawing and prompt

def test_draw_som_deterministic_and_on_screen():
    from PIL import Image
    img = Image.new("RGB", (480, 630), "white")
    els = [{"mark": i + 1, "bbox": [x, y, x + 40, y + 20]} for i, (x, y) in
           enumerate([(0, 0), (42, 0), (440, 610), (200, 300), (205, 305), (210, 310)])]
    out = []
    for _ in range(2):
        buf = io.BytesIO()
        metrics.draw_som(img, els).save(buf, "PNG")
        out.append(buf.getvalue())
    assert out[0] == out[1] and img.getpixel((0, 0)) == (255, 255, 255)   # same bytes; input untouched
    # labels: on-screen and, where there is room, not on top of each other
    taken = []
    for e in els:
        spot = metrics._label_spot(e["bbox"], 14, 14, 480, 630, taken)
        assert 0 <= spot[0] and spot[2] <= 480 and 0 <= spot[1] and spot[3] <= 630
        assert all(min(spot[2], t[2]) <= max(spot[0], t[0]) or min(spot[3], t[3]) <= max(spot[1], t[1]) for t in taken)
        taken.append(spot)


def test_norm_round_trip():
    for x in range(0, 481, 7):
        p = metrics.from_norm(metrics.to_norm([x, x], VP), VP)
        assert abs(p[0] - x) <= 0.24 + 1e-9
    assert metrics.to_norm([-5, 10_000], VP) == [0, 1000]


def test_build_messages(tmp_path):
    from PIL import Image
    typed = make_action("type", mark=1, point=[60, 25], value="ada")
    ep = episode(0, steps=[step(typed, guide="Type ada into Username."),
                           step(make_action("click", mark=2, point=[250, 120]))])
    ep["steps"][1]["step"] = 1
    img = Image.new("RGB", (480, 630), "white")
    for order in metrics.ORDERS:
        msgs = metrics.build_messages(ep, 1, "som", order, image=img)
        assert [m["role"] for m in msgs] == ["system", "user"]
        assert msgs[1]["content"][0] == {"type": "image", "image": img}
        text = msgs[1]["content"][1]["text"]
        assert "Task: do it" in text and 'Action: type(1, "ada")' in text
        assert ("Guide: Type ada into Username." in text) == (order != "action_only")
        assert metrics.ORDER_HELP[order] in msgs[0]["content"][0]["text"]
    text = metrics.build_messages(ep, 1, "coord", "guide_first", image=img)[1]["content"][1]["text"]
    assert 'type(125, 40, "ada")' in text and "Elements" not in text
    text = metrics.build_messages(ep, 1, "som", "guide_first", elements="text", image=img)[1]["content"][1]["text"]
    assert '[2] button "Sign in"' in text
    # from disk: the raw screenshot, with marks drawn for som
    os.makedirs(tmp_path / "img" / "x")
    img.save(tmp_path / "img" / "x" / "0.png")
    ep["_root"] = str(tmp_path)
    som = metrics.build_messages(ep, 0, "som", "guide_first")[1]["content"][0]["image"]
    raw = metrics.build_messages(ep, 0, "coord", "guide_first")[1]["content"][0]["image"]
    assert som.size == raw.size == (480, 630) and som.tobytes() != raw.tobytes()
    assert raw.getpixel((60, 25)) == (255, 255, 255)


def test_history_leaves_out_replies_that_did_not_parse():
    """A step whose reply did not parse is recorded as stop() but did nothing: the history skips it
    and numbers the rest in order, so a model never reads that it has stopped."""
    steps = [dict(step(make_action("click", mark=1), guide="Click **OK**."), step=0),
             dict(step(make_action("stop")), step=1, exec_error=metrics.UNPARSEABLE),
             dict(step(make_action("type", mark=2, value="x"), guide="Type x."), step=2),
             dict(step(make_action("click", mark=3)), step=3)]
    ep = {"steps": steps, "viewport": [100, 100]}
    assert metrics.history_text(ep, 3, "som", "guide_first").splitlines() == [
        "1. Guide: Click **OK**. | Action: click(1)", '2. Guide: Type x. | Action: type(2, "x")']
    assert metrics.history_text(ep, 1, "som", "action_only") == "1. Action: click(1)"


# ---------------------------------------------------------------------------------------------
# Section 8: what the model stages share.

def test_publish_dir_keeps_one_complete_copy(tmp_path, monkeypatch):
    """A save is written aside and renamed into place; a kill between the two renames leaves only
    `out.old`, which recover_dir puts back (and a later publish still works)."""
    out, tmp = tmp_path / "ckpt", tmp_path / "ckpt.tmp"
    for folder, text in ((tmp, "first"),):
        folder.mkdir()
        (folder / "w.txt").write_text(text)
    metrics.publish_dir(str(tmp), str(out))
    assert (out / "w.txt").read_text() == "first" and not tmp.exists()

    tmp.mkdir()
    (tmp / "w.txt").write_text("second")
    real = os.replace
    calls = []

    def killed(src, dst):   # the first rename (out -> out.old) happens, the second never does
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(src, dst)
    monkeypatch.setattr(metrics.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        metrics.publish_dir(str(tmp), str(out))
    monkeypatch.setattr(metrics.os, "replace", real)
    assert not out.exists() and (tmp_path / "ckpt.old" / "w.txt").read_text() == "first"
    metrics.recover_dir(str(out))
    assert (out / "w.txt").read_text() == "first" and not (tmp_path / "ckpt.old").exists()
    metrics.publish_dir(str(tmp), str(out))
    assert (out / "w.txt").read_text() == "second"
    metrics.recover_dir(str(out))   # nothing to undo: a no-op
    assert (out / "w.txt").read_text() == "second"


def test_trained_options_and_precedence(tmp_path):
    assert metrics.trained_options(str(tmp_path)) == {}
    (tmp_path / "sft_config.json").write_text(json.dumps({"order": "action_first", "elements": "text"}))
    assert metrics.trained_options(str(tmp_path))["order"] == "action_first"   # a checkpoint from before the rename
    (tmp_path / metrics.TRAIN_CONFIG).write_text(json.dumps({"order": "guide_first", "grounding": "coord"}))
    trained = metrics.trained_options(str(tmp_path))
    assert trained == {"order": "guide_first", "grounding": "coord"}   # the new name wins
    assert metrics.prompt_options(trained=trained) == {"grounding": "coord", "order": "guide_first", "elements": "none"}
    assert metrics.prompt_options("som", None, "text", trained) == {"grounding": "som", "order": "guide_first",
                                                                    "elements": "text"}
    assert metrics.prompt_options() == {"grounding": "som", "order": "guide_first", "elements": "none"}


def test_usable_steps_and_write_atomic(tmp_path):
    ok = step(make_action("click", mark=1), guide="Click it.", status="verified")
    failed = dict(ok, exec_error="mark 9 is not on this screen")
    unverified = dict(ok, guide_status="draft")
    no_guide = dict(ok, guide=None)
    eps = [dict(episode(0, steps=[ok, failed, unverified, no_guide]), split="train"),
           dict(episode(1, steps=[ok]), split="test")]
    kept = metrics.usable_steps(eps, "train", "verified", "guide_first")
    assert [(e["id"], k) for e, k in kept] == [(eps[0]["id"], 0)]
    assert len(metrics.usable_steps(eps, "train", "verified,draft", "guide_first")) == 2
    assert len(metrics.usable_steps(eps, "train", "verified", "action_only")) == 3   # guides do not matter
    assert len(metrics.usable_steps(eps, "all", "verified", "guide_first")) == 2
    # the file's line order is the order parallel workers finished in: the steps come in episode-id order
    ids = lambda got: [(e["id"], k) for e, k in got]  # noqa: E731
    want = [(eps[0]["id"], 0), (eps[1]["id"], 0)]
    assert ids(metrics.usable_steps(eps[::-1], "all", "verified", "guide_first")) == want
    path = str(tmp_path / "r.json")
    metrics.write_atomic(path, "one")
    metrics.write_atomic(path, "two")
    assert open(path).read() == "two" and not os.path.exists(path + ".tmp")


def test_open_log_keeps_each_step_once_and_refuse_overwrite(tmp_path):
    """A resumed run logs again the steps after its last save: open_log drops them first (and a line
    torn by the kill); a new run (step 0) starts the log empty."""
    path = str(tmp_path / "sub" / "run.log.jsonl")
    with metrics.open_log(path, 0) as f:
        for k in range(1, 6):
            f.write(json.dumps({"step": k, "loss": k / 10}) + "\n")
        f.write('{"step": 6, "lo')
    with metrics.open_log(path, 3) as f:   # resumed from the checkpoint of step 3
        f.write(json.dumps({"step": 4, "loss": 0.4}) + "\n")
    assert [json.loads(line)["step"] for line in open(path)] == [1, 2, 3, 4]
    with metrics.open_log(path, 0):
        pass
    assert open(path).read() == ""
    out = tmp_path / "ckpt"
    metrics.refuse_overwrite(str(out), resume=False)   # nothing there yet
    out.mkdir()
    metrics.refuse_overwrite(str(out), resume=True)
    with pytest.raises(SystemExit, match="a checkpoint is already there"):
        metrics.refuse_overwrite(str(out), resume=False)


def test_append_jsonl_and_repair_of_any_log(tmp_path):
    """The append-only logs beside a dataset (annotate's review.jsonl, drafts.jsonl) are repaired like
    episodes.jsonl: a torn last line goes to <file>.torn, a whole record without its newline gets one."""
    log = str(tmp_path / "review.jsonl")
    metrics.append_jsonl(log, {"id": 1, "text": "é"})
    with open(log, "a") as f:
        f.write('{"id": 2, "te')
    assert "torn last line" in metrics.repair_dataset(log)
    assert open(log + ".torn").read() == '{"id": 2, "te\n'
    metrics.append_jsonl(log, {"id": 3})
    assert [json.loads(line)["id"] for line in open(log, encoding="utf-8")] == [1, 3]
    with open(log, "a") as f:
        f.write('{"id": 4}')
    assert "missing newline" in metrics.repair_dataset(log)
    assert metrics.repair_dataset(log) is None
    assert [json.loads(line)["id"] for line in open(log, encoding="utf-8")] == [1, 3, 4]
