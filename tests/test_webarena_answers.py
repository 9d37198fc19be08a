"""Answers (issue 13 item 5): stop() takes a bare number; an episode at the step limit is scored with WebArena's
early-stop text; a person recording with --policy human answers and stops through the answer box (Xvfb)."""
import asyncio

import pytest
from test_webarena_suite import site, task, write  # noqa: F401 -- site: the fixture

import collect
import metrics
from envs import webarena


@pytest.mark.parametrize("text, value", [
    ("stop(6)", "6"), ("stop( -6.50 )", "-6.50"), ('stop("6")', "6"), ("stop()", ""), ('stop("N/A")', "N/A"),
    ("stop(6, 7)", None), ('stop(6, "x")', None), ("stop(six)", None)])
def test_stop_takes_a_bare_number(text, value):
    action = metrics.parse_action(text, "som", (100, 100))
    assert (action and action["value"]) == value if value is not None else action is None
    if value:   # written back in the grammar's quoted form
        assert metrics.parse_action(metrics.format_action(action, "som", (1, 1)), "som", (1, 1)) == action


class Answers:
    """An environment that records the answer each evaluation is given."""
    judge_s = 0.0

    def __init__(self):
        self.answers = []

    async def evaluate(self, page, task, fields, answer):
        self.answers.append(answer)
        return 0.0, False


def step(op, value, **kw):
    return {"action": metrics.make_action(op, value=value), **kw}


def test_the_step_limit_is_scored_with_webarenas_early_stop_text():
    env = Answers()
    runs = [[step("click", None)] * 3,   # the loop ran out
            [step("click", None), step("stop", "1999")],
            [step("stop", "")],
            [step("click", None), step("stop", None, exec_error=metrics.UNPARSEABLE)]]   # unparseable, then the end
    for steps in runs:
        asyncio.run(collect.judge(env, None, "t", None, steps, 1.0))
    assert env.answers == ["Early stop: Reach max steps 3", "1999", "", "Early stop: Reach max steps 2"]


def test_collect_scores_the_early_stop_text(tmp_path, site):  # noqa: F811 -- site: the fixture
    """WebArena scores its early-stop text as the answer: a reference it contains passes."""
    tasks = [task(1, "x", eval_types=["string_match"], reference_answers={"must_include": ["reach max steps 2"]}),
             task(2, "x", eval_types=["string_match"], reference_answers={"exact_match": "1999"})]
    summary = collect.main(["--suite", "webarena", "--task-file", write(tmp_path, tasks), "--sites", f"shop={site}",
                            "--policy", "random", "--episodes", "1", "--max-steps", "2",
                            "--out", str(tmp_path / "out"), "--no-progress"])
    assert summary["errors"] == 0 and {t: v["success"] for t, v in summary["by_task"].items()} == {"1": 1.0, "2": 0.0}


def test_a_person_answers_and_stops(tmp_path, site, display):  # noqa: F811 -- site: the fixture
    """In a headed browser on Xvfb (trusted input through CDP): a click, then Ctrl+Shift+S opens the answer box;
    what is typed there and Escape leave no step; typed again and Enter, it is the episode's stop(answer),
    scored by the task's string_match."""
    env = webarena.WebArena(write(tmp_path, [task(2, "In which year was the shop founded?", eval_types=[
        "string_match"], reference_answers={"exact_match": "1999"})]), [f"shop={site}"])

    async def scenario():
        from playwright.async_api import async_playwright
        async with async_playwright() as pw:
            chromium = collect.find_chromium(pw.chromium.executable_path)
            browser = await pw.chromium.launch(headless=False, executable_path=chromium)
            ctx, page = await collect.new_page(browser, env, [])
            policy = collect.HumanPolicy(poll_s=0.02)

            async def listening(url_part):
                while True:   # until the recorder listens on the page (it may still be loading)
                    try:
                        if url_part in page.url and await page.evaluate("!!window.__magHuman"):
                            return
                    except Exception:  # noqa: BLE001 -- a navigation destroyed the context
                        pass
                    await asyncio.sleep(0.02)

            async def person():
                await listening("/")
                box = await page.locator("#contact").bounding_box()
                await page.mouse.click(box["x"] + 5, box["y"] + 5)
                await listening("/form")
                await page.keyboard.press("Control+Shift+S")
                await page.wait_for_function("document.activeElement && !!window.__magHuman.box")
                await page.keyboard.type("no idea")
                await page.keyboard.press("Escape")
                await page.wait_for_function("!window.__magHuman.box")
                await page.keyboard.press("Control+Shift+S")
                await page.wait_for_function("!!window.__magHuman.box")
                await page.keyboard.type(" '1999' ")
                await page.keyboard.press("Enter")
            helper = asyncio.create_task(person())
            ep = await asyncio.wait_for(collect.run_episode(page, env, "2", 0, policy, out=str(tmp_path), blocked=[],
                                                            policy_name="human", **collect.RUN_DEFAULTS), 60)
            await helper
            await browser.close()
            return ep
    ep = asyncio.run(scenario())
    assert [(s["action"]["op"], s["action"]["value"]) for s in ep["steps"]] == [("click", None), ("stop", " '1999' ")]
    assert ep["success"] and ep["steps"][1]["url"] == "__SHOP__/form"
    assert not any("Answer, then Enter" in e["text"] for s in ep["steps"] for e in s["elements"])
