"""collect.py --suite backoffice: Django's admin served live, task templates, experts, evaluators,
one server per worker, and a server that dies mid-episode."""
import importlib.util
import re
import time

import pytest
from conftest import assert_dap_guides, assert_same_screenshots, do_nothing, killing, tasks_to_judge, tasks_to_run

import collect
import metrics
from envs.backoffice import experts, suite

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("django") is None, reason="needs django (requirements.txt)"),
              pytest.mark.usefixtures("django_cache")]

# the tasks whose episodes the tests below read, run beside conftest.tasks_to_run(suite)
CHECKED = ("count-unpaid-orders", "order-total", "ship-order")
UNSEEN_SEEDS = (702, 701)   # the experts were written on seeds 0..12 (the first five templates) and 0, 5, 6, 700


def run(out, *argv):
    return collect.main(["--suite", "backoffice", "--out", str(out), "--no-progress", *argv])


def test_suite_has_templates_and_variants():
    """The issue's bar: at least 30 tasks from at least 10 templates, each template with an expert."""
    tasks = suite.load_tasks()
    templates = {t["template"] for t in tasks.values()}
    assert len(tasks) >= 30 and len(templates) >= 10
    assert templates == experts.EXPERTS.keys()
    for name, t in tasks.items():
        assert t["evaluators"] and t["start_url"] == "/admin/", name
        assert {ev["type"] for ev in t["evaluators"]} <= {"db", "url_match", "program_html", "string_match"}
    assert suite.Backoffice.all_tasks(suite.Backoffice()) == sorted(tasks)   # --tasks all = every task


def test_experts_succeed_in_parallel_workers(tmp_path, started):
    """The experts on an unseen seed, two workers: each worker has its own server and database (the
    evaluators also count rows the task must not touch, so a leak would fail them)."""
    seed, tasks = UNSEEN_SEEDS[0], tasks_to_run(suite, also=CHECKED)
    summary = run(tmp_path, "--tasks", ",".join(tasks), "--episodes", "1", "--seed", str(seed), "--workers", "2")
    assert sorted(summary["by_task"]) == tasks
    eps = metrics.load_dataset(tmp_path, check_images=True)
    failed = {ep["task"]: ep["error"] or f"failed after {len(ep['steps'])} steps" for ep in eps if not ep["success"]}
    assert summary["errors"] == 0 and not failed, failed
    # one server per worker, each started once (a fault retried in a new context reuses its worker's
    # server: the worker gives it back even when closing the old context fails or times out)
    assert len(started) == len({s.port for s in started}) == 2
    for ep in eps:
        assert ep["start_url"] == "__BACKOFFICE__/admin/" and ep["viewport"] == [1280, 800]
        assert 3 <= len(ep["steps"]) - 1 <= 20, (ep["task"], len(ep["steps"]))   # actions, the final stop aside
        assert "login" in ep["steps"][0]["url"]
        assert all("127.0.0.1" not in s["url"] for s in ep["steps"])   # the port never reaches the data
        assert not ep["meta"]["blocked"]
        assert len({s["url"].split("?")[0] for s in ep["steps"]}) >= 3, ep["task"]   # several pages
        for s in ep["steps"]:
            a = s["action"]
            if a["op"] in metrics.ELEMENT_OPS:   # every target is one of the marks, its point inside its box
                el = next(e for e in s["elements"] if e["mark"] == a["mark"])
                assert metrics.in_box(a["point"], el["bbox"]), (ep["id"], s["step"])
    assert_dap_guides(eps)   # a purpose on every expert move; template guides that name targets rightly
    answers = {ep["task"]: ep["steps"][-1]["action"]["value"] for ep in eps
               if ep["task"] in ("count-unpaid-orders", "order-total")}
    assert answers["count-unpaid-orders"].isdigit() and re.fullmatch(r"\d+\.\d\d", answers["order-total"])
    # the validation-error path: the first save of an unpaid order as Shipped is refused, the expert reads
    # the error, ticks Paid and saves again
    ship = next(ep for ep in eps if ep["task"] == "ship-order")
    saves = [s for s in ship["steps"] if s["action"]["op"] == "click" and
             next(e for e in s["elements"] if e["mark"] == s["action"]["mark"])["text"] == "Save"]
    assert len(saves) == 2


def test_same_seed_same_screenshots(tmp_path):
    """Two runs of one seed give byte-identical screenshots, on the pages that show what the episode made
    (a new user's date joined and password hash) and the changelist whose buttons' shaded edges a partial
    re-raster used to vary (collect.CHROMIUM_ARGS)."""
    tasks = "create-staff-user,close-ticket"
    for k in (1, 2):
        run(tmp_path / f"run{k}", "--tasks", tasks, "--episodes", "1", "--seed", "1000")
    assert_same_screenshots(tmp_path / "run1", tmp_path / "run2", min_steps=10)


def test_evaluators_fail_on_untouched_database(tmp_path, monkeypatch):
    """Doing nothing fails every task judged (conftest.tasks_to_judge), on two seeds (a `pick` whose row
    already passes would show)."""
    for template in experts.EXPERTS:
        monkeypatch.setitem(experts.EXPERTS, template, do_nothing)
    tasks = tasks_to_judge(suite)
    summary = run(tmp_path, "--tasks", ",".join(tasks), "--episodes", "2", "--seed", str(UNSEEN_SEEDS[0]),
                  "--workers", "2")
    assert summary["episodes"] == 2 * len(tasks) and summary["errors"] == 0
    for ep in metrics.load_dataset(tmp_path):
        assert [s["action"]["op"] for s in ep["steps"]] == ["stop"]
        assert ep["success"] is False and ep["reward"] == 0.0, ep["task"]


def test_random_policy_almost_never_succeeds(tmp_path):
    """Random clicks and words: the login form alone stops it; a suite a random policy solved would be too easy."""
    tasks = tasks_to_run(suite, also=CHECKED)
    summary = run(tmp_path, "--tasks", ",".join(tasks), "--episodes", "1", "--seed", str(UNSEEN_SEEDS[1]),
                  "--workers", "2", "--policy", "random", "--max-steps", "6")
    assert summary["episodes"] == len(tasks) and summary["errors"] == 0
    assert summary["success_rate"] <= 0.05


@pytest.mark.parametrize("n_kills", [1, 2])
def test_killed_server_is_restarted(tmp_path, monkeypatch, started, n_kills):
    """Killed once: the episode is retried in a fresh context on a restarted server and succeeds.
    Killed on both tries: the episode is recorded as an error, and the next one runs on a restarted server."""
    task, template = "update-customer-contact", "edit-customer"
    kills = [n_kills]
    monkeypatch.setitem(experts.EXPERTS, template, killing(experts.EXPERTS[template], kills, started))
    summary = run(tmp_path, "--tasks", task, "--episodes", "2", "--seed", str(UNSEEN_SEEDS[0]))
    assert kills == [0] and summary["episodes"] == 2
    eps = {e["seed"]: e for e in metrics.load_dataset(tmp_path, check_images=True)}   # the dataset stays valid
    first, second = eps[UNSEEN_SEEDS[0]], eps[UNSEEN_SEEDS[0] + 1]
    retries = first["meta"]["retries"]   # the retry leaves a trace: which tries failed, and why
    assert [r["try"] for r in retries] == list(range(1, n_kills + 1))
    assert all("ConnectionError" in r["error"] and "died" in r["error"] for r in retries)
    if n_kills == 1:
        assert first["success"] and first["error"] is None
    else:
        assert not first["success"] and "ConnectionError" in first["error"] and "died" in first["error"]
    assert second["success"] and second["error"] is None and "retries" not in second["meta"]
    assert len(started) == 1 + n_kills and len({s.port for s in started}) == 1   # restarted on its own port


def test_a_slow_first_build_is_not_a_reset_timeout(tmp_path, monkeypatch, started):
    """A seed's database is built and the server started before the reset's time limit (three action
    timeouts) starts: a build longer than that limit is waited for, never an error or a retry."""
    from envs import django_suite
    build, builds = django_suite.build_db, []

    def slow_build(*args, **kw):
        time.sleep(10)   # longer than two tries of the reset
        builds.append(args[2])
        return build(*args, **kw)
    monkeypatch.setattr(django_suite, "build_db", slow_build)
    monkeypatch.setitem(experts.EXPERTS, "close-ticket", do_nothing)
    seed = UNSEEN_SEEDS[1] + 10
    summary = run(tmp_path, "--tasks", "close-ticket", "--episodes", "1", "--seed", str(seed),
                  "--action-timeout", "1.5")
    assert summary["episodes"] == 1 and summary["errors"] == 0
    assert builds == [seed] and len(started) == 1


def test_a_dropped_context_gives_its_server_back():
    """The worker detaches a context it drops (its close may have failed or timed out, so the close
    event never came): the next context of that worker reuses the server instead of starting one."""
    import asyncio

    class Ctx:  # the one thing attach() asks of a Playwright context
        def on(self, event, fn):
            self.on_close = fn

    env = suite.Backoffice()
    a = Ctx()
    asyncio.run(env.attach(a))
    server = env.servers[a]
    env.detach(a)
    env.detach(a)
    a.on_close(None)  # a close event arriving after all changes nothing
    b = Ctx()
    asyncio.run(env.attach(b))
    assert env.servers[b] is server and env.idle == [] and len(env.origins) == 1
