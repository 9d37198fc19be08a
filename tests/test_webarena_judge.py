"""The LLM judge of WebArena's fuzzy_match (envs/webarena.py, issue 13 item 3), against a fake OpenAI-compatible
endpoint (conftest.FakeAPI on 127.0.0.1): the verdict rules, what is asked, "N/A" first, retries, the refusal
without a judge, `--check` counting, and a whole collect.py run whose answer the judge scores."""
import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import FakeAPI
from test_webarena_suite import ANSWER, GREET, SHOP, site, task, write  # noqa: F401 -- site: the fixture

import collect
import metrics
from envs import webarena

KEY = "sk-judge-5Hq8Zr2Lx7"
ROUTE = task(8, "How long does it take to walk from CMU to Pitt?", eval_types=["string_match"],
             reference_answers={"fuzzy_match": ["walking: 16min"]})
NOPE = task(22, "Tell me the reviewers who mention under water photos", eval_types=["string_match"],
            reference_answers={"fuzzy_match": "N/A"}, string_note="There is no review about under water photo")


@pytest.mark.parametrize("reply, verdict", [
    ("The student answer is correct.", True), ("CORRECT", True), ("Judgement: Correct", True),
    ("incorrect", False), ("The answer is partially correct.", False),
    ("It is correct in part but incorrect overall", False),   # "incorrect" anywhere fails
    ("I cannot tell.", None), ("", None),
])
def test_fuzzy_verdict(reply, verdict):
    assert webarena.fuzzy_verdict(reply) is verdict


@pytest.mark.parametrize("reply, verdict", [
    ("same", True), ("The reasons are the SAME.", True), ("different", False),
    ("not the same, different", False), ("maybe", None)])
def test_unachievable_verdict(reply, verdict):
    assert webarena.ua_verdict(reply) is verdict


def judged(script, refs, answer, note=None, intent="the question", retries=1):
    """string_match with a Judge on a FakeAPI playing `script` -> (verdict or the error, the requests)."""
    api = FakeAPI(script, key=KEY)
    try:
        judge = webarena.Judge(api.base, "judge-m", KEY, timeout=2.0, retries=retries, backoff=0.01)
        return webarena.string_match(refs, answer, intent, note, judge), api.requests
    except (webarena.JudgeError, metrics.ApiError) as e:
        return e, api.requests
    finally:
        api.close()


def test_fuzzy_match_asks_the_judge_about_each_reference():
    ok, seen = judged(["Correct.", "correct"], {"fuzzy_match": ["driving: 2min", "walking: 16min"]},
                      ' "Driving 2 min, walking 16 min" ', intent="How long from CMU to Pitt?")
    assert ok is True and len(seen) == 2 and seen[0]["auth"] == f"Bearer {KEY}"
    body = seen[0]["body"]
    assert body["model"] == "judge-m" and body["temperature"] == 0 and body["max_tokens"] == 768
    system, user = body["messages"]
    assert system == {"role": "system", "content": "You are a helpful assistant"}
    # the question, the reference, and the prediction as WebArena passes it: cleaned (unquoted, lowercased)
    assert "question: How long from CMU to Pitt?" in user["content"]
    assert "reference answer: driving: 2min" in user["content"]
    assert "student answer: driving 2 min, walking 16 min\n" in user["content"]
    assert "reference answer: walking: 16min" in seen[1]["body"]["messages"][1]["content"]
    ok, seen = judged(["correct", "Partially correct"], {"fuzzy_match": ["a", "b"]}, "x")
    assert ok is False and len(seen) == 2
    ok, seen = judged(["incorrect"], {"fuzzy_match": ["a", "b"]}, "x")
    assert ok is False and len(seen) == 1   # the score is 0 already: the second verdict cannot change it
    ok, seen = judged([], {"exact_match": "y", "fuzzy_match": ["a"]}, "x")
    assert ok is False and seen == []


def test_na_is_an_exact_match_first_then_the_reason_is_judged():
    refs, note = {"fuzzy_match": "N/A"}, "There is no review about under water photo"
    assert judged([], refs, ' "n/a" ', note) == (True, [])   # the exact "N/A": nobody is asked
    ok, seen = judged(["Same."], refs, "N/A: no review mentions under water photos", note, intent="Find reviewers")
    assert ok is True and len(seen) == 1
    prompt = seen[0]["body"]["messages"][1]["content"]
    assert "task: Find reviewers\n" in prompt and f"actual unachievable reason: {note}\n" in prompt
    assert "reported unachievable reason: n/a: no review mentions under water photos\n" in prompt
    assert judged(["different"], refs, "Ada and Bob", note)[0] is False
    # WebArena REPLACES the score so far with the judge's verdict: an earlier failed check no longer counts
    assert judged(["same"], {"must_include": ["zzz"], "fuzzy_match": "N/A"}, "it cannot be done", note)[0] is True
    # ... but a check after it still multiplies in
    assert judged(["same"], {"fuzzy_match": "N/A", "must_include": ["zzz"]}, "it cannot be done", note)[0] is False
    # without a judge, only the exact "N/A" passes (WebArena would ask the judge)
    assert webarena.string_match(refs, "N/A") is True and webarena.string_match(refs, "it cannot be done") is False


def test_the_judge_retries_then_names_what_failed():
    ok, seen = judged([500, "correct"], {"fuzzy_match": ["a"]}, "x")   # a server error: retried by the client
    assert ok is True and len(seen) == 2
    ok, seen = judged(["I am not sure.", "correct"], {"fuzzy_match": ["a"]}, "x")   # no verdict: asked again
    assert ok is True and len(seen) == 2
    err, seen = judged([f"hmm {KEY}", "no idea"], {"fuzzy_match": ["a"]}, "x")
    assert isinstance(err, webarena.JudgeError) and len(seen) == 2
    assert "gave no verdict in 2 replies" in str(err) and "no idea" in str(err) and KEY not in str(err)
    err, seen = judged([401], {"fuzzy_match": ["a"]}, "x")   # a 4xx is not retried
    assert isinstance(err, metrics.ApiError) and "HTTP 401" in str(err) and len(seen) == 1


def test_a_judge_makes_fuzzy_tasks_runnable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    no_note = {**NOPE, "task_id": 23, "eval": {k: v for k, v in NOPE["eval"].items() if k != "string_note"}}
    path = write(tmp_path, [GREET, ROUTE, NOPE, no_note])
    env = webarena.WebArena(path, SHOP)
    assert env.all_tasks() == ["1", "22", "23"] and list(env.refused) == ["8"] and env.judge_s == 0
    judge = webarena.Judge("http://127.0.0.1:1/v1", "m", timeout=5, retries=1, backoff=1)
    env = webarena.WebArena(path, SHOP, judge=judge)
    assert env.all_tasks() == ["1", "8", "22"]
    assert env.refused == {"23": 'fuzzy_match "N/A" needs eval.string_note (the reason the judge compares an '
                                 "answer's with)"}
    assert env.judge_s == judge.worst_s == 2 * (5 * 2 + 1 * 2)
    bad = task(9, "x", eval_types=["string_match"], reference_answers={"fuzzy_match": "a"})
    env = webarena.WebArena(write(tmp_path, [GREET, bad]), SHOP, judge=judge)
    assert env.refused == {"9": 'reference_answers.fuzzy_match must be "N/A" or a non-empty list of strings'}


def test_check_counts_fuzzy_tasks_with_a_judge(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, [GREET, ANSWER, ROUTE, NOPE])
    argv = ["--suite", "webarena", "--check", "--task-file", path, "--sites", SHOP[0], "--out", "x"]
    for extra, line in (([], f"{path}: 4 tasks, 3 runnable, 1 refused"),
                        (["--judge-api-base", "http://127.0.0.1:1/v1", "--judge-model", "m"],
                         f"{path}: 4 tasks, 4 runnable, 0 refused")):
        with pytest.raises(SystemExit) as e:
            collect.main(argv + extra)
        assert e.value.code == 0 and capsys.readouterr().out.splitlines()[0] == line
    with pytest.raises(SystemExit, match="--judge-api-base and --judge-model go together"):
        collect.main(argv + ["--judge-model", "m"])
    out = subprocess.run([sys.executable, "-m", "envs.webarena", "--check", "--task-file", path, "--sites", SHOP[0],
                          "--judge-api-base", "http://127.0.0.1:1/v1", "--judge-model", "m"],
                         capture_output=True, text=True, cwd=os.path.dirname(collect.__file__))
    assert out.returncode == 0 and out.stdout.splitlines()[0] == f"{path}: 4 tasks, 4 runnable, 0 refused"


def test_collect_scores_answers_with_the_judge(tmp_path, site, monkeypatch):  # noqa: F811 -- site: the fixture
    """A whole run: the judge's key comes from --judge-key-env; its verdict is the episode's success; a judge
    slower than the action timeout still answers (the evaluation's time limit grows by the judge's worst
    case); a judge with no verdict is the episode's error, not a silent failure."""
    calls = []

    def slow_correct(body):
        calls.append(body["messages"][1]["content"])
        time.sleep(2.5)   # longer than --action-timeout below
        return "correct"
    api = FakeAPI([slow_correct, "incorrect", "no idea", "no idea"], key=KEY)
    route = {**ROUTE, "start_url": "__SHOP__/about"}
    answers = {"8": "walking: 16 minutes", "9": "by bus", "10": "who knows"}
    path = write(tmp_path, [{**route, "task_id": t} for t in answers])

    def scripted(name, env, task_, seed):
        policy = collect.ExpertPolicy(task_, None)

        async def stop():
            yield collect.envs.Move("stop", value=answers[task_])
        policy.moves = stop()
        return policy
    monkeypatch.setattr(collect, "make_policy", scripted)
    monkeypatch.setenv("MY_JUDGE_KEY", KEY)
    try:
        summary = collect.main(["--suite", "webarena", "--task-file", path, "--sites", f"shop={site}",
                                "--judge-api-base", api.base, "--judge-model", "m", "--judge-key-env", "MY_JUDGE_KEY",
                                "--policy", "random", "--episodes", "1", "--action-timeout", "2",
                                "--out", str(tmp_path / "out"), "--no-progress"])
    finally:
        api.close()
    eps = {e["task"]: e for e in map(json.loads, open(tmp_path / "out" / "episodes.jsonl"))}
    assert {t: (e["success"], e["error"]) for t, e in eps.items()} == {
        "8": (True, None), "9": (False, None),
        "10": (False, f"JudgeError: the judge (m at {api.base}) gave no verdict in 4 replies; the last: 'lol ok'")}
    assert summary["errors"] == 1 and "student answer: walking: 16 minutes\n" in calls[0]
    assert all(r["auth"] == f"Bearer {KEY}" for r in api.requests)


def test_evaluate_config_runs_the_judge_in_a_thread():
    """The judge's blocking request must not stop the event loop (other workers' pages go on)."""
    api = FakeAPI([lambda body: time.sleep(0.6) or "correct"])
    judge = webarena.Judge(api.base, "m", retries=0)
    ticks, done = [], []

    async def main():
        async def tick():
            for _ in range(20):
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.05)

        async def judged_():
            ev = {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["a"]}}
            got = await webarena.evaluate_config(ev, None, "a", "q", judge)
            done.append(time.perf_counter())
            return got
        got, _ = await asyncio.gather(judged_(), tick())
        return got
    try:
        assert asyncio.run(main()) == [("string_match", True)]
    finally:
        api.close()
    assert sum(t < done[0] for t in ticks) >= 5   # the ticks went on while the judge was answering


def test_evaluate_pins_the_judge_in_its_run(tmp_path, site):  # noqa: F811 -- site: the fixture
    """evaluate.py records the judge in run.json: a rerun with another judge (or none) into the same --out
    would mix two scorings, so it is refused."""
    import evaluate
    argv = ["--suite", "webarena", "--task-file", write(tmp_path, [GREET]), "--sites", f"shop={site}",
            "--policy", "random", "--episodes", "1", "--max-steps", "1", "--out", str(tmp_path / "ev"),
            "--no-progress"]
    judge = ["--judge-api-base", "http://127.0.0.1:1/v1", "--judge-model", "m"]
    assert evaluate.main(argv + judge)["episodes"] == 1
    assert json.load(open(tmp_path / "ev" / "run.json"))["judge_model"] == "m"
    with pytest.raises(SystemExit, match="judge_api_base: 'http://127.0.0.1:1/v1' -> None; judge_model: 'm' -> None"):
        evaluate.main(argv)
