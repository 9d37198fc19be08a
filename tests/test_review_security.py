"""The review server against hostile pages and hostile requests (issue 11, items 1 and 9).

A page on another 127.0.0.1 port (cookies ignore ports, so it is "same-site") tries to write a
decision and to read the token in real headless Chromium; raw requests try a foreign Host (DNS
rebinding), a POST authorised any other way than the X-MAG-Token header, a foreign Origin, a body
that is not application/json, and bodies built to crash the handler. Each is refused with a status
and a JSON error, and review.jsonl stays as it was.
"""
import contextlib
import http.client
import http.server
import json
import socket
import threading
import time

import pytest
import test_annotate_review as review
from test_annotate_review import key, make_dataset, open_page, records

import annotate
import metrics

dataset, serve, browser, page = review.dataset, review.serve, review.browser, review.page  # the same fixtures

ACCEPT = {"episode": "toy.login.0", "step": 0, "decision": "accept"}


def request(port, method, path, headers=None, body=b""):
    """(status, headers, reply) of one request sent exactly as given; `headers` replace the usual ones
    (Host: 127.0.0.1:PORT, Content-Length), None drops one. reply is parsed JSON when the server says it
    is JSON. A dropped connection raises, which fails the test."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    headers = {"Host": f"127.0.0.1:{port}", **({"Content-Length": str(len(body))} if body else {}), **(headers or {})}
    for name, value in headers.items():
        if value is not None:
            conn.putheader(name, value)
    conn.endheaders(body)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, r.headers, json.loads(data) if r.headers.get_content_type() == "application/json" else data


@pytest.fixture
def victim(dataset, serve):
    """(port, token) of a review server on the toy dataset."""
    server, url = serve(dataset)
    return server.port, url.split("token=")[1]


def post_decision(port, token, body=ACCEPT, **headers):
    """A POST as the page sends it (JSON, the header token), with `headers` changed (None drops one)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", annotate.TOKEN_HEADER: token}
    sent.update({name.replace("_", "-"): value for name, value in headers.items()})
    return request(port, "POST", "/api/decision", sent, data)


# ----------------------------------------------------------------------------------------------
# A page served from another port on 127.0.0.1, in the browser that has the review page open.

class OtherSite:
    """A plain page on another 127.0.0.1 port; remembers every request's headers."""

    def __init__(self):
        self.seen = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                site.seen.append(str(self.headers))
                body = b"<!doctype html><title>another site</title><iframe name=sink></iframe>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


FORM_POST = """([target, field, value]) => new Promise((done) => {
    const sink = document.querySelector('iframe[name=sink]');
    sink.addEventListener('load', () => done('loaded'), {once: true});
    const form = document.createElement('form');
    Object.assign(form, {method: 'POST', enctype: 'text/plain', target: 'sink', action: target});
    const input = document.createElement('input');
    Object.assign(input, {name: field, value: value});
    form.append(input);
    document.body.append(form);
    form.submit();
})"""

FETCH = """async ([target, init]) => {
    try { const r = await fetch(target, init); return {status: r.status, type: r.type, text: await r.text()}; }
    catch (e) { return {error: String(e)}; }
}"""


def test_a_page_on_another_port_can_neither_write_nor_read(dataset, serve, page):
    server, url = serve(dataset)
    token = url.split("token=")[1]
    victim = f"http://127.0.0.1:{server.port}"
    open_page(page, url)  # the annotator has the review page open in this browser
    site = OtherSite()
    try:
        page.goto(site.url)
        # a text/plain form builds a JSON body: {"episode": ..., "x": "="}
        field = '{"episode": "toy.login.0", "step": 0, "decision": "accept", "x": "'
        assert page.evaluate(FORM_POST, [victim + "/api/decision", field, '"}']) == "loaded"
        assert page.evaluate(FORM_POST, [url.replace("/?", "/api/decision?"), field, '"}']) == "loaded"
        body = json.dumps({**ACCEPT, "step": 1})
        no_cors = page.evaluate(FETCH, [victim + "/api/decision", {"method": "POST", "mode": "no-cors", "body": body,
                                                                   "credentials": "include"}])
        assert no_cors["type"] == "opaque"  # sent, answered, unreadable
        # even a page that knew the token could not send it: the header needs a preflight, which gets no approval
        with_header = page.evaluate(FETCH, [victim + "/api/decision", {
            "method": "POST", "body": body, "credentials": "include",
            "headers": {"Content-Type": "application/json", annotate.TOKEN_HEADER: token}}])
        assert "error" in with_header
        assert records(dataset) == []

        reads = [page.evaluate(FETCH, [victim + path, {"mode": mode, "credentials": "include"}])
                 for path in ("/", "/api/state") for mode in ("cors", "no-cors")]
        assert all("error" in r or r["text"] == "" for r in reads), reads
        assert not any(token in json.dumps(r) for r in reads)
        assert site.seen and not any(token in headers for headers in site.seen)  # no cookie carried it over
    finally:
        site.close()

    open_page(page, url)  # the review page itself still writes decisions
    key(page, "a")
    assert [(r["episode"], r["step"], r["decision"]) for r in records(dataset)] == [("toy.login.0", 0, "accept")]


# ----------------------------------------------------------------------------------------------
# Raw requests.

@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1", "127.0.0.1:1",
                                  "localhost.evil.example:{port}", "127.0.0.2:{port}", "", None])
def test_a_foreign_host_is_refused(dataset, victim, host):
    """DNS rebinding: evil.example resolved to 127.0.0.1 sends `Host: evil.example`; the token does not help."""
    port, token = victim
    host = host.format(port=port) if host is not None else None
    status, _, reply = request(port, "GET", f"/api/state?token={token}", {"Host": host})
    assert status == 421 and "answers to 127.0.0.1" in reply["error"]
    assert post_decision(port, token, Host=host)[0] == 421
    assert records(dataset) == []
    for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert request(port, "GET", f"/api/state?token={token}", {"Host": good})[0] == 200


def test_a_post_is_authorised_by_the_header_token_only(dataset, victim):
    port, token = victim
    refused = [
        post_decision(port, token, X_MAG_Token=None, Cookie=f"mag_review_{port}={token}"),  # the old cookie
        request(port, "POST", f"/api/decision?token={token}", {"Content-Type": "application/json"},
                json.dumps(ACCEPT).encode()),  # the token in the URL
        post_decision(port, token[:-1]),
        post_decision(port, token + "x"),
        post_decision(port, ""),
    ]
    assert [status for status, _, _ in refused] == [403] * 5 and all("token" in r["error"] for _, _, r in refused)
    assert records(dataset) == []
    assert post_decision(port, token)[0] == 200
    assert len(records(dataset)) == 1


def test_a_post_from_another_origin_is_refused(dataset, victim):
    port, token = victim
    for origin in (f"http://127.0.0.1:{port + 1}", "http://evil.example", "null", f"https://127.0.0.1:{port}",
                   f"http://127.0.0.1:{port}/"):
        status, _, reply = post_decision(port, token, Origin=origin)
        assert status == 403 and "another origin" in reply["error"], origin
    assert post_decision(port, token, Origin=f"http://localhost:{port}")[0] == 403  # the Host says 127.0.0.1
    assert records(dataset) == []
    assert post_decision(port, token, Origin=f"http://127.0.0.1:{port}")[0] == 200
    assert post_decision(port, token)[0] == 200  # no Origin (not a browser): the header token decides
    assert len(records(dataset)) == 2


def test_a_post_must_be_json(dataset, victim):
    port, token = victim
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                  "application/jsonx", None):
        status, _, reply = post_decision(port, token, Content_Type=ctype)
        assert status == 415 and "application/json" in reply["error"], ctype
    assert records(dataset) == []
    assert post_decision(port, token, Content_Type="application/json; charset=utf-8")[0] == 200


def test_a_cors_preflight_is_never_approved(victim):
    port, token = victim
    for origin in (f"http://127.0.0.1:{port + 1}", f"http://127.0.0.1:{port}"):
        status, headers, _ = request(port, "OPTIONS", "/api/decision", {
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-mag-token"})
        assert status == 403
        assert not [name for name in headers if name.lower().startswith("access-control-")]


BAD_BODIES = [
    (b"[" * 30000 + b"]" * 30000, "not valid JSON"),                 # RecursionError in the parser
    (b'{"a":' * 8000 + b"1" + b"}" * 8000, "not valid JSON"),
    (b'{"episode": "toy.login.0", "step": 0, "decision": "edit", "final": "a\\ud800b"}',
     "'final' holds a lone surrogate (U+D800 at character 1), half of a character: not text that can be stored"),
    (b'{"episode": "toy.login.0", "step": 0, "decision": "reject", "reason": "\\udfff"}',
     "'reason' holds a lone surrogate (U+DFFF at character 0)"),
    (b'{"episode": "toy.login.0\\ud800", "step": 0, "decision": "accept"}', "unknown episode"),
    (b'{"episode": "toy.login.0", "step": 0, "decision": "\\ud800"}', "unknown decision"),
    (b'{"episode": "toy.login.0", "step": ' + b"9" * 5000 + b', "decision": "accept"}', "not valid JSON"),
    (b'{"episode": "toy.login.0", "step": NaN, "decision": "accept"}', "has no step"),
    (b'{"episode": "toy.login.0", "step": 1e999, "decision": "accept"}', "has no step"),
    (b'{"episode": ["toy.login.0"], "step": 0, "decision": "accept"}', "unknown episode"),
    (b'{"episode": "toy.login.0", "step": 0, "decision": {"a": 1}}', "unknown decision"),
    (b'{"episode": "toy.login.0", "step": 0, "decision": "edit", "final": {"x": 1}}',
     "'final' must be a string of at most 2000 characters"),
    (b'\xff\xfe{"decision": "undo"}', "not valid JSON"),
    (b'"accept"', "JSON object"),
    (b"null", "JSON object"),
]


@pytest.mark.parametrize("body, message", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_bodies_get_a_4xx_and_a_json_error(dataset, victim, body, message):
    port, token = victim
    status, _, reply = post_decision(port, token, body)  # a dropped connection would raise here
    assert status == 400 and message in reply["error"], reply
    assert records(dataset) == []
    assert request(port, "GET", f"/api/state?token={token}")[0] == 200  # and the server goes on


def test_a_stalled_body_gets_408_and_frees_its_thread(dataset, serve, monkeypatch):
    assert 0 < annotate.ReviewHandler.timeout <= 30  # the server's own limit; 1 s here to keep the test short
    monkeypatch.setattr(annotate.ReviewHandler, "timeout", 1)
    server, url = serve(dataset)
    token = url.split("token=")[1]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(f"POST /api/decision HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
                  f"{annotate.TOKEN_HEADER}: {token}\r\nContent-Length: 100\r\n\r\n{{\"decision\"".encode())
        reply = b""  # without the handler's timeout this waits for the other 88 bytes forever (here: 10 s)
        while chunk := s.recv(65536):
            reply += chunk
    status_line, _, body = reply.decode().partition("\r\n\r\n")
    assert status_line.startswith("HTTP/1.0 408") and "did not arrive" in json.loads(body)["error"]
    assert records(dataset) == []


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickling_client_is_cut_at_the_deadline(dataset, serve, monkeypatch, where):
    """Slowloris: a byte every 0.3 s never trips the per-read timeout (1 s here); the whole request's deadline
    (2 s here, 30 s by default) ends its reading, the client gets an error status, and no decision is written."""
    assert 0 < annotate.ReviewHandler.deadline <= 60
    monkeypatch.setattr(annotate.ReviewHandler, "timeout", 1)
    monkeypatch.setattr(annotate.ReviewHandler, "deadline", 2)
    server, url = serve(dataset)
    token = url.split("token=")[1]
    head = (f"POST /api/decision HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
            f"{annotate.TOKEN_HEADER}: {token}\r\nContent-Length: 100\r\n\r\n")
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        if where == "body":
            s.sendall(head.encode())
        for byte in (head if where == "headers" else '{"decision": "accept", "episode": "' + "x" * 60):
            try:
                s.sendall(byte.encode())
            except OSError:   # the server has stopped reading and answered
                break
            time.sleep(0.3)
            if time.monotonic() - t0 > 8:
                break
        reply = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                reply += chunk
    assert time.monotonic() - t0 < 6, "the trickle was not cut"
    if where == "body":   # the answer says why
        assert reply.startswith(b"HTTP/1.0 408") and b"in all" in reply, reply[:80]
    else:   # a request line cut short: http.server's own 400 page (its HTTP/0.9 form has no status line)
        assert b"Error code explanation: 400" in reply, reply[:80]
    assert records(dataset) == []


def test_every_text_of_a_decision_round_trips(dataset, victim):
    """What is refused above is refused for a reason: any valid Unicode up to the limit is kept exactly."""
    port, token = victim
    text = "Klick auf **Anmelden** \U0001f600 " + "ü" * (annotate.MAX_TEXT - 30)
    status, _, reply = post_decision(port, token, {**ACCEPT, "decision": "edit", "final": text})
    assert status == 200 and reply["record"]["final"] == " ".join(text.split())
    assert records(dataset)[-1]["final"] == " ".join(text.split())


def test_the_token_in_the_page_is_escaped(tmp_path, serve):
    server, url = serve(make_dataset(tmp_path / "ds"), token='"><script>alert(1)</script>')
    status, _, body = request(server.port, "GET", "/?token=%22%3E%3Cscript%3Ealert(1)%3C/script%3E")
    assert status == 200
    assert b'content="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in body and b"<script>alert" not in body


def test_a_lone_surrogate_in_the_dataset_is_refused_before_serving(tmp_path, serve):
    """A crafted episodes.jsonl ("\\ud800" in the task and a draft), which UTF-8 cannot store: the dataset
    validator refuses it before the server starts, naming the line and the field -- nothing is served or written."""
    root = make_dataset(tmp_path / "ds")
    path = tmp_path / "ds" / "episodes.jsonl"
    path.write_text(path.read_text().replace("Search for cats.", "Search for cats \\ud800.")
                    .replace("**Search** box.", "**Search** box \\udfff."))
    with pytest.raises(metrics.DatasetError, match=r"episodes.jsonl:\d+: episode 'toy.search.1'.*lone surrogate"):
        serve(root)
    assert records(root) == []
