"""envs/verified_judge.py -- WebArena-Verified's own evaluator, called on our episodes: JSON in, JSON out.

Run by envs/webarena.py with the python of the judge's venv (`make verified` builds .venv-verified: the
package pins pydantic and python-dateutil older than .venv's, so it cannot join .venv). This file imports
only the standard library and the package; nothing here re-implements a rule of the package.

    .venv-verified/bin/python envs/verified_judge.py < request.json > reply.json

The request: {"tasks": the Verified tasks to judge, as their file holds them, "sites": {"__GITLAB__":
"http://host:8023", ...}, and either "episodes": [{"task_id": 44, "answer": the stop() text or null, "trace": a
HAR path or null}, ...] or "check": true}.
The reply to episodes: {"version": the package's, "results": [one per episode, in order: {"task_id", "status"
("success" | "failure" | "error"), "score", "error", "evaluators": [{"name", "status", "score", "error"}]}]}.
The reply to a check: {"version", "refused": {task_id: the package's reason it cannot read the task},
"cannot_judge": {task_id: the package's error on the task's own expected answer}}.
The package's logging and prints go to stderr, so stdout holds the reply alone.
"""
import contextlib
import json
import logging
import sys
import tempfile
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path

# what makes a task the package's own: the hard subset's file (webarna-verfied-hard.json) holds the same tasks as
# the full dataset with other expected answers ("error_details": null, which the package's comparison cannot
# read); the package judges its subsets through the full dataset, and so does this judge
SAME_TASK = ("task_id", "intent", "start_urls", "sites")


def own_tasks():
    """The package's full dataset by task id."""
    with open(files("webarena_verified") / "assets" / "dataset" / "webarena-verified.json") as f:
        return {t["task_id"]: t for t in json.load(f)}


def readable(tasks):
    """(task_id -> the task the package judges: its own version when it is one of the package's, task_id -> why
    the package cannot read it). Each task alone: one malformed task never sinks the others."""
    from webarena_verified.types.task import WebArenaVerifiedTask
    own = own_tasks()
    good, bad = {}, {}
    for t in tasks:
        mine = own.get(t.get("task_id")) if isinstance(t, dict) else None
        if mine and all(mine.get(k) == t.get(k) for k in SAME_TASK):
            t = mine
        try:
            WebArenaVerifiedTask.model_validate(t)
            good[t["task_id"]] = t
        except Exception as e:  # noqa: BLE001 -- pydantic's and the package's own checks: the task's reason
            text = str(e).split("\n    For further information")[0]   # pydantic's link to its docs dropped
            bad[t.get("task_id") if isinstance(t, dict) else None] = " ".join(text.split())[:300]
    return good, bad


def evaluator(tasks, sites, folder):
    """The package's evaluator over `tasks` (a file of them in `folder`, read through the package's subset
    mechanism, TaskSubset: its reader then takes a file of fewer than all 812 tasks)."""
    from webarena_verified.api.internal.data_reader import WebArenaVerifiedDataReader
    from webarena_verified.api.internal.evaluator import WebArenaVerifiedEvaluator
    from webarena_verified.types.config import WebArenaVerifiedConfig
    from webarena_verified.types.data import TaskSubset
    path = Path(folder) / "tasks.json"
    path.write_text(json.dumps(list(tasks.values())))
    environments = {site: {"urls": [url]} for site, url in sites.items()}
    config = WebArenaVerifiedConfig(test_data_file=path, environments=environments or None)
    ids = list(tasks)
    reader = WebArenaVerifiedDataReader(config, subset=TaskSubset(task_ids=ids,
                                                                  checksum=TaskSubset.compute_checksum(ids)))
    return WebArenaVerifiedEvaluator(config=config, reader=reader)


def judge(request):
    from webarena_verified.types.tracing import NetworkTrace
    good, bad = readable(request["tasks"])
    # no trace recorded: an empty one (the package takes no None and no empty list; a network check then fails)
    empty = NetworkTrace.model_construct(is_playwright=False, src_file=Path("<none>"), events=())
    with tempfile.TemporaryDirectory(prefix="mag-verified-") as folder:
        wa = evaluator(good, request["sites"], folder) if good else None
        if request.get("check"):   # the task's own expected answer, no trace: an error is the package's defect
            results = {i: wa.evaluate_task(task_id=i, agent_response=json.dumps(t["eval"][0].get("expected")),
                                           network_trace=empty) for i, t in good.items()}
            cannot = {i: reason(r.model_dump(mode="json")) for i, r in results.items() if r.status == "error"}
            return {"version": version("webarena-verified"), "refused": bad, "cannot_judge": cannot}
        results = []
        for ep in request["episodes"]:
            task_id = int(ep["task_id"])
            if task_id not in good:
                results.append({"task_id": task_id, "status": "error", "score": 0.0, "evaluators": [],
                                "error": bad.get(task_id, f"task {task_id} is not among the tasks sent")})
                continue
            trace = Path(ep["trace"]) if ep.get("trace") else empty
            result = wa.evaluate_task(task_id=task_id, agent_response=ep.get("answer"), network_trace=trace)
            results.append(summary(result.model_dump(mode="json")))
    return {"version": version("webarena-verified"), "results": results}


def reason(result):
    """Why the package's result is an error: its own message, else its first evaluator's, without the package's
    preamble ("Error during evaluation with evaluator X for task N: "), the evaluator's name kept."""
    for r in [{"error_msg": result.get("error_msg")}] + (result.get("evaluators_results") or []):
        msg = r.get("error_msg")
        if msg:
            name = r.get("evaluator_name")
            msg = msg.split(": ", 1)[1] if msg.startswith("Error during evaluation") and ": " in msg else msg
            return f"{name}: {msg}" if name else msg
    return None


def summary(result):
    """The package's TaskEvalResult, as JSON, cut to what a run records; an error always has its reason."""
    evaluators = [{"name": r.get("evaluator_name"), "status": r.get("status"), "score": r.get("score"),
                   "error": r.get("error_msg")} for r in result.get("evaluators_results") or []]
    return {"task_id": result["task_id"], "status": result["status"], "score": result["score"],
            "error": reason(result), "evaluators": evaluators}


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    request = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):
        reply = judge(request)
    json.dump(reply, sys.stdout)
