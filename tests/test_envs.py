"""envs/: the environment interface, through collect.run_episodes -- README's example site."""
import asyncio

import collect
import envs
import metrics


def test_example_site_runs_through_run_episodes(tmp_path):
    """README's "Add your own site": one episode of envs/example.py with its expert, one with a policy
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
    for name in ("miniwob", "backoffice", "example"):
        env = collect.make_env(name)
        try:
            assert isinstance(env, envs.Environment) and env.suite == name and env.all_tasks()
            assert all(env.expert(t) is not None for t in env.all_tasks())
        finally:
            env.close()
