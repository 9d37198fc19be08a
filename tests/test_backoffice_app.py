"""The back-office environment: a real Django admin over a seeded SQLite file, driven in Chromium.

Django runs only in child processes (build_db, manage.py dump, runserver); this process reads the
database with sqlite3, as a task evaluator would.
"""
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest

from envs import django_suite

HERE = os.path.join(django_suite.ENVS_DIR, "backoffice")

pytestmark = pytest.mark.skipif(importlib.util.find_spec("django") is None, reason="needs django (requirements.txt)")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bo") / "seed1.sqlite3")
    seconds = build_db(path, seed=1)
    print(f"build_db: {seconds:.2f}s")
    return path


def build_db(path, seed):
    return django_suite.build_db(HERE, str(path), seed)


def manage(db, *args):
    return django_suite.manage(HERE, db, *args)


def dump(db):
    return json.loads(manage(db, "dump"))


def test_same_seed_same_database(seeded, tmp_path):
    build_db(tmp_path / "again.sqlite3", seed=1)
    build_db(tmp_path / "other.sqlite3", seed=2)
    a, again, other = dump(seeded), dump(tmp_path / "again.sqlite3"), dump(tmp_path / "other.sqlite3")
    assert a == again
    assert a["shop_customer"] != other["shop_customer"] and a["auth_user"] != other["auth_user"]
    sizes = {t: len(rows) for t, rows in a.items()}
    assert sizes["auth_user"] == 6 and sizes["auth_group"] == 3 and sizes["auth_group_permissions"] > 0
    counts = (sizes["shop_customer"], sizes["shop_product"], sizes["shop_order"], sizes["shop_ticket"])
    assert counts == (30, 20, 40, 25)
    assert {o["status"] for o in a["shop_order"]} == {"new", "paid", "shipped", "cancelled"}
    unpaid = [o["customer_id"] for o in a["shop_order"] if not o["paid"]]
    assert max(unpaid.count(c) for c in unpaid) >= 2   # someone owes on several orders
    assert not list(tmp_path.glob("*.tmp*"))           # the temp file was renamed, not left behind


def test_what_an_episode_creates_is_the_same_on_every_run(seeded, tmp_path):
    """The sandbox's clock stands still at the data's "today" and passwords set live get a fixed salt:
    a user created during an episode shows the same date joined and hash on every run and every day
    (both came out different between two reproduction runs' screenshots)."""
    db = tmp_path / "live.sqlite3"
    code = ("import time; from django.contrib.auth.models import User; from shop.models import Ticket; "
            "u = User.objects.create_user('trainee', 't@acme.test', 'Welcome-1'); time.sleep(1.1); "
            "v = User.objects.create_user('other', 'o@acme.test', 'Welcome-1'); "
            "t = Ticket.objects.filter(status='open').first(); t.status = 'closed'; t.save(); "
            "print(u.date_joined.isoformat(), v.date_joined.isoformat(), t.closed_at.isoformat()); "
            "print(u.password == v.password, u.check_password('Welcome-1'), User.objects.get(username='admin')"
            ".check_password('admin-pass-2026'))")
    lines = []
    for _ in range(2):
        shutil.copy(seeded, db)
        lines.append(manage(db, "shell", "-v", "0", "-c", code).splitlines())
    assert lines[0] == lines[1]
    assert lines[0][0].split() == ["2026-01-05T09:00:00+00:00"] * 3
    assert lines[0][1] == "True True True"   # the fixed salt still hashes and verifies; seeded hashes verify


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(db, log):
    """runserver on a free port, exactly as the harness starts it; yields the base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
                            cwd=HERE, env={**os.environ, "MAG_DJANGO_DB": str(db)},
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        t0 = time.perf_counter()
        while True:
            assert proc.poll() is None, "runserver exited; see its log"
            assert time.perf_counter() - t0 < 20, "runserver not ready in 20 s"
            try:
                if urllib.request.urlopen(base + "/admin/login/", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        print(f"server startup: {time.perf_counter() - t0:.2f}s")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_admin_in_browser(seeded, tmp_path):
    from playwright.sync_api import expect, sync_playwright
    db = tmp_path / "live.sqlite3"
    shutil.copy(seeded, db)   # the browser edits it; the module's seeded file stays pristine

    def query(sql, *args):
        with contextlib.closing(sqlite3.connect(db)) as con:
            return con.execute(sql, args).fetchall()

    cust_id, name = query("SELECT id, name FROM shop_customer ORDER BY id LIMIT 1")[0]
    (order_id,), = query("SELECT id FROM shop_order WHERE status = 'new' AND NOT paid ORDER BY id LIMIT 1")
    (unsold_id,), = query("SELECT id FROM shop_product WHERE id NOT IN (SELECT product_id FROM shop_orderline) LIMIT 1")
    chromium = os.environ.get("MAG_CHROMIUM") or "/usr/bin/chromium"
    with open(tmp_path / "server.log", "w") as log, serve(db, log) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(headless=True, executable_path=chromium if os.path.exists(chromium) else None)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(10_000)
        success = page.locator(".messagelist .success")

        page.goto(base + "/")   # -> /admin/ -> the login form
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin-pass-2026")
        page.click("input[type=submit]")
        expect(page.locator("#site-name")).to_have_text("Acme Back Office")
        # The admin's own CSS is served (--insecure) and applied: the header has its colour.
        assert page.request.get(base + "/static/admin/css/base.css").status == 200
        assert page.eval_on_selector("#header", "e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"

        # Search a customer, open it, change the email.
        page.get_by_role("link", name="Customers").first.click()
        page.fill("#searchbar", name)
        page.press("#searchbar", "Enter")
        page.locator("#result_list th a", has_text=name).click()
        page.fill("#id_email", "new.address@acme.example")
        page.click("input[name=_save]")
        expect(success).to_contain_text("was changed successfully")
        assert query("SELECT email FROM shop_customer WHERE id = ?", cust_id) == [("new.address@acme.example",)]

        # An invalid phone is refused by the field validator, and nothing is saved.
        page.goto(f"{base}/admin/shop/customer/{cust_id}/change/")
        page.fill("#id_phone", "call me maybe")
        page.click("input[name=_save]")
        expect(page.locator(".errorlist")).to_contain_text("Enter 7-20 characters")
        assert query("SELECT phone FROM shop_customer WHERE id = ?", cust_id) != [("call me maybe",)]

        # Order.clean: a shipped order must be paid (a form-level error).
        page.goto(f"{base}/admin/shop/order/{order_id}/change/")
        page.select_option("#id_status", "shipped")
        page.click("input[name=_save]")
        expect(page.locator(".errorlist.nonfield")).to_contain_text("A shipped order must be paid.")

        # Bulk action on a selected row of the filtered changelist.
        page.goto(base + "/admin/shop/order/?paid__exact=0")
        page.check(f"input.action-select[value='{order_id}']")
        page.select_option("select[name=action]", "mark_paid")
        page.click("button[name=index]")
        expect(success).to_contain_text("1 order(s) marked as paid.")
        assert query("SELECT paid, status FROM shop_order WHERE id = ?", order_id) == [(1, "paid")]

        # Delete a never-sold product: change form -> Delete -> confirmation page -> confirm.
        page.goto(f"{base}/admin/shop/product/{unsold_id}/change/")
        page.click("a.deletelink")
        expect(page.locator("#content h1")).to_have_text("Delete")
        page.click("#content form input[type=submit]")
        expect(success).to_contain_text("was deleted successfully")
        assert query("SELECT id FROM shop_product WHERE id = ?", unsold_id) == []
        browser.close()
