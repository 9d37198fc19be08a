"""evaluate.py: metrics by hand, live runs on the back office (expert, random, an API model behind a
scripted fake endpoint), resume, the report in real headless Chromium, guide playback, clear errors."""
import asyncio
import base64
import contextlib
import html
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import FakeAPI

import annotate
import collect
import evaluate
import metrics

pytestmark = pytest.mark.skipif(importlib.util.find_spec("django") is None, reason="needs django (requirements.txt)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = 700   # unseen seeds: the experts were written on 0..12
KEY = "sk-test-secret-4242"


def run(out, *argv):
    return evaluate.main(["--suite", "backoffice", "--out", str(out), "--no-progress", "--seed", str(SEEDS), *argv])


def render(report, shot):
    """Open report.html from disk in headless Chromium; every <img> must have loaded. -> counts of what is drawn."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path),
                                     args=collect.CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto("file://" + os.path.abspath(report), wait_until="load")
        images = page.evaluate("[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])")
        counts = page.evaluate("({hl: document.querySelectorAll('.hl').length,"
                               " bubble: document.querySelectorAll('.bubble').length,"
                               " noguide: document.querySelectorAll('.bubble.noguide').length,"
                               " rows: document.querySelectorAll('tr').length,"
                               " callouts: [...document.querySelectorAll('.bubble')].map(b => b.innerText),"
                               " names: [...document.querySelectorAll('.bubble b')].map(b => b.innerText),"
                               " actions: [...document.querySelectorAll('.bubble .act')].map(a => a.innerText)})")
        page.screenshot(path=str(shot))
        browser.close()
    assert images and all(w > 0 for _, w in images), [src for src, w in images if not w]
    assert all(not src.startswith(("/", "file:", "http")) for src, _ in images)   # relative: the folder can move
    assert os.path.getsize(shot) > 10_000
    return {"images": len(images), **counts}


# ----------------------------------------------------------------------------------------------
# Metrics on hand-made episodes: no browser.

def fake_episode(task, seed, success, steps, error=None):
    """steps: (guide, op, exec_error) per step; the target is mark 1, labelled "Save"."""
    out = []
    for k, (guide, op, exec_error) in enumerate(steps):
        s = {"step": k, "screenshot": f"img/x/{k}.png", "guide": guide, "guide_status": "draft" if guide else None,
             "elements": [{"mark": 1, "tag": "button", "role": "button", "text": "Save", "bbox": [0, 0, 10, 10]}],
             "action": metrics.make_action(op, mark=1 if op == "click" else None,
                                           point=[5, 5] if op == "click" else None)}
        if exec_error:
            s["exec_error"] = exec_error
        out.append(s)
    return {"id": f"s.{task}.{seed}", "task": task, "seed": seed, "success": success, "steps": out, "error": error,
            "meta": {}}


def test_metrics_micro_macro_and_intervals_by_hand():
    good = ("Click **Save**.", "click", None)
    vague = ("Click it.", "click", None)
    done = ("You are done.", "stop", None)
    eps = [fake_episode("a", 0, True, [good, done]),                                 # joint
           fake_episode("a", 1, True, [vague, done]),                                # success, not joint
           fake_episode("a", 2, False, [(None, "stop", "unparseable reply")]),       # invalid, no guide
           fake_episode("b", 0, True, [good, good, done], error="Timeout: hung")]     # an error is a failure
    rows = [evaluate.episode_row(e, guides=True) for e in eps]
    assert [r["grounded"] for r in rows] == [2, 1, 0, 3] and [r["joint"] for r in rows] == [1, 0, 0, 0]
    res = evaluate.results(rows, {"order": "guide_first", "policy": "api"}, n_boot=200)
    o = res["overall"]
    micro_macro = lambda name: (o[name]["micro"], o[name]["macro"])
    assert micro_macro("success") == pytest.approx((2 / 4, (2 / 3 + 0) / 2))
    assert micro_macro("mean_steps") == pytest.approx((8 / 4, (5 / 3 + 3) / 2))
    assert micro_macro("invalid_rate") == pytest.approx((1 / 8, (1 / 5 + 0) / 2))
    assert micro_macro("guide_grounding") == pytest.approx((6 / 8, (3 / 5 + 1) / 2))
    assert o["joint"]["micro"] == pytest.approx(1 / 4) and res["errors"] == 1
    for m in o.values():
        assert m["micro_ci"][0] <= m["micro"] <= m["micro_ci"][1] and m["macro_ci"][0] <= m["macro"] <= m["macro_ci"][1]
    # task b has one episode: resampling within the task cannot move it, so its interval is a point
    assert res["by_task"]["b"]["guide_grounding"] == {"value": 1.0, "ci": [1.0, 1.0]}
    assert res["by_task"]["a"]["success"]["ci"][0] < res["by_task"]["a"]["success"]["ci"][1]
    # a policy without guides: guide metrics are n/a, not zero
    res = evaluate.results([evaluate.episode_row(e, guides=False) for e in eps],
                           {"order": "action_only", "policy": "expert"}, 50)
    assert res["overall"]["guide_grounding"] is None and res["overall"]["joint"] is None
    assert res["by_task"]["a"]["joint"] is None and res["guide_metrics"].startswith("n/a")
    assert evaluate.fmt(None, "joint") == "n/a"
    # the expert with its template guides: scored, and labelled as the guides' ceiling, not as a policy's
    cfg = {"order": "guide_first", "policy": "expert", "suite": "s", "grounding": "som", "max_steps": 30}
    res = evaluate.results([evaluate.episode_row(e, guides=True) for e in eps], cfg, 50)
    assert res["overall"]["joint"]["micro"] == pytest.approx(1 / 4)
    assert res["guide_metrics"].startswith("the guides' ceiling")
    page = html.unescape(evaluate.report_html(res, []))
    assert "guide grounding (the guides' ceiling)" in page and "joint success (the guides' ceiling)" in page
    assert "task success (the guides' ceiling)" not in page


def test_report_overlay_positions_and_escaping():
    ep = {"viewport": [1000, 500]}
    step = {"elements": [{"mark": 2, "tag": "a", "role": "link", "text": "Orders", "bbox": [100, 50, 200, 100]}],
            "action": metrics.make_action("click", mark=2, point=[150, 75]),
            "guide": "Open <b>**Orders**</b> <script>x()</script>"}
    out = evaluate.step_overlay(ep, step, "som")
    assert 'class="hl" style="left:10.00%;top:10.00%;width:10.00%;height:10.00%"' in out
    assert out.endswith('&lt;/script&gt;<span class="act">click(2)</span></div>')   # the action, smaller
    assert 'class="bubble r" style="left:calc(20.00% + 12px)' in out     # more room on the right
    assert "<script>" not in out and "&lt;script&gt;" in out and "<b>&lt;b&gt;Orders&lt;/b&gt;</b>" not in out
    assert "Open &lt;b&gt;<b>Orders</b>&lt;/b&gt;" in out                  # only the guide's **label** becomes bold
    step["elements"][0]["bbox"] = [800, 50, 900, 100]
    assert 'class="bubble l" style="right:calc(20.00% + 12px)' in evaluate.step_overlay(ep, step, "som")
    # in the lower half the callout grows upward from the target's middle, so it stays on the screenshot
    step["elements"][0]["bbox"] = [800, 400, 900, 450]
    assert 'class="bubble l up" style="right:calc(20.00% + 12px);max-width:min(46%, calc(80.00% - 16px));' \
           'bottom:11.50%"' in evaluate.step_overlay(ep, step, "som")   # (500 - 425 - 17.5) / 500
    # a target too wide to leave room beside it, or in a table row: the callout under it (over it, lower down)
    step["elements"][0]["bbox"] = [50, 50, 950, 100]
    assert 'class="bubble b" style="left:5.00%;max-width:46%;top:calc(20.00% + 12px)"' in \
           evaluate.step_overlay(ep, step, "som")
    step["elements"][0].update(bbox=[100, 400, 110, 410], row="Blue mug")
    assert 'class="bubble a" style="left:10.00%;max-width:46%;bottom:calc(20.00% + 12px)"' in \
           evaluate.step_overlay(ep, step, "som")
    coord = {"elements": [], "action": metrics.make_action("click", point=[500, 250]), "guide": None}
    out = evaluate.step_overlay(ep, coord, "coord")
    assert 'class="pt" style="left:50.00%;top:50.00%"' in out and "noguide" in out and "act" not in out
    press = {"elements": [], "action": metrics.make_action("press", value="Enter"), "guide": None}
    assert evaluate.step_overlay(ep, press, "som") == '<div class="bubble noguide top">press Enter</div>'
    press["guide"] = "Press **Enter** to search."
    assert evaluate.step_overlay(ep, press, "som") == ('<div class="bubble top">Press <b>Enter</b> to search.'
                                                       '<span class="act">press(&quot;Enter&quot;)</span></div>')


def test_the_expert_writes_the_template_drafters_guide_live():
    """No browser: a scripted expert's replies (a scroll, then a click, then stop) fed step by step as
    collect.run_episode feeds them. Each step's guide is written when the step is taken; the scroll's names the
    target it brings into view once that target is on screen -- and every guide is the template drafter's
    for the finished episode."""
    save = {"mark": 1, "tag": "button", "role": "button", "text": "Save", "bbox": [10, 500, 60, 520],
            "section": "Shipping"}

    class Script:
        purpose = None
        replies = [('Action: scroll("down")', None), ("Action: click(1)", "to save the order"),
                   ("Action: stop()", None)]

        async def act(self, obs):
            reply, self.purpose = self.replies[obs["step"]]
            return reply

    assert evaluate.parse_args(["--policy", "expert"]).order == "guide_first"   # the default
    policy = evaluate.GuidedExpert(Script(), "guide_first")
    ep = {"id": "backoffice.x.0", "viewport": [800, 600], "steps": []}
    replies = []
    for k in range(3):
        ep["steps"].append({"step": k, "elements": [save] if k else [], "action": None, "guide": None})
        reply = asyncio.run(policy.act({"episode": ep, "step": k}))
        replies.append(reply)
        guide, action = metrics.parse_output(reply, "som", "guide_first", ep["viewport"])
        ep["steps"][k].update(action=action, guide=guide, **({"purpose": policy.purpose} if policy.purpose else {}))
        assert ep["steps"][k]["guide_meta"] == {"drafter": "policy:expert:template"}
    assert [s["guide"] for s in ep["steps"]] == metrics.template_guides(ep)
    assert ep["steps"][0]["guide"].endswith(" to bring the **Save** button into view.")
    assert "Save" not in replies[0]   # when the scroll was taken, its target was not on screen yet
    assert "**Save**" in ep["steps"][1]["guide"] and ep["steps"][1]["guide"].endswith("to save the order.")


def test_report_escapes_every_value_it_inserts():
    evil = "</title></style><script>x()</script>"
    ep = fake_episode("a", 0, True, [("Click **Save**.", "click", None)])
    ep.update(id=evil, instruction=evil, viewport=[100, 100], meta={"seconds": evil})
    cfg = {"order": "guide_first", "policy": "api", "api_model": evil, "suite": evil, "grounding": "som",
           "max_steps": evil}
    res = evaluate.results([evaluate.episode_row(ep, guides=True)], cfg, n_boot=20)
    page = evaluate.report_html(res, [ep])
    assert "<script>" not in page and page.count("</title>") == 1 and page.count("</style>") == 1
    assert "1 steps, ? s" in page       # seconds that are not a number are not shown
    ep["meta"]["seconds"] = 12.345
    assert "1 steps, 12.3 s" in evaluate.report_html(res, [ep])


# ----------------------------------------------------------------------------------------------
# Live runs.

def test_expert_run_report_resume_and_playback(tmp_path, capsys):
    out = tmp_path / "run"
    res = run(out, "--tasks", "close-ticket", "--episodes", "2", "--workers", "2")
    assert res["episodes"] == 2 and res["errors"] == 0 and res["overall"]["success"]["micro"] == 1.0
    assert res["overall"]["invalid_rate"]["micro"] == 0.0
    # the expert writes its guides (guide_first): scored, every one grounded, labelled as the guides' ceiling
    assert res["overall"]["guide_grounding"]["micro"] == 1.0 and res["overall"]["joint"]["micro"] == 1.0
    on_disk = json.load(open(out / "results.json"))
    assert on_disk["overall"] == res["overall"] and on_disk["config"]["order"] == "guide_first"
    assert on_disk["guide_metrics"].startswith("the guides' ceiling")
    eps = sorted(metrics.load_dataset(out, check_images=True), key=lambda e: e["seed"])   # the run is a dataset
    assert [e["seed"] for e in eps] == [SEEDS, SEEDS + 1]
    # each guide is the sentence `annotate.py draft --drafter template` writes for that step
    plain = tmp_path / "plain"
    shutil.copytree(out / "img", plain / "img")
    metrics.write_dataset(plain, [{**e, "steps": [{**s, "guide": None, "guide_status": None, "guide_meta": None}
                                                   for s in e["steps"]]} for e in eps])
    annotate.main(["draft", str(plain), "--drafter", "template"])
    drafted = sorted(metrics.load_dataset(plain), key=lambda e: e["seed"])
    assert [[s["guide"] for s in e["steps"]] for e in eps] == [[s["guide"] for s in e["steps"]] for e in drafted]
    steps = [s for e in eps for s in e["steps"]]
    assert all(s["guide"] and s["guide_meta"]["drafter"] == "policy:expert:template" for s in steps)
    # the report, in Chromium: every screenshot loaded, one highlight per element step, a callout per step that
    # shows its guide (the target's name in bold) with the action under it
    shown = render(out / "report.html", tmp_path / "report.png")
    assert shown["images"] == len(steps) == shown["bubble"] and shown["noguide"] == 0
    assert shown["hl"] == sum(s["action"]["op"] in metrics.ELEMENT_OPS for s in steps)
    for s, callout, act in zip(steps, shown["callouts"], shown["actions"]):
        assert callout.startswith(s["guide"].replace("**", "")) and act in callout
        assert act == metrics.format_action(s["action"], "som", eps[0]["viewport"])
    assert {"Username", "Password", "Log in"} <= set(shown["names"])
    # a rerun skips what is done and gives the same numbers; another policy may not join the run
    capsys.readouterr()
    again = run(out, "--tasks", "close-ticket", "--episodes", "2", "--workers", "2")
    assert "0 episodes to run (2 already done)" in capsys.readouterr().out and again["overall"] == res["overall"]
    # an interrupted write (a torn last line) is set aside and that episode run again
    file = out / "episodes.jsonl"
    lines = file.read_bytes().split(b"\n")
    file.write_bytes(lines[0] + b"\n" + lines[1][:40])
    again = run(out, "--tasks", "close-ticket", "--episodes", "2", "--workers", "2")
    printed = capsys.readouterr().out
    assert "torn last line" in printed and "1 episodes to run (1 already done)" in printed
    assert again["episodes"] == 2 and again["overall"]["success"]["micro"] == 1.0
    with pytest.raises(SystemExit, match="other settings.*policy: 'expert' -> 'random'"):
        run(out, "--tasks", "close-ticket", "--episodes", "2", "--policy", "random")
    with pytest.raises(SystemExit, match="other settings.*order: 'guide_first' -> 'action_only'"):
        run(out, "--tasks", "close-ticket", "--episodes", "2", "--order", "action_only")
    # playback: the same reset, each step's tooltip on the live element, the same outcome as recorded
    ep_id = eps[0]["id"]
    record = evaluate.main(["--playback", str(out), "--episode", ep_id])
    assert record["success"] is True and record["recorded_success"] is True and not record["diverged"]
    assert len(record["steps"]) == len(eps[0]["steps"])
    for s, rec in zip(record["steps"], eps[0]["steps"]):
        assert os.path.getsize(out / s["screenshot"]) > 10_000
        if rec["action"]["op"] in metrics.ELEMENT_OPS:
            assert s["how"] == "mark" and s["anchor"][0] in ("input", "a", "select", "button"), s
    assert json.load(open(out / "playback" / ep_id / "playback.json"))["success"] is True
    with pytest.raises(SystemExit, match="no episode 'nope'.*backoffice.close-ticket"):
        evaluate.main(["--playback", str(out), "--episode", "nope"])
    with pytest.raises(SystemExit, match="no run folder"):
        evaluate.main(["--playback", str(tmp_path / "missing"), "--episode", ep_id])
    # --order action_only: the expert without guides, its guide metrics n/a, its callouts the plain action
    res = run(tmp_path / "action_only", "--tasks", "close-ticket", "--episodes", "1", "--order", "action_only")
    assert res["overall"]["success"]["micro"] == 1.0 and res["overall"]["guide_grounding"] is None
    assert res["guide_metrics"] == "n/a: the expert policy writes no guides (action_only)"
    assert not any(s["guide"] for e in metrics.load_dataset(tmp_path / "action_only") for s in e["steps"])


def test_random_policy_succeeds_on_almost_none(tmp_path):
    res = run(tmp_path, "--tasks", "close-ticket,deactivate-product", "--episodes", "2", "--policy", "random",
              "--max-steps", "5", "--workers", "2")
    errors = [(e["id"], e["error"]) for e in metrics.load_dataset(tmp_path) if e["error"]]
    assert res["episodes"] == 4 and not errors, errors
    assert res["overall"]["success"]["micro"] <= 0.25 and res["overall"]["mean_steps"]["micro"] > 3
    assert res["overall"]["joint"] is None


def prompt_text(body):
    return next(c["text"] for c in body["messages"][1]["content"] if c["type"] == "text")


def mark_of(role, text):
    """A scripted reply's target, read from the prompt's element list (--elements text), like a model reading
    the marks."""
    def find(body):
        return int(re.search(rf"^\[(\d+)\] {role} {re.escape(json.dumps(text))}$", prompt_text(body), re.M)[1])
    return find


def test_api_policy_scripted_fake_endpoint(tmp_path, monkeypatch, capsys):
    user, password = mark_of("textbox", "Username:"), mark_of("textbox", "Password:")
    login = mark_of("button", "Log in")
    script = [
        "OK",                                                                                 # preflight
        lambda b: f'Guide: Type **admin** into the **Username** field.\nAction: type({user(b)}, "admin")',
        500,                                                                                  # retried...
        lambda b: ("Guide: Enter the password in the **Password** field.\n"
                   f'Action: type({password(b)}, "admin-pass-2026")'),
        "lol ok",                                                                             # garbage: invalid step
        400,                                                                                  # refused: invalid step
        "badjson",                                                                            # retried...
        lambda b: f"**Guide:** Click **Log in** to sign in.\n**Action:** click({login(b)})",  # markdown
        "Guide: Click the thing.\nAction: click(999)",                                        # no such mark
        'Guide: I am done with the task.\nAction: stop("3")',
    ]
    api = FakeAPI(script, key=KEY)
    monkeypatch.setenv("MAG_TEST_KEY", KEY)
    out = tmp_path / "run"
    try:
        res = run(out, "--tasks", "count-unpaid-orders", "--episodes", "1", "--policy", "api", "--api-base", api.base,
                  "--api-model", "fake-vlm", "--api-key-env", "MAG_TEST_KEY", "--elements", "text",
                  "--api-timeout", "0.5", "--api-retries", "1", "--api-backoff", "0.05", "--max-steps", "10",
                  "--api-extra", '{"max_tokens": null, "top_p": 0.5}')
    finally:
        api.close()
    printed = capsys.readouterr()
    assert not api.script and len(api.requests) == 10
    ep = metrics.load_dataset(out, check_images=True)[0]
    steps = ep["steps"]
    assert len(steps) == 7 and not ep["success"] and ep["error"] is None
    assert [s.get("exec_error") for s in steps] == [None, None, "unparseable reply", "unparseable reply", None,
                                                    "mark 999 is not on this screen", None]
    assert "HTTP 400 after 1 attempt(s)" in steps[3]["api_error"] and res["api_failed"] == []
    assert steps[3]["reply"] == ""
    assert steps[2]["reply"] == "lol ok" and steps[4]["guide"] == "Click **Log in** to sign in."
    assert steps[4]["guide_status"] == "draft" and steps[4]["guide_meta"] == {"drafter": "policy:api:fake-vlm"}
    assert [s["action"]["op"] for s in steps] == ["type", "type", "stop", "stop", "click", "click", "stop"]
    assert steps[4]["url"].endswith("/admin/login/?next=/admin/") and "/admin/" in steps[5]["url"]
    o = res["overall"]
    assert o["invalid_rate"]["micro"] == pytest.approx(3 / 7) and o["guide_grounding"]["micro"] == pytest.approx(4 / 7)
    assert o["success"]["micro"] == 0 and o["joint"]["micro"] == 0 and o["mean_steps"]["micro"] == 7
    # the request: the training prompt, the Set-of-Mark screenshot as a data URL, the key only in the header
    first = api.requests[1]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == f"Bearer {KEY}"
    body = first["body"]
    assert body["model"] == "fake-vlm" and body["temperature"] == 0 and body["top_p"] == 0.5
    assert "max_tokens" not in body
    assert body["messages"][0] == {"role": "system", "content": metrics.system_text("som", "guide_first")}
    url = next(c["image_url"]["url"] for c in body["messages"][1]["content"] if c["type"] == "image_url")
    assert url.startswith("data:image/png;base64,")
    from PIL import Image
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
    raw = Image.open(out / steps[0]["screenshot"]).convert("RGB")
    assert sent.tobytes() == metrics.draw_som(raw, steps[0]["elements"]).tobytes() != raw.tobytes()
    assert "Elements:" in prompt_text(body) and ep["instruction"] in prompt_text(body)
    assert "Guide: Type **admin** into the **Username** field." in prompt_text(api.requests[3]["body"])  # its history
    # after the garbage and the refused request
    history = prompt_text(api.requests[7]["body"]).split("Previous steps:\n")[1].split("\n\n")[0]
    act = [metrics.format_action(s["action"], "som", ep["viewport"]) for s in steps]
    assert history.splitlines() == [f"1. Guide: {steps[0]['guide']} | Action: {act[0]}",
                                    f"2. Guide: {steps[1]['guide']} | Action: {act[1]}"]
    # the key is nowhere: not printed, not in any file of the run
    assert KEY not in printed.out + printed.err
    for root, _, files in os.walk(out):
        for name in files:
            assert KEY.encode() not in open(os.path.join(root, name), "rb").read(), name
    shown = render(out / "report.html", tmp_path / "report.png")
    assert shown["images"] == 7 and shown["bubble"] == 7 and shown["noguide"] == 2   # the two steps without a reply


def test_endpoint_down_mid_run_is_the_runs_error_and_a_rerun_redoes_it(tmp_path, capsys):
    """The server dies during a run: the episodes whose steps failed after the retries are not scored as the
    policy's (they were invalid steps, "0 errors", exit 0, and a rerun skipped them); they are counted and named
    in the console and results.json, kept in api_failed.jsonl, the run exits non-zero, and the same command
    redoes them once the endpoint is back."""
    stop = 'Guide: Stop here.\nAction: stop("")'

    def dies(body):
        api.die()
        return 'Guide: Scroll down to see more.\nAction: scroll("down")'
    api = FakeAPI(["OK", dies])
    out = tmp_path / "run"
    argv = ["--tasks", "close-ticket", "--episodes", "2", "--policy", "api", "--api-base", api.base, "--api-model",
            "m", "--api-retries", "1", "--api-backoff", "0.05", "--max-steps", "3", "--n-boot", "10"]
    try:
        with pytest.raises(SystemExit) as e:
            run(out, *argv)
    finally:
        api.close()
    ids = [f"backoffice.close-ticket.{SEEDS}", f"backoffice.close-ticket.{SEEDS + 1}"]
    assert str(e.value).startswith(f"evaluate: 2 episodes not scored, the endpoint failed after its retries "
                                   f"({ids[0]}, {ids[1]}; ApiError: {api.base}: URLError: ")
    assert "Connection refused after 2 attempt(s)): run the same evaluation to redo them" in str(e.value)
    assert "evaluate: 0 episodes (0 errors; 2 not scored, the endpoint failed), 0 steps" in capsys.readouterr().out
    res = json.load(open(out / "results.json"))
    assert res["episodes"] == 0 and [f["id"] for f in res["api_failed"]] == ids
    assert "Connection refused" in res["api_failed"][0]["error"] and not os.path.exists(out / "episodes.jsonl")
    kept = open(out / metrics.API_FAILED, "rb").read()
    first = [json.loads(line) for line in kept.splitlines()]
    assert [r["id"] for r in first] == ids and len(first[0]["steps"]) == 1 and not first[1]["steps"]
    # the endpoint is back (same address): the same command redoes both, and the record of the outage stays
    api = FakeAPI(["OK"] + [stop] * 2, port=int(api.base.split(":")[-1].split("/")[0]))
    try:
        res = run(out, *argv)
    finally:
        api.close()
    printed = capsys.readouterr().out
    assert "2 episodes to run (0 already done)" in printed and "evaluate: 2 episodes (0 errors), 2 steps" in printed
    assert res["episodes"] == 2 and res["api_failed"] == [] and len(api.requests) == 3
    assert open(out / metrics.API_FAILED, "rb").read() == kept
    assert [e["id"] for e in metrics.load_dataset(out, check_images=True)] == ids


def children(pid):
    """The processes whose parent is pid (from /proc)."""
    kids = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{name}/stat") as f:
            if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                kids.add(int(name))
    return kids


def running(pid):
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_background_run_and_its_app_servers(tmp_path, sig):
    """Started as a shell's background job (SIGINT ignored, inherited), then Ctrl-C or SIGTERM (`timeout`, a
    scheduler): the run stops as Ctrl-C does, the finished episodes are kept and no app server outlives it."""
    cmd = [sys.executable, os.path.join(ROOT, "evaluate.py"), "--suite", "backoffice", "--tasks", "close-ticket",
           "--episodes", "6", "--seed", str(SEEDS), "--workers", "2", "--out", str(tmp_path), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    file, deadline = tmp_path / "episodes.jsonl", time.time() + 120
    while time.time() < deadline and (not file.exists() or file.read_bytes().count(b"\n") < 1):
        time.sleep(0.05)
    servers = [pid for pid in children(proc.pid) if b"runserver" in open(f"/proc/{pid}/cmdline", "rb").read()]
    assert len(servers) == 2   # one per worker
    proc.send_signal(sig)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130 and "rerun the same command to continue" in out, out
    assert 1 <= len(metrics.load_dataset(tmp_path)) < 6
    deadline = time.time() + 10
    while time.time() < deadline and any(map(running, servers)):
        time.sleep(0.1)
    assert not any(map(running, servers))


def test_clear_errors_before_any_browser(tmp_path, monkeypatch):
    api = FakeAPI([], key=KEY)
    monkeypatch.delenv("MAG_TEST_KEY", raising=False)
    argv = ["--tasks", "close-ticket", "--episodes", "1", "--policy", "api", "--api-base", api.base, "--api-model", "m",
            "--api-key-env", "MAG_TEST_KEY"]
    try:
        with pytest.raises(SystemExit, match=r"needs an API key: \$MAG_TEST_KEY is not set"):
            run(tmp_path / "a", *argv)
        monkeypatch.setenv("MAG_TEST_KEY", "sk-wrong")
        with pytest.raises(SystemExit, match=r"key in \$MAG_TEST_KEY was refused") as e:
            run(tmp_path / "a", *argv)
        assert "sk-wrong" not in str(e.value)
    finally:
        api.close()
    with pytest.raises(SystemExit, match="nothing answers"):
        run(tmp_path / "b", *argv)   # the server is gone now
    with pytest.raises(SystemExit):   # argparse: exit code 2 with a message on stderr
        evaluate.parse_args(["--policy", "api"])
    with pytest.raises(SystemExit):
        evaluate.parse_args(["--policy", "api", "--api-model", "m", "--api-extra", "{top_p: 1}"])
    with pytest.raises(SystemExit, match="unknown backoffice task"):
        run(tmp_path / "c", "--tasks", "no-such-task")
    os.makedirs(tmp_path / "d")
    (tmp_path / "d" / "episodes.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(SystemExit, match="did not write"):
        run(tmp_path / "d", "--tasks", "close-ticket")


def test_ckpt_policy_runs_a_local_model_with_replays_prompt(tmp_path, tiny_models):
    """--policy ckpt: a tiny random model acts live (its garbage replies are invalid steps; the run
    completes), and its reply to a recorded step is exactly what replay.py decodes for that step."""

    import torch

    import replay
    out = tmp_path / "ck"
    res = evaluate.main(["--suite", "miniwob", "--tasks", "click-button", "--policy", "ckpt",
                         "--ckpt", tiny_models["qwen2_5_vl"], "--episodes", "1", "--max-steps", "2",
                         "--max-new-tokens", "12", "--out", str(out), "--no-progress"])
    assert res["episodes"] == 1 and res["errors"] == 0 and res["overall"]["success"]["micro"] == 0
    assert res["overall"]["invalid_rate"]["micro"] == 1.0 and res["config"]["ckpt"]
    ep = metrics.load_dataset(str(out))[0]
    assert all("reply" in s and s["exec_error"] == "unparseable reply" for s in ep["steps"])

    args = evaluate.parse_args(["--policy", "ckpt", "--ckpt", tiny_models["qwen2_5_vl"], "--max-new-tokens", "12"])
    model, processor, _ = evaluate.load_model(args.ckpt, torch.device("cpu"))
    policy = evaluate.CkptPolicy(args, model, processor, threading.Lock())
    with open(os.path.join(str(out), ep["steps"][0]["screenshot"]), "rb") as f:
        live = policy.generate(ep, 0, f.read())
    opts = {"grounding": "som", "order": "guide_first", "elements": "none"}
    model2, processor2, _ = replay.load_model(tiny_models["qwen2_5_vl"], torch.device("cpu"), torch.float32)
    text, image = metrics.chat_prompt(processor2, ep, 0, opts)
    assert live == replay.generate(model2, processor2, [text], [image], 12)[0]
    with pytest.raises(SystemExit):
        evaluate.parse_args(["--policy", "ckpt", "--ckpt", str(tmp_path / "nothing")])


def test_ckpt_policy_takes_the_prompt_options_its_checkpoint_was_trained_with(tmp_path, tiny_models, capsys):
    """--policy ckpt reads train_config.json, or sft_config.json in checkpoints written before that name;
    a flag wins; a checkpoint folder that cannot be loaded stops with its path named."""
    import shutil

    import torch
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_models["qwen2_5_vl"], ckpt)

    def options(*flags):
        args = evaluate.parse_args(["--policy", "ckpt", "--ckpt", str(ckpt), *flags])
        return args.grounding, args.order, args.elements

    old_name = {"grounding": "coord", "order": "action_first", "elements": "text"}
    (ckpt / "sft_config.json").write_text(json.dumps(old_name))
    assert options() == ("coord", "action_first", "text")
    assert options("--order", "guide_first") == ("coord", "guide_first", "text")
    new_name = {"grounding": "som", "order": "action_only", "elements": "none"}
    (ckpt / metrics.TRAIN_CONFIG).write_text(json.dumps(new_name))
    assert options() == ("som", "action_only", None)  # the new name first; no elements is None in run.json, as before
    api = evaluate.parse_args(["--policy", "api", "--api-model", "m"])
    assert (api.grounding, api.order, api.elements) == ("som", "guide_first", None)
    # and they are the options the policy builds its prompt with
    model, processor, _ = evaluate.load_model(str(ckpt), torch.device("cpu"))
    args = evaluate.parse_args(["--policy", "ckpt", "--ckpt", str(ckpt), "--elements", "text"])
    policy = evaluate.CkptPolicy(args, model, processor, threading.Lock())
    assert policy.opts == {"grounding": "som", "order": "action_only", "elements": "text"}

    os.remove(ckpt / "config.json")
    with pytest.raises(SystemExit):
        options()
    assert f"got {str(ckpt)!r}: no config.json there" in capsys.readouterr().err
    shutil.copy(os.path.join(tiny_models["qwen2_5_vl"], "config.json"), ckpt)
    with open(ckpt / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    args = evaluate.parse_args(["--policy", "ckpt", "--ckpt", str(ckpt)])
    with pytest.raises(SystemExit, match=re.escape(f"--ckpt {ckpt}: cannot load the checkpoint (SafetensorError")):
        evaluate.make_policy(args, env=None)
