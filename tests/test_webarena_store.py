"""WebArena's shopping helpers through the store's admin REST API (issue 13 item 4), against a stand-in store:
an http.server on 127.0.0.1 answering the Magento 2 routes WebArena's helpers call (the admin token, the
orders search, a product's reviews) and the storefront's order page."""
import http.server
import json
import urllib.parse

import pytest
from conftest import serving

import collect
from envs import webarena

ADMIN = ("admin", "s3cret-pass")
TOKEN = "tok-7f3a"
ORDERS = [   # increment_id, created_at, the SKU ordered
    ("000000188", "2023-01-02 10:00:00", "B00AAAAAAA"),
    ("000000190", "2023-05-01 09:00:00", "B07DFJ5XKH"),   # the newest
    ("000000189", "2023-03-01 12:00:00", "B00CCCCCCC")]
REVIEWS = {
    "B07HZB38XH": [{"nickname": "Ada", "ratings": [{"rating_name": "Rating", "percent": 40}]},
                   {"nickname": "Grace", "ratings": [{"rating_name": "Rating", "percent": 80}]}],   # the latest
    "B0041MSF2S": [],
    "ODD": [{"nickname": "X", "ratings": [{"rating_name": "Quality", "percent": 60}]}],
}


class Shop(http.server.BaseHTTPRequestHandler):
    seen = []   # (method, path) of every request

    def log_message(self, *a):
        pass

    def reply(self, status, payload, content_type="application/json", headers=()):
        data = (json.dumps(payload) if content_type == "application/json" else payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorised(self):
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self.reply(401, {"message": "The consumer isn't authorized to access %resources."})
        return False

    def do_POST(self):
        Shop.seen.append(("POST", self.path))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/rest/default/V1/integration/admin/token":
            if (body.get("username"), body.get("password")) == ADMIN:
                return self.reply(200, TOKEN)
            return self.reply(401, {"message": f"The account sign-in was incorrect ({body.get('password')})"})
        if self.path == "/moved/rest/default/V1/integration/admin/token":
            return self.reply(302, {}, headers=[("Location", "/rest/default/V1/integration/admin/token")])
        self.reply(404, {"message": "no route"})

    def do_GET(self):
        Shop.seen.append(("GET", self.path))
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/rest/V1/orders" and self.authorised():
            assert query == {"searchCriteria[sortOrders][0][field]": ["created_at"],
                             "searchCriteria[sortOrders][0][direction]": ["DESC"],
                             "searchCriteria[pageSize]": ["1"]}, query
            newest = sorted(ORDERS, key=lambda o: o[1], reverse=True)[:1]
            return self.reply(200, {"items": [{"increment_id": i, "created_at": c} for i, c, _ in newest],
                                    "total_count": len(ORDERS)})
        if url.path.startswith("/rest/V1/products/") and url.path.endswith("/reviews") and self.authorised():
            sku = urllib.parse.unquote(url.path.split("/")[4])
            return self.reply(200, REVIEWS[sku]) if sku in REVIEWS else self.reply(404, {"message": "no product"})
        if url.path.startswith("/sales/order/view/order_id/"):
            number = int(url.path.rstrip("/").rsplit("/", 1)[1])
            sku = next((s for i, _, s in ORDERS if int(i) == number), None)
            return self.reply(200, f'<div class="order-details-items ordered">Order #{number}: {sku}</div>',
                              "text/html")
        if url.path == "/":
            return self.reply(200, "<h1>One Stop Market</h1>", "text/html")
        if not url.path.startswith("/rest/"):
            self.reply(404, "not here", "text/plain")


@pytest.fixture(scope="module")
def shop():
    with serving(Shop) as base:
        yield base


def test_store_helpers_read_the_rest_api(shop):
    store = webarena.Store(shop, *ADMIN)
    assert store.latest_order_url() == f"{shop}/sales/order/view/order_id/190/"   # int() of the increment id
    assert store.latest_review_author("B07HZB38XH") == "Grace"   # the last one listed
    assert store.latest_review_rating("B07HZB38XH") == "80"
    assert store.latest_review_author("B0041MSF2S") == "" and store.latest_review_rating("B0041MSF2S") == ""
    with pytest.raises(webarena.StoreError, match="not the one named 'Rating'"):
        store.latest_review_rating("ODD")
    with pytest.raises(webarena.StoreError, match="/rest/V1/products/NOPE/reviews: HTTP 404"):
        store.latest_review_author("NOPE")


def test_store_errors_name_the_call_and_hide_the_password(shop):
    with pytest.raises(webarena.StoreError) as e:
        webarena.Store(shop, "admin", "wrong-pass").latest_order_url()
    assert f"POST {shop}/rest/default/V1/integration/admin/token: HTTP 401" in str(e.value)
    assert "wrong-pass" not in str(e.value) and "***" in str(e.value)   # the stand-in echoes it: redacted
    Shop.seen.clear()
    with pytest.raises(webarena.StoreError, match="HTTP 302"):   # a redirect is refused, not followed
        webarena.Store(shop + "/moved", *ADMIN).token()
    assert Shop.seen == [("POST", "/moved/rest/default/V1/integration/admin/token")]
    with pytest.raises(webarena.StoreError, match="POST http://127.0.0.1:1/rest/default/V1/integration/admin/token"):
        webarena.Store("http://127.0.0.1:1", *ADMIN).token()


ORDER_TASK = {"task_id": 436, "intent": "Buy the Mini Fridge", "start_url": "__SHOPPING__", "storage_state": None,
              "eval": {"eval_types": ["program_html"], "program_html": [
                  {"url": "func:shopping_get_latest_order_url()",
                   "locator": 'document.querySelector(".order-details-items.ordered").outerText',
                   "required_contents": {"must_include": ["B07DFJ5XKH"]}}]}}
RATING_TASK = {"task_id": 586, "intent": "Rate my recent purchase of the shoes with 4 stars",
               "start_url": "__SHOPPING__", "storage_state": None,
               "eval": {"eval_types": ["program_html"], "program_html": [
                   {"url": "last", "locator": "func:shopping_get_sku_latest_review_rating('B07HZB38XH')",
                    "required_contents": {"must_include": ["80"]}},
                   {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('B07HZB38XH')",
                    "required_contents": {"must_include": ["Grace"]}}]}}
WRONG_TASK = {**ORDER_TASK, "task_id": 437, "eval": {"eval_types": ["program_html"], "program_html": [
    {**ORDER_TASK["eval"]["program_html"][0], "required_contents": {"must_include": ["B00CCCCCCC"]}}]}}


def test_check_and_run_with_the_admin_account(tmp_path, shop, capsys):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([ORDER_TASK, RATING_TASK, WRONG_TASK]))
    argv = ["--suite", "webarena", "--task-file", str(path), "--sites", f"shopping={shop}"]
    for extra, line in (([], "3 tasks, 0 runnable, 3 refused"),
                        (["--shopping-admin", ":".join(ADMIN)], "3 tasks, 3 runnable, 0 refused")):
        with pytest.raises(SystemExit) as e:
            collect.main(argv + ["--check", "--out", str(tmp_path / "x")] + extra)
        assert e.value.code == 0 and capsys.readouterr().out.splitlines()[0] == f"{path}: {line}"
    for site, admin, message in ((f"shopping={shop}", "admin", "--shopping-admin: expected USER:PASSWORD"),
                                 ("map=http://127.0.0.1:1", "a:b", "--shopping-admin needs --sites shopping=URL")):
        with pytest.raises(SystemExit, match=message):
            collect.main(["--suite", "webarena", "--check", "--task-file", str(path), "--sites", site,
                          "--shopping-admin", admin])
    summary = collect.main(argv + ["--shopping-admin", ":".join(ADMIN), "--policy", "random", "--max-steps", "1",
                                   "--episodes", "1", "--out", str(tmp_path / "out"), "--no-progress"])
    assert summary["errors"] == 0
    assert {t: v["success"] for t, v in summary["by_task"].items()} == {"436": 1.0, "586": 1.0, "437": 0.0}
    assert ":".join(ADMIN) not in (tmp_path / "out" / "episodes.jsonl").read_text()
