"""collect.py --suite backoffice: Django's admin served live, task templates, experts, evaluators,
one server per worker, and a server that dies mid-episode."""
import importlib.util
import os
import signal

import pytest

import collect
import metrics

pytestmark = pytest.mark.skipif(importlib.util.find_spec("django") is None, reason="needs django (requirements.txt)")

UNSEEN_SEEDS = (900, 901)   # the experts were written on seeds 0..12


@pytest.fixture(scope="module", autouse=True)
def cache_home(tmp_path_factory):
    """Seeded databases are cached under $XDG_CACHE_HOME: a fresh one here, shared by this module."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture
def started(monkeypatch):
    """Every DjangoServer.start() call, as the server it started."""
    servers, start = [], collect.DjangoServer.start

    def spy(self):
        start(self)
        servers.append(self)
    monkeypatch.setattr(collect.DjangoServer, "start", spy)
    return servers


def run(out, *argv):
    return collect.main(["--suite", "backoffice", "--out", str(out), "--no-progress", *argv])


def test_experts_succeed_in_parallel_workers(tmp_path, started):
    """Every template's expert on unseen seeds, two workers: each worker has its own server and
    database (the evaluators also count rows the task must not touch, so a leak would fail them)."""
    summary = run(tmp_path, "--tasks", "all", "--episodes", str(len(UNSEEN_SEEDS)), "--seed", str(UNSEEN_SEEDS[0]),
                  "--workers", "2")
    assert summary["by_task"].keys() == collect.BACKOFFICE_EXPERTS.keys() and len(collect.BACKOFFICE_EXPERTS) >= 4
    assert summary["errors"] == 0
    failed = {t: v for t, v in summary["by_task"].items() if v["success"] < 1}
    assert not failed, failed
    assert len({s.port for s in started}) == 2   # one server per worker, each started once
    eps = metrics.load_dataset(tmp_path, check_images=True)
    for ep in eps:
        assert ep["start_url"] == "__BACKOFFICE__/admin/" and ep["viewport"] == [1280, 800]
        assert 3 <= len(ep["steps"]) <= 20 and "login" in ep["steps"][0]["url"]
        assert all("127.0.0.1" not in s["url"] for s in ep["steps"])   # the port never reaches the data
        assert not ep["meta"]["blocked"]
        for s in ep["steps"]:
            a = s["action"]
            if a["op"] in metrics.ELEMENT_OPS:   # every target is one of the marks, its point inside its box
                el = next(e for e in s["elements"] if e["mark"] == a["mark"])
                assert metrics.in_box(a["point"], el["bbox"]), (ep["id"], s["step"])
    answers = [ep["steps"][-1]["action"]["value"] for ep in eps if ep["task"] == "count-unpaid-orders"]
    assert all(a and a.isdigit() for a in answers)


async def do_nothing(page, instruction):
    return
    yield   # an async generator with no moves: the policy stops at once, with no answer


def test_evaluators_fail_on_untouched_database(tmp_path, monkeypatch):
    for task in collect.BACKOFFICE_EXPERTS:
        monkeypatch.setitem(collect.BACKOFFICE_EXPERTS, task, do_nothing)
    summary = run(tmp_path, "--tasks", "all", "--episodes", "1", "--seed", str(UNSEEN_SEEDS[0]), "--workers", "2")
    assert summary["episodes"] == len(collect.BACKOFFICE_EXPERTS) and summary["errors"] == 0
    for ep in metrics.load_dataset(tmp_path):
        assert [s["action"]["op"] for s in ep["steps"]] == ["stop"]
        assert ep["success"] is False and ep["reward"] == 0.0, ep["task"]


def killing(expert, kills, servers):
    """The expert, but before its 4th move (the first click after logging in) the suite's server is
    SIGKILLed, `kills[0]` times in all."""
    async def solve(page, instruction):
        async for k, move in aenumerate(expert(page, instruction)):
            if k == 3 and kills[0] > 0:
                kills[0] -= 1
                for s in servers:
                    if s.alive():
                        os.kill(s.proc.pid, signal.SIGKILL)
                        s.proc.wait()
            yield move
    return solve


async def aenumerate(agen):
    k = 0
    async for x in agen:
        yield k, x
        k += 1


@pytest.mark.parametrize("n_kills", [1, 2])
def test_killed_server_is_restarted(tmp_path, monkeypatch, started, n_kills):
    """Killed once: the episode is retried in a fresh context on a restarted server and succeeds.
    Killed on both tries: the episode is recorded as an error, and the next one runs on a restarted server."""
    task = "update-customer-contact"
    kills = [n_kills]
    monkeypatch.setitem(collect.BACKOFFICE_EXPERTS, task, killing(collect.BACKOFFICE_EXPERTS[task], kills, started))
    summary = run(tmp_path, "--tasks", task, "--episodes", "2", "--seed", str(UNSEEN_SEEDS[0]))
    assert kills == [0] and summary["episodes"] == 2
    eps = {e["seed"]: e for e in metrics.load_dataset(tmp_path, check_images=True)}   # the dataset stays valid
    first, second = eps[UNSEEN_SEEDS[0]], eps[UNSEEN_SEEDS[0] + 1]
    if n_kills == 1:
        assert first["success"] and first["error"] is None
    else:
        assert not first["success"] and "ConnectionError" in first["error"] and "died" in first["error"]
    assert second["success"] and second["error"] is None
    assert len(started) == 1 + n_kills and len({s.port for s in started}) == 1   # restarted on its own port
