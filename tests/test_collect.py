"""collect.py in a real headless Chromium: determinism, experts, faults, resume, blocking, human recording."""
import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import assert_dap_guides, live_page

import collect
import envs
import metrics
from envs import miniwob

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERT_SEEDS = range(500, 503)   # unseen seeds: the experts were developed on 0..29


def run(out, *argv):
    return collect.main(["--out", str(out), "--no-progress", *argv])


def strip_volatile(ep):
    ep = {k: v for k, v in ep.items() if k != "_root"}
    ep["meta"] = {k: v for k, v in ep["meta"].items() if k != "seconds"}
    return ep


def test_same_seed_same_episode(tmp_path):
    """Seed 7 alone in a fresh browser (the page loaded for it), and seed 7 after seed 6 in the same page (a
    MiniWoB++ reset in the page, no reload): identical bytes, on every task with an expert."""
    run(tmp_path / "a", "--tasks", "all", "--episodes", "1", "--seed", "7")
    run(tmp_path / "b", "--tasks", "all", "--episodes", "2", "--seed", "6")
    a = metrics.load_dataset(tmp_path / "a")
    b = [e for e in metrics.load_dataset(tmp_path / "b") if e["seed"] == 7]
    assert len(a) == len(b) == len(miniwob.EXPERTS)
    assert [strip_volatile(e) for e in a] == [strip_volatile(e) for e in b]
    for ep in a:
        assert ep["success"] and "__MINIWOB__" in ep["start_url"]
        for s in ep["steps"]:
            pa, pb = (open(tmp_path / d / s["screenshot"], "rb").read() for d in ("a", "b"))
            assert pa == pb, f"{ep['id']} step {s['step']}: screenshots differ"


def test_a_reset_reloads_the_page_only_for_another_task():
    """The next episode of the same task starts in the loaded page (MiniWoB's own core.startEpisodeReal,
    seeded); another task, or a page that has left the task, is loaded fresh."""
    async def main():
        async with live_page("miniwob") as (env, page):
            kept = "() => window.__kept === 1"
            first = await env.reset(page, "click-button", 1)
            await page.evaluate("() => { window.__kept = 1; window.__mag.leaving = true; }")
            assert await env.reset(page, "click-button", 1) == first          # same seed, same problem
            assert await page.evaluate(kept) and not await page.evaluate("window.__mag.leaving")
            assert await env.reset(page, "click-button", 2) != first
            assert await page.evaluate(kept)
            await env.reset(page, "enter-text", 1)
            assert not await page.evaluate(kept)                               # another task: loaded
            await page.evaluate("() => { window.__kept = 1; }")
            await page.goto(env.url("enter-text") + "?other")
            await env.reset(page, "enter-text", 1)
            assert not await page.evaluate(kept)                               # left the task page: loaded
    asyncio.run(main())


def test_a_shared_browser_reuses_the_contexts_workers_gave_back(tmp_path):
    """train_grpo runs episodes again and again on one collect.Browser: a later run takes the contexts an earlier
    one gave back (the one showing its task first) and records the same bytes; after the browser died, new ones."""
    from playwright.async_api import async_playwright
    jobs = [("click-button", 1), ("enter-text", 2)]

    async def main():
        env = collect.make_env("miniwob")
        make = lambda task, seed: collect.make_policy("expert", env, task, seed)  # noqa: E731
        try:
            async with async_playwright() as pw:
                browser = collect.Browser(pw, headless=True)
                run = lambda name: collect.run_episodes(env, jobs, make, str(tmp_path / name), workers=2,  # noqa: E731
                                                        browser=browser, progress=False)
                await run("a")
                contexts = list((await browser.get()).contexts)
                assert len(contexts) == 2 and len(browser.idle) == 2
                await run("b")
                assert (await browser.get()).contexts == contexts and len(browser.idle) == 2
                await browser.browser.close()   # died: its contexts go with it
                await run("c")
                assert not set((await browser.get()).contexts) & set(contexts) and len(browser.idle) == 2
                await browser.close()
        finally:
            env.close()
    asyncio.run(main())
    a = {e["id"]: e for e in metrics.load_dataset(tmp_path / "a")}
    for name in ("b", "c"):
        other = {e["id"]: e for e in metrics.load_dataset(tmp_path / name)}
        assert other.keys() == a.keys() and all(e["success"] and not e["error"] for e in other.values())
        for i, ep in a.items():
            assert strip_volatile(ep) == strip_volatile(other[i])
            for step in ep["steps"]:
                assert (tmp_path / "a" / step["screenshot"]).read_bytes() == \
                    (tmp_path / name / step["screenshot"]).read_bytes(), (name, i, step["step"])


def test_experts_solve_unseen_seeds(tmp_path):
    summary = run(tmp_path, "--tasks", "all", "--episodes", str(len(EXPERT_SEEDS)), "--seed", str(EXPERT_SEEDS[0]),
                  "--workers", "2")
    assert len(miniwob.EXPERTS) >= 14 and summary["errors"] == 0
    assert summary["by_task"].keys() == miniwob.EXPERTS.keys()
    failed = {t: v for t, v in summary["by_task"].items() if v["success"] < 1}
    assert not failed, failed
    eps = metrics.load_dataset(tmp_path, check_images=True)
    multi = {e["task"] for e in eps if len(e["steps"]) > 1}
    assert len(multi) >= 8, multi
    for ep in eps:
        for s in ep["steps"]:
            a = s["action"]
            if a["op"] in metrics.ELEMENT_OPS:   # every target is one of the marks, and its point is in its box
                el = next(e for e in s["elements"] if e["mark"] == a["mark"])
                assert metrics.in_box(a["point"], el["bbox"]), (ep["id"], s["step"])
    assert_dap_guides(eps)   # a purpose on every expert move; template guides that name targets rightly


def test_resume_skips_finished_and_repairs_torn_line(tmp_path, capsys):
    run(tmp_path, "--tasks", "click-button", "--episodes", "3")
    file = tmp_path / "episodes.jsonl"
    lines = file.read_bytes().split(b"\n")
    file.write_bytes(b"\n".join(lines[:2]) + b"\n" + lines[2][:50])       # the third write was cut short
    with pytest.raises(metrics.DatasetError, match="cut short"):
        metrics.load_dataset(tmp_path)
    with pytest.raises(SystemExit, match="--resume"):                       # never appends to a dataset silently
        run(tmp_path, "--tasks", "click-button", "--episodes", "4")
    summary = run(tmp_path, "--tasks", "click-button", "--episodes", "4", "--resume")
    out = capsys.readouterr().out
    assert "torn last line" in out and "2 episodes to run (2 already done)" in out
    eps = metrics.load_dataset(tmp_path)
    assert file.read_bytes().split(b"\n")[:2] == lines[:2]                  # finished lines untouched
    assert sorted(e["seed"] for e in eps) == [0, 1, 2, 3] and summary["episodes"] == 4
    assert (tmp_path / "episodes.jsonl.torn").read_bytes() == lines[2][:50] + b"\n"


def browser_pids():
    """Main Chromium processes started by this test process (descendants, no --type= flag)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        parents[int(pid)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)

    def mine(pid):
        while pid in parents and pid > 1:
            pid = parents[pid][0]
            if pid == os.getpid():
                return True
        return False
    return [p for p, (_, cmd) in parents.items()
            if mine(p) and cmd and b"chrom" in cmd[0] and not any(c.startswith(b"--type=") for c in cmd)]


def killing_expert(kills):
    """login-user's expert, but the browser process is SIGKILLed before its second move (`kills` times)."""
    async def expert(page, instruction):
        moves = miniwob.EXPERTS["login-user"](page, instruction)
        yield await moves.__anext__()
        if kills[0] > 0:
            kills[0] -= 1
            for pid in browser_pids():
                os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.5)
        async for do in moves:
            yield do
    return expert


def collect_with_kills(tmp_path, monkeypatch, n):
    """login-user under the name login-killed, whose expert SIGKILLs the browser `n` times."""
    kills = [n]
    monkeypatch.setitem(miniwob.EXPERTS, "login-killed", killing_expert(kills))
    monkeypatch.setattr(miniwob.MiniWoB, "url",
                        lambda self, task: f"{self.base}/miniwob/{task.replace('-killed', '-user')}.html")
    monkeypatch.setattr(miniwob.MiniWoB, "has_task", lambda self, task: True)
    summary = run(tmp_path, "--tasks", "login-killed", "--episodes", "2")
    assert kills == [0]
    return summary


def test_browser_killed_mid_episode_is_retried(tmp_path, monkeypatch):
    summary = collect_with_kills(tmp_path, monkeypatch, 1)
    eps = metrics.load_dataset(tmp_path, check_images=True)
    assert summary["episodes"] == 2 and summary["success_rate"] == 1.0 and summary["errors"] == 0
    assert [len(e["steps"]) for e in eps] == [3, 3]          # the retried episode starts over: no stale steps
    retried = [e["meta"].get("retries") for e in eps]      # and its record says what failed, on which try
    assert retried[1] is None and [r["try"] for r in retried[0]] == [1] and retried[0][0]["error"]


def test_browser_killed_twice_is_recorded_not_dropped(tmp_path, monkeypatch):
    summary = collect_with_kills(tmp_path, monkeypatch, 2)
    eps = metrics.load_dataset(tmp_path)
    assert summary["episodes"] == 2 and summary["errors"] == 1
    bad, good = eps[0], eps[1]
    assert bad["seed"] == 0 and not bad["success"] and bad["error"] and bad["steps"]   # partial steps kept
    assert [r["try"] for r in bad["meta"]["retries"]] == [1, 2]
    assert good["success"] and good["error"] is None


def test_navigation_to_other_origin_is_blocked(tmp_path, monkeypatch):
    original = miniwob.EXPERTS["click-button"]

    async def wanderer(page, instruction):
        await page.evaluate("""() => { const a = document.createElement('a'); a.href = 'http://10.255.255.1/evil';
            a.textContent = 'elsewhere'; a.id = 'away'; document.querySelector('#area').prepend(a); }""")
        yield envs.Move("scroll", value="down")   # a harmless move, so the next observation marks the link
        yield envs.Move("click", css="#away")
        async for do in original(page, instruction):
            yield do
    monkeypatch.setitem(miniwob.EXPERTS, "click-button", wanderer)
    run(tmp_path, "--tasks", "click-button", "--episodes", "1")
    ep = metrics.load_dataset(tmp_path)[0]
    assert ep["meta"]["blocked"] == ["http://10.255.255.1/evil"]
    assert ep["success"] and "__MINIWOB__" in ep["steps"][2]["url"]   # the page stayed where it was


def test_ctrl_c_leaves_valid_dataset_and_resume_finishes(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "collect.py"), "--tasks", "click-button,click-link", "--episodes", "20",
           "--out", str(tmp_path), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    file = tmp_path / "episodes.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not file.exists() or file.read_bytes().count(b"\n") < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, out
    assert "rerun with --resume" in out
    n = len(metrics.load_dataset(tmp_path))
    assert 3 <= n < 40
    done = subprocess.run(cmd + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    eps = metrics.load_dataset(tmp_path)
    assert len(eps) == 40 and len({e["id"] for e in eps}) == 40


def test_random_policy_and_garbage_replies(tmp_path, monkeypatch):
    summary = run(tmp_path, "--tasks", "click-checkboxes", "--episodes", "2", "--policy", "random", "--max-steps", "5")
    assert summary["episodes"] == 2 and summary["errors"] == 0

    class Garbage:  # a model that answers nonsense: wasted steps, never a crash
        order, grounding, executed = "guide_first", "som", False

        async def act(self, obs):
            return ["", "Guide: hi\nAction: click(999)", "Action: eval('1')", "\x00\x01"][obs["step"] % 4]
    monkeypatch.setattr(collect, "make_policy", lambda name, env, task, seed: Garbage())
    run(tmp_path / "g", "--tasks", "click-button", "--episodes", "1", "--max-steps", "4")
    ep = metrics.load_dataset(tmp_path / "g")[0]
    assert len(ep["steps"]) == 4 and not ep["success"] and ep["error"] is None
    assert [s.get("exec_error") for s in ep["steps"]] == ["unparseable reply", "mark 999 is not on this screen",
                                                          "unparseable reply", "unparseable reply"]


def test_the_random_floor_is_drawn_per_task():
    """The random policy's draws are seeded by (suite, task, seed): two tasks of a suite with one seed get
    different sequences (they once shared one), one (suite, task, seed) always the same."""
    def draws(suite, task, seed, n=12):
        policy = collect.make_policy("random", type("Env", (), {"suite": suite})(), task, seed)
        step = {"elements": [{"mark": m} for m in range(1, 31)]}
        obs = {"episode": {"steps": [step], "viewport": [800, 600]}, "step": 0}
        return [asyncio.run(policy.act(obs)) for _ in range(n)]
    assert draws("cms", "revert-draft", 7) == draws("cms", "revert-draft", 7)
    assert draws("cms", "revert-draft", 7) != draws("cms", "publish-page", 7)
    assert draws("cms", "revert-draft", 7) != draws("shop", "revert-draft", 7)
    assert draws("cms", "revert-draft", 7) != draws("cms", "revert-draft", 8)


def test_human_policy_records_clicks_and_typing(tmp_path, display):
    """A person logs in in a headed browser on Xvfb (synthetic trusted input through CDP);
    their clicks and keystrokes become marked steps."""
    async def scenario():
        from playwright.async_api import async_playwright
        env = miniwob.MiniWoB()
        try:
            async with async_playwright() as pw:
                chromium = collect.find_chromium(pw.chromium.executable_path)
                browser = await pw.chromium.launch(headless=False, executable_path=chromium)
                ctx, page = await collect.new_page(browser, env, [])
                policy = collect.HumanPolicy(poll_s=0.02)

                async def person():
                    while True:   # until the recorder is listening (the page may still be loading)
                        try:
                            if await page.evaluate("!!window.__magHuman"):
                                break
                        except Exception:  # noqa: BLE001 -- a navigation destroyed the context
                            pass
                        await asyncio.sleep(0.02)
                    user, pw_ = await page.evaluate("[core.getUtterance().match(/username \"?([^ \"]+)/)[1], "
                                                    "core.getUtterance().match(/password \"?([^ \"]+)/)[1]]")
                    for sel, text in (("#username", user), ("#password", pw_)):
                        box = await page.locator(sel).bounding_box()
                        await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                        # like a person, type once the field has focus (a click is replayed after its screenshot)
                        await page.wait_for_function(f"document.activeElement === document.querySelector('{sel}')")
                        await page.keyboard.type(text)
                    box = await page.locator("#subbtn").bounding_box()
                    await page.mouse.click(box["x"] + 5, box["y"] + 5)
                    return user, pw_
                helper = asyncio.create_task(person())
                episode = collect.run_episode(page, env, "login-user", 3, policy, out=str(tmp_path), blocked=[],
                                              policy_name="human", **collect.RUN_DEFAULTS)
                ep = await asyncio.wait_for(episode, 60)
                user, pw_ = await helper
                await browser.close()
        finally:
            env.close()
        return ep, user, pw_
    ep, user, pw_ = asyncio.run(scenario())
    acts = [(s["action"]["op"], s["action"]["value"]) for s in ep["steps"]]
    assert acts == [("click", None), ("type", user), ("click", None), ("type", pw_), ("click", None)]
    assert ep["success"]
    marks = [s["action"]["mark"] for s in ep["steps"]]
    assert marks[0] == marks[1] and marks[2] == marks[3] and len(set(marks)) == 3
    last = ep["steps"][-1]
    assert next(e for e in last["elements"] if e["mark"] == marks[-1])["text"].lower() == "login"


OBSERVE_PAGE = """<!doctype html><html><body style="margin:0;font:14px Arial">
<div style="height:30px"><button id="b">Save</button> <a href="#x" id="l">Help</a></div>
<div style="height:30px"><label for="e">Email</label><input id="e">
  <select id="s"><option>Red</option><option>Blue</option></select></div>
<div id="js" style="width:60px;height:20px">widget</div>
<div style="cursor:pointer;width:80px" id="ptr"><span id="inner">pointer text</span></div>
<button style="display:none">gone</button><button style="visibility:hidden">hidden</button><button
  style="opacity:0">clear</button>
<div style="position:relative;height:30px"><button id="under">Under</button>
  <div style="position:absolute;left:0;top:0;width:200px;height:30px;background:#eee">overlay</div></div>
<div id="card" onclick="1" style="width:100px;height:24px"><button
  id="fill" style="width:100px;height:24px">Fill</button></div>
<div id="scroller" style="height:40px;overflow:auto"><button id="in1" style="height:30px">In view</button>
  <div style="height:60px"></div><button id="out1">Scrolled away</button></div>
<button id="far" style="position:absolute;top:2000px">Far below</button>
<script>document.getElementById('js').addEventListener('click', () => {});</script>
</body></html>"""


def on_page(html, viewport, scale, act):
    """Open `html` in a context made by collect.new_page (the harness's init scripts, viewport and
    scale) and return what `await act(page, env)` returns."""
    async def scenario():
        from playwright.async_api import async_playwright
        env = miniwob.MiniWoB()
        env.viewport, env.scale = viewport, scale
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
                try:
                    _, page = await collect.new_page(browser, env, [])
                    await page.goto("data:text/html," + html.replace("#", "%23"))
                    return await act(page, env)
                finally:
                    await browser.close()
        finally:
            env.close()
    return asyncio.run(scenario())


async def observe_ids(page, env):
    elements, png, _ = await collect.observe(page, env)
    return elements, png, await page.evaluate("window.__mag.marks.map((e) => e.id)")


RESTLESS_PAGE = """<html><body style="margin:0"><button id="b">0</button><table id="t"></table><script>
setInterval(() => { document.getElementById('b').textContent = String(Date.now()); }, 16);
</script></body></html>"""
FILLING_PAGE = """<html><body style="margin:0"><table id="t"></table><script>
let n = 0;   /* a row a frame: every look (a frame at least) finds another, until the eighth */
const fill = () => { n += 1; document.getElementById('t').insertAdjacentHTML('beforeend',
  `<tr><td><button style="height:16px">Row ${n}</button></td></tr>`); if (n < 8) requestAnimationFrame(fill); };
requestAnimationFrame(fill);
</script></body></html>"""


def test_a_step_is_recorded_when_two_observations_agree():
    """A table still filling while it is observed: the step waits until it is full (the marks its picture
    shows); a page that never stops changing is recorded at the cap, flagged as never agreeing."""
    async def agreed(page, env):
        t0 = time.perf_counter()
        elements, png, _, ok = await collect.observe_agreed(page, env, 600)
        return [e["text"] for e in elements], ok, time.perf_counter() - t0
    texts, ok, _ = on_page(FILLING_PAGE, (320, 200), 1, agreed)
    assert (texts, ok) == ([f"Row {n}" for n in range(1, 9)], True)
    texts, ok, seconds = on_page(RESTLESS_PAGE, (320, 200), 1, agreed)
    assert not ok and len(texts) == 1 and 0.6 <= seconds < 3


def test_observation_marks_the_right_elements():
    elements, png, ids = on_page(OBSERVE_PAGE, (320, 400), 2, observe_ids)
    # reading order; hidden, occluded, scrolled-away and off-screen elements are not marked; the
    # pointer widget is marked where the cursor starts; the onclick card is dropped for its child
    assert ids == ["b", "l", "e", "s", "js", "ptr", "fill", "in1"]
    by = dict(zip(ids, elements))
    assert [e["mark"] for e in elements] == list(range(1, 9))
    assert (by["b"]["role"], by["b"]["text"]) == ("button", "Save")
    assert (by["l"]["role"], by["e"]["text"], by["s"]["role"]) == ("link", "Email", "combobox")
    assert by["s"]["text"] == "" and by["s"]["value"] == "Red"  # a select is never named by what it shows
    assert by["js"]["text"] == "widget" and by["ptr"]["text"] == "pointer text"
    # boxes are in screenshot pixels (scale 2), inside the 640x800 screenshot
    x0, y0, x1, y1 = by["b"]["bbox"]
    assert x0 == 0 and y0 == 0 and x1 > 40 and 30 < y1 <= 60
    assert all(0 <= e["bbox"][0] < e["bbox"][2] <= 640 and 0 <= e["bbox"][1] < e["bbox"][3] <= 800 for e in elements)
    import io

    from PIL import Image
    assert Image.open(io.BytesIO(png)).size == (640, 800)


NAMES_PAGE = """<!doctype html><html><body style="margin:0;font:13px Arial">
<header><input id="q" type="search" placeholder="Search tickets"></header>
<main><h1>Change order</h1>
<fieldset><legend>Shipping</legend>
  <label for="own">Owner</label><select id="own"><option>Quinn Tanaka</option><option>Vera Ito</option></select>
  <select id="blank" title="Status"><option>---------</option><option>Open</option></select>
  <input id="ph" placeholder="---------"> <input id="lab" aria-labelledby="lbl"><span id="lbl">Due date</span>
</fieldset>
<div class="card"><div class="card-header"><h3>Basket</h3></div>
<table><thead><tr><th>Product</th><th>SKU</th><th>Quantity</th><th></th></tr></thead><tbody>
  <tr><td>Blue mug</td><td><input id="sku" value="HP-N7331"></td><td><input id="qty" type="number" value="1"></td>
      <td><a href="#" id="rm">Remove</a></td></tr></tbody></table></div>
<table><tr><th>Assigned to</th><td><select id="facts"><option>Ann</option></select></td></tr>
  <tr><td><input type="checkbox" id="pick"></td><td>Very good</td></tr></table>
<div><div style="display:flex"><h4 style="width:200px;margin:0">Items</h4>
  <h4 style="width:100px;margin:0">Qty</h4></div>
  <div><div style="display:flex"><span style="width:200px">Tray</span><input id="grid" style="width:60px" value="3">
  </div></div></div>
<div><small>Assigned to</small><form><input type="hidden" name="t"><div><select id="cap"><option>Unassigned</option>
  </select></div></form></div>
<input type="checkbox" id="cb" checked aria-label="Public">
</main>
<aside><a href="#" id="set">Settings</a></aside>
<div role="dialog" aria-labelledby="dt" style="margin-top:4px"><span id="dt">Delete ticket</span>
  <button id="yes">Yes, delete</button></div>
<nav style="overflow:auto;height:20px;width:40px"><div style="position:fixed;left:400px;top:640px">
  <a href="#" id="fly">Users</a></div></nav>
</body></html>"""


def test_elements_are_named_as_a_person_reads_them():
    """The accessible name by its precedence (aria-labelledby, <label>, a table cell control's column
    header or its row's header, title, placeholder), never a select's current value or a `---------`;
    the value, the section (legend, card heading, dialog title, landmark) and the table row beside it."""
    elements, _, ids = on_page(NAMES_PAGE, (700, 700), 1, observe_ids)
    by = dict(zip(ids, elements))
    name = {i: by[i]["text"] for i in by}
    assert name["own"] == "Owner" and by["own"]["value"] == "Quinn Tanaka"
    assert name["blank"] == "Status" and by["blank"]["value"] == "---------"
    assert name["ph"] == "" and name["lab"] == "Due date" and name["q"] == "Search tickets"
    assert name["sku"] == "SKU" and by["sku"]["value"] == "HP-N7331"
    assert name["qty"] == "Quantity" and by["qty"]["value"] == "1"
    assert name["grid"] == "Qty" and by["grid"]["value"] == "3"   # a grid of <div>s: the heading above it
    assert name["cap"] == "Assigned to" and by["cap"]["value"] == "Unassigned"   # a caption over its form
    assert name["pick"] == "" and by["pick"]["row"] == "Very good"   # never the heading above its table
    assert name["facts"] == "Assigned to" and name["cb"] == "Public" and by["cb"]["value"] == "checked"
    assert by["own"]["section"] == "Shipping" and by["q"]["section"] == "header"
    assert by["sku"]["section"] == "Basket" and by["sku"]["row"] == "Blue mug" and by["rm"]["row"] == "Blue mug"
    assert by["set"]["section"] == "sidebar" and by["yes"]["section"] == "Delete ticket"
    assert by["cb"]["section"] == "Change order"
    assert "row" not in by["own"] and "value" not in by["rm"]   # only where the page has them
    # a fixed fly-out menu is not clipped by the scrolling <nav> it sits in (Wagtail's Settings menu)
    assert name["fly"] == "Users" and by["fly"]["section"] == "navigation"


# A single-page app's drawn widgets (Label Studio's, issue 53): a bar of links over the content, a card that is one
# link, a row of cells that is one clickable box, a toggle drawn in a <label>, a choice whose label carries a hotkey
SPA_PAGE = """<!doctype html><html><body style="margin:0;font:13px Arial"><div class="app">
<div class="menu-header"><a href="#">Projects</a><a href="#">Support tickets</a><button>Light</button></div>
<div class="content">
<a href="#" id="card" style="display:block;width:300px"><div class="card-header"><div class="card-title">Support
  tickets</div></div><div>8 / 22</div><div>Label each ticket by its sentiment, then submit it for the lead.</div></a>
<div id="row" style="cursor:pointer;width:500px" onclick="window.x = 1"><div class="table-row" style="display:flex">
  <span class="table__cell" style="width:30px">12</span><div class="table__cell" style="width:120px">Apr 06 2026</div>
  <div class="table__cell" style="width:30px">0</div>
  <div class="table__cell">Thanks, the refund works now.</div></div></div>
<label><span>Show before labeling</span><span id="tog" style="display:inline-block;width:40px;height:20px;
  cursor:pointer"><input type="checkbox" style="opacity:0;width:0;height:0;margin:0"></span></label>
<div><label id="ch" style="cursor:pointer"><span style="position:relative"><input type="checkbox" name="Positive"
  style="position:absolute;opacity:0;width:0;height:0;margin:0"><span style="display:inline-block;width:14px;
  height:14px;border:1px solid"></span></span><span><span>Positive<sup>[3]</sup></span></span></label></div>
<div class="table-row" style="display:flex;width:500px"><span class="table__cell" id="tick" style="display:inline-block;
  width:30px;height:20px;cursor:pointer"><span><input type="checkbox" aria-label="Select Task 13" style="opacity:0;
  width:0;height:0;margin:0"></span></span><div class="table__cell" style="width:30px">13</div>
  <div class="table__cell">The parcel came late.</div></div>
<div><span>Is Active</span><div id="act" style="display:inline-block;width:40px;height:20px;cursor:pointer"><input
  type="checkbox" style="opacity:0;width:0;height:0;margin:0"></div></div>
<div style="display:flex"><div><span>Where</span></div><div><button id="col" aria-haspopup="dialog">text</button><select
  style="display:none"><option value="tasks:text"></option></select></div><div><button id="op" aria-haspopup="dialog">
  contains</button><select style="display:none"><option value="contains"></option></select></div><div><input id="val"
  type="text"></div></div>
<div><button id="skip" aria-label="skip-task">Skip</button><button id="upd" aria-label="submit">Update</button><button
  id="srch" aria-label="search">Search</button><button id="shut" aria-label="close">&times;</button></div>
</div></div></body></html>"""


def test_a_single_page_apps_drawn_widgets_are_named_as_a_person_reads_them():
    """A card that is one link reads as its title, a clickable row of cells as its wordiest cell (not its id and
    date), a toggle box drawn in a <label> as the label, a choice without its hotkey's superscript; a bar of links
    and buttons with no heading is no section (its words run together: "ProjectsSupport ticketsLight"). A box drawn
    over one checkbox reads as that checkbox's aria-label (a row's tick box), else as the caption just before it (a
    webhook's "Is Active"); in a row of <div> cells it is in that row, the wordiest cell. A line of lists drawn as
    buttons over hidden selects with neither labels nor option texts, then a field (Label Studio's filter: "Where
    [text] [contains] [____]"): each list is a combobox named by the line's words before it and valued by what it
    shows, the field by the whole phrase. An aria-label that is a code name ("skip-task", "submit" on an
    Update button) gives way to the words the button shows."""
    elements, _, ids = on_page(SPA_PAGE, (700, 500), 1, observe_ids)
    by = dict(zip(ids, elements))
    assert by["card"]["text"] == "Support tickets" and "section" not in by["card"]
    assert by["row"]["text"] == "Thanks, the refund works now."
    assert by["tog"]["text"] == "Show before labeling" and by["ch"]["text"] == "Positive"
    assert by["tick"]["text"] == "Select Task 13" and by["tick"]["row"] == "The parcel came late."
    assert by["act"]["text"] == "Is Active" and "row" not in by["row"] and "row" not in by["act"]
    assert {k: by["col"].get(k) for k in ("role", "text", "value")} == {"role": "combobox", "text": "Where",
                                                                         "value": "text"}
    assert (by["op"]["text"], by["op"]["value"], by["val"]["text"]) == ("Where text", "contains", "Where text contains")
    # an aria-label that is a code name gives way to the words the button shows, not to a sign without words
    assert [by[k]["text"] for k in ("skip", "upd", "srch", "shut")] == ["Skip", "Update", "search", "close"]


def test_hung_page_times_out_and_is_recorded(tmp_path, monkeypatch):
    original = miniwob.EXPERTS["click-button"]

    async def freezer(page, instruction):   # the page's script never returns after this click
        await page.evaluate("document.querySelectorAll('#area button')"
                            ".forEach((b) => b.addEventListener('click', () => { while (true) {} }))")
        async for do in original(page, instruction):
            yield do
    monkeypatch.setitem(miniwob.EXPERTS, "click-button", freezer)
    t = time.time()
    summary = run(tmp_path, "--tasks", "click-button", "--episodes", "1", "--action-timeout", "2")
    assert time.time() - t < 60
    ep = metrics.load_dataset(tmp_path)[0]
    assert summary["errors"] == 1 and "Timeout" in ep["error"] and not ep["success"]


WRAP_PAGE = """<!doctype html><html><body style="margin:0;font:14px Arial">
<div style="width:150px">aaaa aaaa aaaa
<a href="#" id="w" onclick="window.clicked = true; return false">a long ok</a> bbbb bbbb bbbb</div>
</body></html>"""


def test_a_wrapped_link_gets_a_mark_on_its_own_text_and_is_clickable():
    """A link that wraps over two lines: its bounding box's centre lies on other text, so its box is
    the first line box that shows it, and a click at that box's centre reaches the link."""
    async def act(page, env):
        lines = await page.evaluate("document.getElementById('w').getClientRects().length")
        elements, _, ids = await observe_ids(page, env)
        if elements:
            click = collect.ground(metrics.make_action("click", mark=elements[0]["mark"]), elements)
            await collect.execute(page, click, env)
        return lines, elements, ids, await page.evaluate("window.clicked === true")
    lines, elements, ids, clicked = on_page(WRAP_PAGE, (320, 200), 1, act)
    assert lines == 2 and ids == ["w"] and elements[0]["text"] == "a long ok"
    x0, y0, x1, y1 = elements[0]["bbox"]
    assert y1 - y0 < 25  # one line box, not the two-line bounding box
    assert clicked


SELECT_PAGE = """<!doctype html><html><body style="margin:0;font:14px Arial">
<select id="s" style="width:120px"><option>Ann</option><option>Bo</option></select></body></html>"""


def test_a_select_of_an_option_it_lacks_is_a_step_error_not_a_hang():
    """select(m, "Jola") on a select without that option is the policy's mistake, an ActionError at once (it waited
    for the option until the action timed out, which ended the episode as a fault after a retry); a label it has
    is chosen."""
    async def act(page, env):
        elements, _, _ = await observe_ids(page, env)
        out = []
        for value in ("Jola", "Bo"):
            select = collect.ground(metrics.make_action("select", mark=elements[0]["mark"], value=value), elements)
            t0 = time.perf_counter()
            try:
                await asyncio.wait_for(collect.execute(page, select, env), 10)
                out.append(("ok", time.perf_counter() - t0))
            except collect.ActionError as e:
                out.append((str(e), time.perf_counter() - t0))
        return out, await page.evaluate("document.getElementById('s').value")
    (missing, chosen), value = on_page(SELECT_PAGE, (320, 200), 1, act)
    assert missing[0] == "select: no option 'Jola' (the options: 'Ann', 'Bo')" and missing[1] < 2
    assert chosen[0] == "ok" and value == "Bo"


class SlowSite:
    """Two pages on 127.0.0.1; /b answers after a delay, so a navigation to it is slow to arrive."""

    def __init__(self, delay_s=0.4):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.startswith("/c"):   # its first half drawn at once, the rest a second later
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    self.wfile.write(b"<!doctype html><body><button>first half</button>" + b" " * 4096)
                    self.wfile.flush()
                    time.sleep(1)
                    self.wfile.write(b"<button>second half</button></body>")
                    return
                if self.path.startswith("/b"):
                    time.sleep(delay_s)
                    body = b"<!doctype html><body><p id='b'>page B</p></body>"
                else:
                    body = (b"<!doctype html><body style='margin:0;font:14px Arial'><a id='go' href='/b'>to B</a> "
                            b"<a id='anchor' href='#here'>anchor</a> <a id='top' href='#'>top</a> "
                            b"<a id='away' href='http://example.invalid/x'>away</a>"
                            b"<form id='f' onsubmit='return false'><button id='stay'>Stay</button></form>"
                            b"<p id='here'>A</p></body>")
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_a_navigation_that_began_after_the_settle_is_observed_once_its_page_has_settled():
    """Two loaded cores once recorded a submit's next page blank, with no marks: its navigation began after
    the settle, the page committed but not yet drawn looked the same twice. The look settles that page first."""
    site = SlowSite()

    async def scenario():
        from playwright.async_api import async_playwright
        env = miniwob.MiniWoB()
        env.viewport, env.scale = (320, 200), 1
        env.origins.append(site.base)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
                ctx, page = await collect.new_page(browser, env, [])
                await page.goto(site.base + "/a")
                await collect.settle(page, 50, 2000)
                await page.evaluate("location.href = '/c'")   # after the settle: it never saw this navigation
                await page.wait_for_url("**/c", wait_until="commit")
                t0 = time.perf_counter()
                elements, _, url, agreed = await collect.observe_agreed(page, env, 2000, 50)
                seconds = time.perf_counter() - t0
                await browser.close()
        finally:
            env.close()
        return [e["text"] for e in elements], url, agreed, seconds
    try:
        texts, url, agreed, seconds = asyncio.run(scenario())
    finally:
        site.close()
    assert (texts, url, agreed) == (["first half", "second half"], site.base + "/c", True)
    assert seconds < 2


def test_settle_waits_for_a_page_being_left_and_not_for_one_that_stays():
    """A followed link sets the page's 'leaving' flag at once and the settle ends on the next page;
    an in-page anchor (href="#x" or "#"), a cancelled submit and a blocked navigation leave the page staying, and the
    settle does not wait out its cap for them."""
    site = SlowSite()

    async def scenario():
        from playwright.async_api import async_playwright
        env = miniwob.MiniWoB()
        env.viewport, env.scale = (320, 200), 1
        env.origins.append(site.base)
        out = {}
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
                ctx, page = await collect.new_page(browser, env, [])
                for what in ("anchor", "top", "stay", "away"):
                    await page.goto(site.base + "/a")
                    await page.click("#" + what)
                    t = time.perf_counter()
                    await collect.settle(page, 50, 2000)
                    out[what] = (time.perf_counter() - t, await page.evaluate("window.__mag.leaving"), page.url)
                await page.goto(site.base + "/a")
                # the flag is up in the same task as the click, before any request exists
                out["flag"] = await page.evaluate(
                    "() => { document.getElementById('go').click(); return window.__mag.leaving; }")
                await collect.settle(page, 50, 2000)
                out["go"] = (page.url, await page.evaluate("document.getElementById('b') !== null"))
                await browser.close()
        finally:
            env.close()
        return out
    try:
        out = asyncio.run(scenario())
    finally:
        site.close()
    assert out["flag"] is True and out["go"] == (site.base + "/b", True)
    assert out["anchor"][1] is False and out["stay"][1] is False
    assert out["top"][1] is False and out["top"][0] < 0.4   # href="#": an in-page jump, no 500 ms leaving wait
    assert out["away"][1] is True and out["away"][2] == site.base + "/a"  # blocked: the page stays
    assert all(out[w][0] < 1.5 for w in ("anchor", "top", "stay", "away"))  # none waits out the 2 s cap
