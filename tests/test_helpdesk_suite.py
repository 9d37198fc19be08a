"""collect.py --suite helpdesk: django-helpdesk from PyPI, served live through the shared Django
mechanism (envs/django_suite.py): deterministic seeding and screenshots, its templates' experts on an
unseen seed, evaluators that fail on the untouched database, a server killed mid-episode."""
import contextlib
import importlib.util
import sqlite3

import pytest
from conftest import assert_dap_guides, assert_same_screenshots, do_nothing, killing, tasks_to_judge, tasks_to_run

import collect
import metrics
from envs import django_suite
from envs.helpdesk import experts, suite

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("helpdesk") is None,
                                 reason="needs django-helpdesk (requirements.txt)"),
              pytest.mark.usefixtures("django_cache")]

UNSEEN_SEED = 811   # the experts were written on seeds 1 and 3


def run(out, *argv):
    return collect.main(["--suite", "helpdesk", "--out", str(out), "--no-progress", *argv])


def rows(db):
    """Every row of every table, in rowid order: what two builds of one seed must share."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        names = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        tables = [t for (t,) in names]
        return {t: con.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}


def test_same_seed_same_database(tmp_path):
    app = suite.Helpdesk().app_dir
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        django_suite.build_db(app, str(tmp_path / f"{name}.sqlite3"), seed)
    a, b, c = (rows(tmp_path / f"{n}.sqlite3") for n in "abc")
    assert a == b
    assert a["helpdesk_ticket"] != c["helpdesk_ticket"]
    assert len(a["helpdesk_ticket"]) == 48 and len(a["helpdesk_queue"]) == 4 and len(a["auth_user"]) == 6
    with contextlib.closing(sqlite3.connect(tmp_path / "a.sqlite3")) as con:
        statuses = {s for (s,) in con.execute("SELECT status FROM helpdesk_ticket")}
    assert statuses == {1, 2, 3, 4}   # open, reopened, resolved and closed tickets to work on


def test_suite_has_templates_and_variants():
    tasks = suite.load_tasks()
    templates = {t["template"] for t in tasks.values()}
    assert len(tasks) >= 60 and len(templates) >= 20
    assert templates == experts.EXPERTS.keys()
    assert suite.Helpdesk.all_tasks(suite.Helpdesk()) == sorted(tasks)
    for name, t in tasks.items():
        assert t["evaluators"] and t["start_url"] in ("/", "/dashboard/", "/admin/"), name
        assert {ev["type"] for ev in t["evaluators"]} <= {"db", "url_match", "program_html", "string_match"}


def test_experts_succeed_in_parallel_workers(tmp_path, started):
    """The tasks of conftest.tasks_to_run, each one's expert on an unseen seed, two workers with a server and a
    database each."""
    tasks = tasks_to_run(suite)
    summary = run(tmp_path, "--tasks", ",".join(tasks), "--episodes", "1", "--seed", str(UNSEEN_SEED),
                  "--workers", "2")
    assert sorted(summary["by_task"]) == tasks
    eps = metrics.load_dataset(tmp_path, check_images=True)
    failed = {ep["task"]: ep["error"] or f"failed after {len(ep['steps'])} steps"
              for ep in eps if not ep["success"]}
    assert summary["errors"] == 0 and not failed, failed
    assert len(started) == len({s.port for s in started}) == 2
    for ep in eps:
        assert ep["start_url"].startswith("__HELPDESK__/") and ep["viewport"] == [1280, 800]
        assert 3 <= len(ep["steps"]) - 1 <= 25, (ep["task"], len(ep["steps"]))
        assert all("127.0.0.1" not in s["url"] and "example.com" not in s["url"] for s in ep["steps"])
        assert not ep["meta"]["blocked"], ep["meta"]["blocked"]   # nothing fetched from outside
        for s in ep["steps"]:
            a = s["action"]
            if a["op"] in metrics.ELEMENT_OPS:
                el = next(e for e in s["elements"] if e["mark"] == a["mark"])
                assert metrics.in_box(a["point"], el["bbox"]), (ep["id"], s["step"])
    assert_dap_guides(eps)   # a purpose on every expert move; template guides that name targets rightly


def test_same_seed_same_screenshots(tmp_path):
    """Two runs of one seed: byte-identical screenshots, on pages with relative times ("1 month ago"),
    dates the browser renders (the ticket list), and what the episode wrote (a new ticket, a reply)."""
    tasks = "new-ticket-assigned,reply-and-resolve,ticket-owner"
    for k in (1, 2):
        run(tmp_path / f"run{k}", "--tasks", tasks, "--episodes", "1", "--seed", "812")
    assert_same_screenshots(tmp_path / "run1", tmp_path / "run2", min_steps=6)


def test_evaluators_fail_on_untouched_database(tmp_path, monkeypatch):
    """Doing nothing fails every task judged (conftest.tasks_to_judge; a `pick` whose row already passes would show)."""
    for template in experts.EXPERTS:
        monkeypatch.setitem(experts.EXPERTS, template, do_nothing)
    tasks = tasks_to_judge(suite)
    summary = run(tmp_path, "--tasks", ",".join(tasks), "--episodes", "1", "--seed", str(UNSEEN_SEED), "--workers", "2")
    assert summary["episodes"] == len(tasks) and summary["errors"] == 0
    for ep in metrics.load_dataset(tmp_path):
        assert [s["action"]["op"] for s in ep["steps"]] == ["stop"]
        assert ep["success"] is False and ep["reward"] == 0.0, ep["task"]


def test_killed_server_is_restarted(tmp_path, monkeypatch, started):
    """SIGKILL of the desk's server mid-episode: the episode is retried on a restarted server (same port)."""
    kills = [1]
    monkeypatch.setitem(experts.EXPERTS, "respond", killing(experts.EXPERTS["respond"], kills, started))
    summary = run(tmp_path, "--tasks", "internal-note", "--episodes", "1", "--seed", str(UNSEEN_SEED))
    assert kills == [0] and summary["episodes"] == 1
    (ep,) = metrics.load_dataset(tmp_path, check_images=True)
    assert ep["success"] and ep["error"] is None
    assert len(started) == 2 and len({s.port for s in started}) == 1
