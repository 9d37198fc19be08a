"""envs/: the environment interface, through collect.run_episodes -- docs/environments.md's example site."""
import asyncio
import importlib
import importlib.util
import os

import pytest

import collect
import envs
import metrics


def test_example_site_runs_through_run_episodes(tmp_path):
    """docs/environments.md, "Add your own site": one episode of envs/example.py with its expert, one with a policy
    that stops at once; the page's own end judges the first, the default evaluate() the second."""
    class Stop:   # the most trivial policy: give up at once
        order, grounding, executed = "action_only", "som", False

        async def act(self, obs):
            return "Action: stop()"

    env = collect.make_env("example")
    try:
        make = lambda task, seed: collect.make_policy("expert", env, task, seed) if seed == 3 else Stop()  # noqa: E731
        eps = asyncio.run(collect.run_episodes(env, [("type-word", 3), ("type-word", 4)], make, str(tmp_path),
                                               progress=False))
    finally:
        env.close()
    by_seed = {ep["seed"]: ep for ep in eps}
    assert by_seed[3]["success"] and by_seed[3]["reward"] == 1.0 and by_seed[3]["error"] is None
    assert [s["action"]["op"] for s in by_seed[3]["steps"]] == ["type", "click"]
    assert by_seed[3]["start_url"] == "__EXAMPLE__/" and by_seed[3]["viewport"] == [640, 240]
    assert not by_seed[4]["success"] and [s["action"]["op"] for s in by_seed[4]["steps"]] == ["stop"]
    assert len(metrics.load_dataset(tmp_path, check_images=True)) == 2


def test_flatten_walks_nested_experts_depth_first():
    async def inner(tag):
        yield envs.Move("click", css=tag)
        yield envs.Move("press", value=tag)

    async def outer():
        yield inner("a")
        yield envs.Move("scroll", value="down")
        yield inner("b")

    async def moves():
        return [m async for m in envs.flatten(outer())]
    got = asyncio.run(moves())
    assert [(m.op, m.css or m.value) for m in got] == [("click", "a"), ("press", "a"), ("scroll", "down"),
                                                      ("click", "b"), ("press", "b")]


def test_every_suite_builds_through_make_env():
    for name in ("miniwob", "backoffice", "helpdesk", "shop", "cms", "example"):
        env = collect.make_env(name)
        try:
            assert isinstance(env, envs.Environment) and env.suite == name and env.all_tasks()
            assert all(env.expert(t) is not None for t in env.all_tasks())
        finally:
            env.close()


def test_a_suite_whose_application_is_missing_says_how_to_install_it(monkeypatch):
    """One line naming the suite and the pip command, before anything starts."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wagtail" else find_spec(name, *a))
    with pytest.raises(SystemExit) as e:
        collect.make_env("cms")
    assert str(e.value) == ("the cms suite needs its application, which is not installed: "
                            "pip install 'wagtail>=8.0.1,<8.1' (or pip install -r requirements.txt)")
    for path in collect.DJANGO_SUITES.values():   # the command the message gives is the one we install
        module, name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        with open(os.path.join(os.path.dirname(collect.__file__), cls.requirements)) as f:
            assert cls.app is None or cls.app[1] in f.read().split("\n"), path


def test_a_suite_with_its_own_venv_says_how_to_build_it(monkeypatch):
    """Label Studio runs from .venv-labelstudio: without it, one line naming the make target."""
    from envs.labelstudio import suite
    monkeypatch.setattr(suite.LabelStudio, "python", "/nonexistent/bin/python")
    with pytest.raises(SystemExit, match=r"^the labelstudio suite needs its application, which is not installed: "
                                         r"make labelstudio \(a venv of its own"):
        collect.make_env("labelstudio")


def test_expert_waits_for_a_target_that_comes_late(tmp_path):
    """A slow page: the expert's target appears 1.2 s after the reset. The loop observes again (up to
    three looks) instead of failing, and the recorded step is the observation the move was found on.
    A target that never comes is an error naming it, after the third look."""
    from envs.example import Example

    class Late(Example):
        async def reset(self, page, task, seed):
            out = await super().reset(page, task, seed)
            await page.evaluate("() => setTimeout(() => { const b = document.createElement('button');"
                                " b.id = 'late'; b.textContent = 'Late'; document.body.append(b); }, 1200)")
            return out

        def expert(self, task):
            async def late_then_type(page, instruction):
                yield envs.Move("click", css="#late" if task == "type-word" else "#never")
                yield envs.Move("stop")
            return late_then_type

        def all_tasks(self):
            return ["type-word", "never"]

    env = Late()
    try:
        make = lambda task, seed: collect.make_policy("expert", env, task, seed)  # noqa: E731
        eps = asyncio.run(collect.run_episodes(env, [("type-word", 0), ("never", 0)], make, str(tmp_path),
                                               progress=False))
    finally:
        env.close()
    by_task = {ep["task"]: ep for ep in eps}
    ok = by_task["type-word"]
    assert ok["error"] is None and ok["steps"][0]["action"]["op"] == "click"
    late = [e for e in ok["steps"][0]["elements"] if e["text"] == "Late"]
    assert late and ok["steps"][0]["action"]["mark"] == late[0]["mark"]   # the step shows the target it clicks
    assert by_task["never"]["error"].startswith("NotReady: never: no element for '#never'")
    assert metrics.load_dataset(tmp_path, check_images=True)


def test_a_look_at_the_page_survives_a_navigation_that_began_after_the_settle():
    """A form's submit whose navigation starts only after the settle (two busy cores): the look the navigation
    tore down is taken again once the new page has loaded; any other error passes through."""
    class Page:
        loads = 0

        async def wait_for_load_state(self, state):
            self.loads += 1

    page, looks = Page(), []

    async def look():
        looks.append(page.loads)
        if len(looks) == 1:
            raise RuntimeError("Page.evaluate: Execution context was destroyed, most likely because of a navigation")
        return "the new page"

    async def broken():
        raise RuntimeError("Page.evaluate: TypeError: x is undefined")
    assert asyncio.run(envs.through_navigation(page, look)) == "the new page" and looks == [0, 1]
    with pytest.raises(RuntimeError, match="undefined"):
        asyncio.run(envs.through_navigation(page, broken))
    assert page.loads == 1
