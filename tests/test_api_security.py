"""The API key stays home: one test per way it leaked (issue 11, items 2 and 3) -- a redirect, an error body
with the key across the 200-character cut, an exception whose message holds the key, a successful reply that
echoes it -- first at metrics.chat_completion, then through evaluate.py's and annotate.py's stored files."""
import importlib.util
import json
import os

import pytest
from conftest import FakeAPI, make_toy_dataset

import metrics

KEY = "sk-live-Q7f2Zx9Lm4Rt8Wp1Kd6Hs3Vb5Nc0"
PIECES = (KEY, KEY[:8], KEY[-8:])   # the whole key, its first and last 8 characters
ASK = [{"role": "user", "content": "Reply with OK."}]


def no_key(text, where=""):
    for piece in PIECES:
        assert piece not in text, (where, piece)


def no_key_in_folder(folder):
    for root, _, files in os.walk(folder):
        for name in files:
            no_key(open(os.path.join(root, name), "rb").read().decode("utf-8", "replace"), name)


def ask(script, **kw):
    """One chat_completion against a FakeAPI playing `script` -> (reply or the ApiError, the requests it saw)."""
    api = FakeAPI(script, key=KEY)
    try:
        kw = {"key": KEY, "retries": 0, "backoff": 0.01, **kw}
        return metrics.chat_completion(api.base, "m", ASK, **kw), api.requests
    except metrics.ApiError as e:
        return e, api.requests
    finally:
        api.close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_and_no_request_reaches_its_target(code):
    other = FakeAPI([])   # records every request, GET included (urllib turns a followed 302 into a GET)
    try:
        err, seen = ask([(code, "", {"Location": other.base + "/chat/completions?token=abc#x"})], retries=2)
    finally:
        other.close()
    assert other.requests == [] and len(seen) == 1   # not followed, not retried
    assert isinstance(err, metrics.ApiError) and err.status == code
    msg = str(err)
    assert f"answered {code} -> {other.base}/chat/completions;" in msg and "token" not in msg
    assert "redirects are not followed (the key would go with them)" in msg
    assert f"use the final URL as --api-base ({other.base})" in msg and "\n" not in msg


def test_a_relative_redirect_names_the_absolute_target():
    err, _ = ask([(302, "", {"Location": "/v2/chat/completions?k=1"})])
    assert "-> http://127.0.0.1:" in str(err) and "/v2/chat/completions;" in str(err) and "k=1" not in str(err)
    err, _ = ask([(302, "", {"Location": "https://sso.example/login?next=/v1"})])   # no base to suggest there
    assert str(err).endswith("-> https://sso.example/login; redirects are not followed (the key would go with them):"
                             " use the final URL as --api-base")


@pytest.mark.parametrize("at", [180, 190, 195, 199])
def test_an_error_body_with_the_key_across_the_cut(at):
    """The body is cut to 200 characters for the message; the key starts before the cut and ends after it."""
    err, _ = ask([(400, "x" * at + KEY + " and more", {})])
    msg = str(err)
    assert err.status == 400 and msg.startswith("http://127.0.0.1:") and "HTTP 400: xxx" in msg
    no_key(msg)
    assert "HTTP 400: " + ("x" * at + "*** and more")[:200] + " after 1 attempt(s)" in msg   # 199: cut in the ***


def test_an_error_body_with_the_key_across_the_read_limit():
    """The body is read only up to a limit (then squeezed): a key cut by the read must not survive either."""
    for pad in (290, metrics.ERROR_BYTES - 10):   # 290: around the old 300-byte read
        err, _ = ask([(500, " " * pad + KEY + " and more", {})])
        no_key(str(err), pad)
        assert str(err).startswith("http://") and err.status == 500


@pytest.mark.parametrize("raw", [b"HTTP/" + KEY.encode() + b" 200 OK\r\n\r\n",   # http.client.UnknownProtocol
                                 b"OOPS " + KEY.encode() + b" x" * 300 + b"\r\n\r\n"])   # http.client.BadStatusLine
def test_an_exception_message_with_the_key(raw):
    """http.client puts the status line it could not read into its exception: an ApiError, the key redacted."""
    err, seen = ask([raw, raw], retries=1)
    assert isinstance(err, metrics.ApiError) and len(seen) == 2   # retried, like a dropped connection
    no_key(str(err))
    assert "***" in str(err) and "after 2 attempt(s)" in str(err) and len(str(err)) < 400


def test_a_key_with_a_line_break_never_reaches_an_exception():
    """http.client refuses a header value with a line break by a ValueError that quotes the value, key and all."""
    reply, seen = ask(["OK"], key=KEY + "\n")   # from a file: the newline is dropped, the request goes out
    assert reply == "OK" and seen[0]["auth"] == f"Bearer {KEY}"
    err, seen = ask(["OK"], key=KEY[:10] + "\r\n" + KEY[10:])
    assert isinstance(err, metrics.ApiError) and "line break" in str(err) and seen == []
    no_key(str(err))


def test_a_successful_reply_echoing_the_key_comes_back_redacted():
    reply, _ = ask([f"Guide: your key is {KEY}.\nAction: stop()"])
    assert reply == "Guide: your key is ***.\nAction: stop()"
    parts = json.dumps({"choices": [{"message": {"content": [{"type": "text", "text": "a " + KEY[:20]},
                                                              {"type": "text", "text": KEY[20:] + " b"}]}}]})
    reply, _ = ask([(200, parts, {"Content-Type": "application/json"})])
    assert reply == "a *** b"   # the parts are joined first: a key split across two parts is found
    reply, _ = ask(["Guide: Click **Save**.\nAction: click(3)"])   # nothing to redact: unchanged
    assert reply == "Guide: Click **Save**.\nAction: click(3)"
    # an endpoint that echoes only part of the key: any run of KEY_PIECE or more of its characters goes
    reply, _ = ask([f"your key starts {KEY[:12]}, ends {KEY[-9:]}, holds {KEY[10:18]}; x{KEY[3:10]}x"])
    assert reply == f"your key starts ***, ends ***, holds ***; x{KEY[3:10]}x"   # 7 characters: kept
    assert metrics.redact("abc abcabc", "abc") == "*** ***"   # a key shorter than a piece: whole matches only


def test_redact_comes_before_the_cut():
    text = "a" * 195 + KEY + "b" * 50
    assert metrics.redact(text, KEY, 200) == "a" * 195 + "***" + "b" * 2
    assert metrics.redact(f"{KEY}\n\n  {KEY}", KEY) == "***\n\n  ***"   # no limit: lines kept, nothing cut
    assert metrics.redact("one\n two  three", KEY, 200) == "one two three"   # a limit squeezes to one line
    assert metrics.redact(KEY, None) == KEY and metrics.redact(KEY, "") == KEY


# ----------------------------------------------------------------------------------------------
# The stored files: evaluate.py's episodes.jsonl and report.html, annotate.py's drafts.jsonl.

def hostile_script(reply):
    """A reply echoing the key, an error body with the key across the cut (a 400 refuses that request only),
    then a status line holding the key (no answer of the API's: an outage, which stops the run)."""
    return [reply, (400, "x" * 190 + KEY + " bad request", {}), b"HTTP/" + KEY.encode() + b" 200 OK\r\n\r\n"]


@pytest.mark.skipif(importlib.util.find_spec("django") is None, reason="needs django (requirements.txt)")
def test_evaluate_stores_no_key_bytes(tmp_path, monkeypatch, capsys):
    import evaluate
    api = FakeAPI(["OK"] + hostile_script(f"lol {KEY}"), key=KEY)
    monkeypatch.setenv("MAG_TEST_KEY", KEY)
    out = tmp_path / "run"
    try:
        with pytest.raises(SystemExit) as stop:   # the outage: the episode is set aside, to be redone
            evaluate.main(["--suite", "backoffice", "--out", str(out), "--no-progress", "--seed", "700",
                           "--tasks", "close-ticket", "--episodes", "1", "--policy", "api", "--api-base",
                           api.base, "--api-model", "m", "--api-key-env", "MAG_TEST_KEY", "--api-retries", "0",
                           "--max-steps", "6"])
    finally:
        api.close()
    printed = capsys.readouterr()
    assert not api.script
    ep = metrics.load_dataset(out / metrics.API_FAILED)[0]
    steps = ep["steps"]
    assert steps[0]["reply"] == "lol ***" and "HTTP 400: " + "x" * 190 + "***" in steps[1]["api_error"]
    assert "***" in ep["error"] and "***" in str(stop.value)
    assert os.path.exists(out / "report.html")
    no_key_in_folder(out)
    no_key(printed.out + printed.err + str(stop.value))


def test_annotate_drafts_store_no_key_bytes(tmp_path, monkeypatch, capsys):
    """annotate.py's api drafter gets its text from the same client: its drafts.jsonl holds no key either."""
    import annotate
    data = make_toy_dataset(str(tmp_path / "d"), n_episodes=1)
    episodes = metrics.load_dataset(data)
    for step in episodes[0]["steps"]:
        step["guide"] = step["guide_status"] = None
    metrics.write_dataset(data, episodes)
    target = metrics.gold_element(episodes[0]["steps"][0])["text"]
    api = FakeAPI(["OK"] + hostile_script(f"Click the **{target}** button ({KEY})."), key=KEY)
    monkeypatch.setenv("MAG_TEST_KEY", KEY)
    try:
        with pytest.raises(SystemExit) as stop:   # the outage: the third step is left to a rerun
            annotate.main(["draft", data, "--drafter", "api", "--api-base", api.base, "--api-model", "m",
                           "--api-key-env", "MAG_TEST_KEY", "--api-retries", "0"])
    finally:
        api.close()
    printed = capsys.readouterr()
    assert not api.script
    drafts = [json.loads(line) for line in open(os.path.join(data, "drafts.jsonl"))]
    assert drafts[0]["guide"] == f"Click the **{target}** button (***)." and drafts[0]["drafter"] == "api:m"
    assert len(drafts) == 2 and "x" * 190 + "***" in drafts[1]["fallback"] and "***" in str(stop.value)
    no_key_in_folder(data)
    no_key(printed.out + printed.err + str(stop.value))
