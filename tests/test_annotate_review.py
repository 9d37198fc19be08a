"""annotate.py's review page: decisions on disk at once, undo, restart, token, path safety -- in real headless Chromium.

Regenerate the docs/annotation.md screenshot (from demo/miniwob when it exists, else the toy dataset below):
    .venv/bin/python tests/test_annotate_review.py docs/review.png
"""
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import annotate  # noqa: E402
import metrics  # noqa: E402

VIEWPORT = [480, 360]


# ----------------------------------------------------------------------------------------------
# A toy dataset: two episodes, five steps, drafts on all but the last (a press with no element).

def draw_page(path, elements, title):
    """A plain form screenshot: a title and one labelled box per element."""
    from PIL import Image, ImageDraw
    img = Image.new("RGB", VIEWPORT, "white")
    d = ImageDraw.Draw(img)
    d.rectangle([0, 0, VIEWPORT[0], 40], fill="#dbe4f0")
    d.text((12, 14), title, fill="black")
    for el in elements:
        x0, y0, x1, y1 = el["bbox"]
        fill = "#3b82f6" if el["role"] == "button" else "white"
        d.rectangle([x0, y0, x1, y1], fill=fill, outline="#6b7280", width=2)
        d.text((x0 + 8, y0 + 12), el["text"], fill="white" if el["role"] == "button" else "#6b7280")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path)


def make_step(root, ep_id, k, elements, action, guide):
    shot = f"img/{ep_id}/{k}.png"
    draw_page(os.path.join(root, shot), elements, ep_id)
    return {"step": k, "url": "http://127.0.0.1/form", "screenshot": shot, "elements": elements, "action": action,
            "guide": guide, "guide_status": "draft" if guide else None, "guide_alt": None}


def make_episode(root, ep_id, instruction, steps):
    ep = {"id": ep_id, "suite": "toy", "task": ep_id.split(".")[1], "seed": 0, "instruction": instruction,
          "start_url": "http://127.0.0.1/form", "viewport": VIEWPORT, "success": True, "reward": 1.0,
          "steps": [make_step(root, ep_id, k, *s) for k, s in enumerate(steps)], "meta": {}}
    metrics.append_episode(root, ep)
    return ep


def make_dataset(root):
    root = str(root)
    user = {"mark": 1, "tag": "input", "role": "textbox", "text": "Username", "bbox": [40, 80, 440, 120]}
    pw = {"mark": 2, "tag": "input", "role": "textbox", "text": "Password", "bbox": [40, 150, 440, 190]}
    login = {"mark": 3, "tag": "button", "role": "button", "text": "Login", "bbox": [40, 230, 200, 280]}
    act = metrics.make_action
    make_episode(root, "toy.login.0", 'Log in as "ada" with the password "pw".', [
        ([user, pw, login], act("type", 1, metrics.box_center(user["bbox"]), "ada"),
         'Type "ada" into the **Username** field.'),
        ([user, pw, login], act("type", 2, metrics.box_center(pw["bbox"]), "pw"),
         'Enter "pw" in the **Password** field.'),
        ([user, pw, login], act("click", 3, metrics.box_center(login["bbox"])), "Click the **Login** button."),
    ])
    search = {"mark": 1, "tag": "input", "role": "searchbox", "text": "Search", "bbox": [40, 80, 440, 120]}
    make_episode(root, "toy.search.1", "Search for cats.", [
        ([search], act("type", 1, metrics.box_center(search["bbox"]), "cats"), 'Type "cats" into the **Search** box.'),
        ([search], act("press", value="Enter"), None),
    ])
    return root


@pytest.fixture
def dataset(tmp_path):
    return make_dataset(tmp_path / "ds")


@pytest.fixture
def serve():
    """serve(dataset, **kw) -> (server, url); every server started is stopped at the end."""
    started = []

    def start(dataset, port=0, annotator="ada", token=None):
        server, url = annotate.serve_review(dataset, port, annotator, token=token, block=False)
        started.append(server)
        return server, url

    yield start
    for server in started:
        if server.socket.fileno() != -1:
            server.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    path = os.environ.get("MAG_CHROMIUM") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        b = pw.chromium.launch(headless=True, executable_path=path if os.path.exists(path) else None)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(e))  # an uncaught exception in the page's script fails the test
    yield page
    context.close()
    assert errors == []


def records(dataset):
    return annotate.read_reviews(dataset)


def idle(page):
    """Wait until every queued key has been handled (the page sets data-busy back to 0)."""
    page.wait_for_function("() => document.body.dataset.busy === '0' && document.body.dataset.episode !== undefined")


def key(page, k):
    page.keyboard.press(k)
    idle(page)


def shown(page):
    """(episode, step) of the step on screen."""
    return tuple(page.evaluate("[document.body.dataset.episode, +document.body.dataset.step]"))


def open_page(page, url):
    page.goto(url)
    idle(page)


# ----------------------------------------------------------------------------------------------
# The page, driven by keys.

def test_accept_edit_reject_reload_undo(dataset, serve, page):
    server, url = serve(dataset)
    open_page(page, url)
    assert shown(page) == ("toy.login.0", 0)
    assert page.text_content("#progress") == "0 / 5 reviewed"
    assert page.text_content("#action") == 'type(1, "ada")'
    assert page.text_content("#guide") == 'Type "ada" into the Username field.'  # **bold** rendered, not shown
    assert page.text_content("#guide b") == "Username"

    key(page, "a")  # accept: final = draft, on disk before the page moves on
    (r,) = records(dataset)
    assert {k: r[k] for k in ("episode", "step", "decision", "final", "draft", "reason", "annotator", "seq")} == {
        "episode": "toy.login.0", "step": 0, "decision": "accept", "final": 'Type "ada" into the **Username** field.',
        "draft": 'Type "ada" into the **Username** field.', "reason": None, "annotator": "ada", "seq": 1}
    assert r["time"].endswith("Z") and "T" in r["time"]
    assert shown(page) == ("toy.login.0", 1)
    assert page.text_content("#progress") == "1 / 5 reviewed"
    assert "Type" in page.text_content("#history")  # the accepted step is in the history now

    key(page, "e")  # edit: a box with the draft; Escape cancels, nothing is written
    assert page.input_value("#edit-box") == 'Enter "pw" in the **Password** field.'
    key(page, "Escape")
    assert page.query_selector("#edit-box") is None and len(records(dataset)) == 1
    key(page, "e")
    page.keyboard.press("Control+A")
    edited = 'Type "pw" into the **Password** field below the username.'
    page.keyboard.type(edited)
    key(page, "Enter")
    r = records(dataset)[-1]
    assert (r["decision"], r["final"], r["seq"]) == ("edit", edited, 2)
    assert shown(page) == ("toy.login.0", 2)

    key(page, "r")  # reject: a reason box; an empty reason is refused in the page
    key(page, "Enter")
    assert len(records(dataset)) == 2 and page.query_selector("#reason-box") is not None
    page.keyboard.type("It names the wrong button.")
    key(page, "Enter")
    r = records(dataset)[-1]
    assert (r["decision"], r["final"], r["reason"], r["seq"]) == ("reject", None, "It names the wrong button.", 3)
    assert shown(page) == ("toy.search.1", 0)

    key(page, "t")  # flag the target: recorded, but the step stays unreviewed and on screen
    r = records(dataset)[-1]
    assert (r["decision"], r["episode"], r["step"], r["final"]) == ("flag_target", "toy.search.1", 0, None)
    assert shown(page) == ("toy.search.1", 0)
    assert page.text_content("#progress") == "3 / 5 reviewed · 1 flagged"

    page.reload()  # the state comes from review.jsonl: opens at the first unreviewed step
    idle(page)
    assert shown(page) == ("toy.search.1", 0)
    assert page.text_content("#progress") == "3 / 5 reviewed · 1 flagged"
    key(page, "k")
    assert shown(page) == ("toy.login.0", 2)
    assert "Rejected" in page.text_content("#verdict") and "wrong button" in page.text_content("#verdict")
    key(page, "k")
    assert "below the username" in page.text_content("#verdict")
    key(page, "j")
    key(page, "j")
    assert shown(page) == ("toy.search.1", 0)

    key(page, "u")  # undo takes back the latest decision, the flag ...
    r = records(dataset)[-1]
    assert (r["decision"], r["undoes"], r["episode"], r["step"]) == ("undo", 4, "toy.search.1", 0)
    assert page.text_content("#progress") == "3 / 5 reviewed"
    key(page, "u")  # ... then the reject, on another step: the page goes there
    assert records(dataset)[-1]["undoes"] == 3
    assert shown(page) == ("toy.login.0", 2)
    assert page.text_content("#progress") == "2 / 5 reviewed"
    page.reload()
    idle(page)
    assert shown(page) == ("toy.login.0", 2)  # unreviewed again
    state = annotate.review_state(dataset, records(dataset), "ada")
    assert [s["decision"] for s in state.values()] == ["accept", "edit", None, None, None]
    assert not any(s["flagged"] for s in state.values())


def test_fast_keys_act_on_successive_steps(dataset, serve, page):
    server, url = serve(dataset)
    open_page(page, url)
    for _ in range(3):
        page.keyboard.press("a")  # no waiting in between: the page queues them
    idle(page)
    assert [(r["episode"], r["step"]) for r in records(dataset)] == [("toy.login.0", k) for k in range(3)]
    assert shown(page) == ("toy.search.1", 0)


def test_restart_mid_review_loses_nothing(dataset, serve, page):
    server, url = serve(dataset, token="fixed-token-for-the-test")
    port = server.port
    open_page(page, url)
    key(page, "a")
    key(page, "e")
    page.keyboard.type(" Then press Tab.")
    key(page, "Enter")
    before = records(dataset)
    server.stop()  # the server dies mid-review

    key(page, "a")  # a key while it is down: an error on the page, nothing recorded anywhere
    assert "error" in page.get_attribute("#toast", "class")
    assert records(dataset) == before

    server2, url2 = serve(dataset, port=port, token="fixed-token-for-the-test")
    assert url2 == url
    page.reload()
    idle(page)
    assert shown(page) == ("toy.login.0", 2)
    assert page.text_content("#progress") == "2 / 5 reviewed"
    key(page, "a")
    assert [r["seq"] for r in records(dataset)] == [1, 2, 3]

    # a new server with a new token: the old URL is refused, the new one resumes
    server2.stop()
    server3, url3 = serve(dataset)
    assert url3 != url
    assert page.goto(url3.split("token=")[0] + "token=fixed-token-for-the-test").status == 403
    open_page(page, url3)
    assert shown(page) == ("toy.search.1", 0)
    assert page.text_content("#progress") == "3 / 5 reviewed"


def test_screenshot_of_the_page(dataset, serve, page, tmp_path):
    out = tmp_path / "review.png"
    screenshot(dataset, str(out), page, serve)
    from PIL import Image
    assert Image.open(out).size == (1100, 800)


# ----------------------------------------------------------------------------------------------
# The HTTP surface, without a browser.

def get(url, headers=None):
    """(status, body bytes, headers) of a GET; errors are answers too."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def post(url, body, raw=False, headers=None):
    """(status, JSON reply) of a POST as the page sends it: JSON, with the token of url's query in X-MAG-Token."""
    data = body if raw else json.dumps(body).encode()
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("token", [""])[0]
    headers = {"Content-Type": "application/json", annotate.TOKEN_HEADER: token, **(headers or {})}
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw_get(port, target):
    """GET a request target exactly as written (urllib would normalise `..` away)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", target)
    r = conn.getresponse()
    return r.status, r.read()


def endpoint(url, path, query=""):
    """url is http://127.0.0.1:PORT/?token=T -> http://127.0.0.1:PORT/PATH?token=T&QUERY"""
    base, token = url.split("/?")
    return f"{base}{path}?{token}" + (f"&{query}" if query else "")


def test_token_is_required(dataset, serve):
    server, url = serve(dataset)
    base = url.split("/?")[0]
    token = url.split("token=")[1]
    assert len(token) >= 24
    for path in ("/", "/api/state", "/api/image?episode=toy.login.0&step=0"):
        assert get(base + path)[0] == 403
        assert get(base + path + ("&" if "?" in path else "?") + "token=wrong")[0] == 403
        assert get(base + path + ("&" if "?" in path else "?") + "token=" + token)[0] == 200
    accept = {"episode": "toy.login.0", "step": 0, "decision": "accept"}
    assert post(base + "/api/decision", accept)[0] == 403
    assert post(base + "/api/decision?token=" + token[:-1], accept)[0] == 403
    assert records(dataset) == []

    # no cookie (cookies ignore the port: every page on 127.0.0.1 would send it); the page holds the token
    status, body, headers = get(url)
    assert b"<title>MAG review</title>" in body and headers["Set-Cookie"] is None
    assert f'<meta name="mag-token" content="{token}">'.encode() in body
    assert get(base + "/api/state", {"Cookie": f"mag_review_{server.port}={token}"})[0] == 403
    # a POST's token is the X-MAG-Token header, never the URL
    assert post(base + "/api/decision?token=" + token, accept, headers={annotate.TOKEN_HEADER: ""})[0] == 403
    assert records(dataset) == []


def test_bound_to_loopback_only(dataset, serve):
    server, url = serve(dataset)
    assert server.socket.getsockname()[0] == "127.0.0.1"
    assert url.startswith(f"http://127.0.0.1:{server.port}/?token=")
    others = set()
    try:
        others = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
    except socket.gaierror:
        pass
    for address in others:  # another address of this machine reaches nothing
        with pytest.raises(OSError):
            socket.create_connection((address, server.port), timeout=2).close()


def test_state_and_image(dataset, serve):
    server, url = serve(dataset)
    status, body, _ = get(endpoint(url, "/api/state"))
    state = json.loads(body)
    assert state["first_unreviewed"] == 0 and state["progress"]["total"] == 5
    s = state["steps"][2]
    assert (s["episode"], s["step"], s["action"], s["draft"], s["status"]) == (
        "toy.login.0", 2, "click(3)", "Click the **Login** button.", "draft")
    assert s["instruction"].startswith("Log in")
    assert [h["action"] for h in s["history"]] == ['type(1, "ada")', 'type(2, "pw")']
    assert s["target"] == {"mark": 3, "role": "button", "text": "Login"}

    import io

    from PIL import Image
    status, png, headers = get(endpoint(url, "/api/image", "episode=toy.login.0&step=2"))
    assert status == 200 and headers["Content-Type"] == "image/png"
    img = Image.open(io.BytesIO(png)).convert("RGB")
    raw = Image.open(os.path.join(dataset, "img/toy.login.0/2.png")).convert("RGB")
    assert img.size == raw.size
    assert img.getpixel((120, 255)) == raw.getpixel((120, 255))  # inside the target: untouched
    assert sum(img.getpixel((300, 330))) < sum(raw.getpixel((300, 330)))  # elsewhere: dimmed
    color = metrics.SOM_COLORS[(3 - 1) % len(metrics.SOM_COLORS)]  # mark 3's box, as the model sees it
    assert img.getpixel((120, 279)) == tuple(int(color[j:j + 2], 16) for j in (1, 3, 5))
    status, png, _ = get(endpoint(url, "/api/image", "episode=toy.search.1&step=1"))  # press: no element
    assert Image.open(io.BytesIO(png)).convert("RGB").tobytes() == Image.open(
        os.path.join(dataset, "img/toy.search.1/1.png")).convert("RGB").tobytes()


def test_decisions_are_validated(dataset, serve):
    server, url = serve(dataset)
    api = endpoint(url, "/api/decision")
    bad = [
        ({"episode": "nope", "step": 0, "decision": "accept"}, 400, "unknown episode"),
        ({"episode": "toy.login.0", "step": 3, "decision": "accept"}, 400, "has no step 3"),
        ({"episode": "toy.login.0", "step": "0", "decision": "accept"}, 400, "has no step"),
        ({"episode": "toy.login.0", "step": True, "decision": "accept"}, 400, "has no step"),
        ({"episode": "toy.login.0", "step": 0, "decision": "approve"}, 400, "unknown decision"),
        ({"episode": "toy.login.0", "step": 0, "decision": "reject"}, 400, "reject needs a reason"),
        ({"episode": "toy.login.0", "step": 0, "decision": "reject", "reason": "   "}, 400, "reject needs a reason"),
        ({"episode": "toy.login.0", "step": 0, "decision": "edit"}, 400, "edit needs"),
        ({"episode": "toy.login.0", "step": 0, "decision": "edit", "final": 7}, 400, "'final' must be a string"),
        ({"episode": "toy.login.0", "step": 0, "decision": "edit", "final": "x" * 2001}, 400, "at most 2000"),
        ({"episode": "toy.login.0", "step": 0, "decision": "reject", "reason": ["why"]}, 400, "'reason' must be a"),
        ({"episode": "toy.search.1", "step": 1, "decision": "accept"}, 400, "no draft guide"),
        ({"decision": "undo"}, 409, "nothing to undo"),
        ([1, 2], 400, "JSON object"),
    ]
    for body, status, message in bad:
        got = post(api, body)
        assert got[0] == status and message in got[1]["error"], (body, got)
    assert post(api, b"{not json", raw=True)[0] == 400
    assert records(dataset) == []
    # an edit on the step without a draft writes its guide; the flag is its own record
    step = {"episode": "toy.search.1", "step": 1}
    assert post(api, {**step, "decision": "edit", "final": " Press  **Enter**.\n"})[0] == 200
    assert post(api, {**step, "decision": "flag_target", "reason": "no element"})[0] == 200
    assert [(r["decision"], r["final"], r["draft"]) for r in records(dataset)] == [
        ("edit", "Press **Enter**.", None), ("flag_target", None, None)]


def test_path_traversal_is_refused(tmp_path, serve):
    root = make_dataset(tmp_path / "ds")
    secret = tmp_path / "secret.png"
    shutil.copy(os.path.join(root, "img/toy.login.0/0.png"), secret)
    os.symlink(secret, os.path.join(root, "img", "link.png"))
    # screenshot paths that lead out of the dataset folder: `..` and absolute paths are refused by the
    # dataset validator (at write and at load); a link inside the folder that points out of it passes
    # the validator without check_images, so the server must refuse it itself
    eps = metrics.load_dataset(root)
    evil = json.loads(json.dumps({k: v for k, v in eps[0].items() if not k.startswith("_")}))
    evil["id"] = "toy.evil.0"
    for shot in ["../secret.png", str(secret)]:
        evil["steps"][0]["screenshot"] = shot
        with pytest.raises(metrics.DatasetError, match="screenshot"):
            metrics.append_episode(root, evil)
    for step in evil["steps"]:
        step["screenshot"] = "img/link.png"
    metrics.append_episode(root, evil)
    server, url = serve(root)

    for k in range(3):
        status, body, _ = get(endpoint(url, "/api/image", f"episode=toy.evil.0&step={k}"))
        assert status == 403 and b"PNG" not in body
    token = url.split("token=")[1]
    for target in ["/../secret.png", "/%2e%2e/secret.png", "/%2e%2e%2fsecret.png", "/%252e%252e%252fsecret.png",
                   "/img/toy.login.0/0.png", "//etc/passwd", "/api/image/../../secret.png", "/api/../../etc/passwd"]:
        status, body = raw_get(server.port, f"{target}?token={token}")
        assert status == 404 and b"PNG" not in body and b"root:" not in body, target
    for episode in ["../secret.png", "..%2fsecret.png", "%2e%2e%2fsecret.png", "%252e%252e%252fsecret.png",
                    "/etc/passwd", "%2Fetc%2Fpasswd", "toy.login.0/../../secret.png"]:
        for step in ["0", "../0", "-1", "%2e%2e", "99", "%C2%B2"]:  # "²".isdigit() is True
            status, body, _ = get(endpoint(url, "/api/image", f"episode={episode}&step={step}"))
            assert status == 404 and b"PNG" not in body, (episode, step)
    for episode in ["../secret.png", "/etc/passwd", "%2e%2e%2fsecret.png"]:
        status, body = post(endpoint(url, "/api/decision"), {"episode": episode, "step": 0, "decision": "flag_target"})
        assert status == 400 and "unknown episode" in body["error"]
    assert records(root) == []


def test_two_annotators_share_one_file(dataset, serve):
    """Two review processes (here: two servers) appending at once: seq stays unique and increasing."""
    _, url_a = serve(dataset, annotator="ada")
    _, url_b = serve(dataset, annotator="bob")

    def review(url):
        for k in range(3):
            accept = {"episode": "toy.login.0", "step": k, "decision": "accept"}
            assert post(endpoint(url, "/api/decision"), accept)[0] == 200
        assert post(endpoint(url, "/api/decision"), {"decision": "undo"})[0] == 200

    threads = [threading.Thread(target=review, args=(u,)) for u in (url_a, url_b) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = records(dataset)
    assert [r["seq"] for r in recs] == list(range(1, 17))
    for who in ("ada", "bob"):
        mine = [r for r in recs if r["annotator"] == who]
        assert all(r["undoes"] in {m["seq"] for m in mine} for r in mine if r["decision"] == "undo")


def test_torn_last_line_is_set_aside(dataset, serve):
    """A crash mid-append leaves a fragment: the next decision must start on its own line."""
    server, url = serve(dataset)
    api = endpoint(url, "/api/decision")
    assert post(api, {"episode": "toy.login.0", "step": 0, "decision": "accept"})[0] == 200
    path = os.path.join(dataset, annotate.REVIEW_FILE)
    with open(path, "a") as f:
        f.write('{"episode": "toy.login.0", "step": 1, "deci')
    assert post(api, {"episode": "toy.login.0", "step": 1, "decision": "accept"})[0] == 200
    assert [r["seq"] for r in records(dataset)] == [1, 2]
    assert open(path + ".torn").read() == '{"episode": "toy.login.0", "step": 1, "deci\n'


def test_command_line_blocks_until_ctrl_c(dataset, serve):
    import signal
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "annotate.py", "review", dataset, "--port", "0", "--annotator", "cy"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in proc.stdout:
            if line.startswith("review page: "):
                url = line.split()[-1]
                break
        assert url and url.startswith("http://127.0.0.1:")
        assert get(url)[0] == 200
        port = int(url.split(":")[2].split("/")[0])
        with pytest.raises(SystemExit, match="cannot listen"):  # the port is taken
            serve(dataset, port=port)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        assert "stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


# ----------------------------------------------------------------------------------------------
# review_state on its own: the replay that export and audit use.

def test_review_state_replays_undo():
    episodes = [{"id": "e", "steps": [{"step": 0}, {"step": 1}, {"step": 2}]}]

    def rec(seq, decision, step, who="ada", **kw):
        return {"episode": "e", "step": step, "decision": decision, "final": kw.get("final"), "draft": "D",
                "reason": kw.get("reason"), "annotator": who, "time": f"t{seq}", "seq": seq,
                **({"undoes": kw["undoes"]} if "undoes" in kw else {})}

    records = [
        rec(1, "accept", 0, final="D"),
        rec(2, "edit", 0, final="E"),                 # replaces the accept ...
        rec(3, "reject", 1, reason="wrong"),
        rec(4, "flag_target", 1),
        rec(5, "edit", 2, who="bob", final="B"),      # another annotator: not ada's
        rec(6, "undo", 1, undoes=4),                  # takes back the flag
        rec(7, "undo", 0, undoes=2),                  # ... and the edit: the accept stands again
        rec(8, "accept", 2, final="D"),
        {"episode": "gone", "step": 0, "decision": "accept", "annotator": "ada", "seq": 9},  # not in the dataset
    ]
    state = annotate.review_state(episodes, records, "ada")
    assert list(state) == [("e", 0), ("e", 1), ("e", 2)]
    assert (state["e", 0]["decision"], state["e", 0]["final"], state["e", 0]["seq"]) == ("accept", "D", 1)
    assert (state["e", 1]["decision"], state["e", 1]["reason"], state["e", 1]["flagged"]) == ("reject", "wrong", False)
    assert (state["e", 2]["decision"], state["e", 2]["time"]) == ("accept", "t8")
    assert annotate.review_state(episodes, records, "bob")["e", 2]["final"] == "B"
    assert annotate.review_state(episodes, records, "cy")["e", 0]["decision"] is None

    # the next undo takes back seq 9, then 8, then 3 (4 and 2 are already undone), then 1
    order = []
    while (target := annotate.undo_target(records, "ada")) is not None:
        order.append(target["seq"])
        records.append(rec(100 + len(order), "undo", target["step"], undoes=target["seq"]))
    assert order == [9, 8, 3, 1]
    state = annotate.review_state(episodes, records, "ada")
    assert all(s["decision"] is None and not s["flagged"] for s in state.values())


# ----------------------------------------------------------------------------------------------
# The docs/annotation.md screenshot.

def screenshot(dataset, out, page, serve, decide=None):
    """Decide a few steps (over HTTP, as the page would), open the page and save it at 1100x800."""
    server, url = serve(dataset, annotator="ada")
    for body in decide or [{"episode": "toy.login.0", "step": 0, "decision": "accept"}]:
        status, reply = post(endpoint(url, "/api/decision"), body)
        assert status == 200, reply
    open_page(page, url)
    page.wait_for_function("() => { const shot = document.getElementById('shot'); "
                           "return shot.complete && shot.naturalWidth > 0; }")
    page.screenshot(path=out)
    server.stop()


def demo_dataset(tmp):
    """demo/miniwob copied (never modified in place) with template drafts, else the toy dataset."""
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo", "miniwob")
    if not os.path.exists(os.path.join(demo, "episodes.jsonl")):
        return make_dataset(os.path.join(tmp, "ds")), None
    root = os.path.join(tmp, "miniwob")
    shutil.copytree(demo, root)
    episodes = metrics.load_dataset(root)
    for ep in episodes:
        previous = None
        for k, step in enumerate(ep["steps"]):
            step["guide"], previous = metrics.template_guide(ep, k, previous)
            step["guide_status"] = "draft"
    metrics.write_dataset(root, episodes)
    # reviewed up to book-flight.100's fifth step (a weak draft), with an edit, a reject and a flag on the way
    decide, target = [], next(ep for ep in episodes if ep["id"].startswith("miniwob.book-flight"))
    for ep, k in metrics.iter_steps(episodes):
        if ep is target and k == 4:
            break
        decide.append({"episode": ep["id"], "step": k, "decision": "accept"})
    decide[-3] = {**decide[-3], "decision": "edit",
                  "final": "Pick **Alliance, NE (AIA)** from the suggestions under the **From** field."}
    decide[11] = {**decide[11], "decision": "reject", "reason": "the page shows no Login button at this step"}
    decide.append({**decide[13], "decision": "flag_target"})
    return root, decide


def main(out):
    from playwright.sync_api import sync_playwright
    started = []

    def serve(dataset, annotator="ada"):
        server, url = annotate.serve_review(dataset, 0, annotator, block=False)
        started.append(server)
        return server, url

    path = os.environ.get("MAG_CHROMIUM") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        dataset, decide = demo_dataset(tmp)
        browser = pw.chromium.launch(headless=True, executable_path=path if os.path.exists(path) else None)
        page = browser.new_context(viewport={"width": 1100, "height": 800}).new_page()
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        screenshot(dataset, out, page, serve, decide)
        browser.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/review.png")
