"""envs/verified_judge.py -- WebArena-Verified's own evaluator, called on our episodes: JSON in, JSON out.

Run by envs/webarena.py with the python of the judge's venv (`make verified` builds .venv-verified: the
package pins pydantic and python-dateutil older than .venv's, so it cannot join .venv). This file imports
only the standard library and the package; nothing here re-implements a rule of the package.

    .venv-verified/bin/python envs/verified_judge.py < request.json > results.json

The request: {"task_file": path of the Verified task file, "sites": {"__GITLAB__": "http://host:8023", ...},
"episodes": [{"task_id": 44, "answer": the stop() text or null, "trace": a HAR path or null}, ...]}.
The reply: {"version": the package's, "results": [one per episode, in order: {"task_id", "status"
("success" | "failure" | "error"), "score", "error", "evaluators": [{"name", "status", "score", "error"}]}]}.
The package's logging and prints go to stderr, so stdout holds the reply alone.
"""
import contextlib
import json
import logging
import sys
from importlib.metadata import version
from pathlib import Path


def evaluator(task_file, sites):
    """The package's evaluator over the task file. Its facade, WebArenaVerified(config=...), reads only a file of
    all 812 tasks; the same evaluator over any file of its format (the hard subset's, one's own) is its reader
    given the file's task ids as a subset (TaskSubset), which is what the facade builds on."""
    from webarena_verified.api.internal.data_reader import WebArenaVerifiedDataReader
    from webarena_verified.api.internal.evaluator import WebArenaVerifiedEvaluator
    from webarena_verified.types.config import WebArenaVerifiedConfig
    from webarena_verified.types.data import TaskSubset
    environments = {site: {"urls": [url]} for site, url in sites.items()}
    config = WebArenaVerifiedConfig(test_data_file=Path(task_file), environments=environments or None)
    with open(task_file) as f:
        ids = [t["task_id"] for t in json.load(f)]
    reader = WebArenaVerifiedDataReader(config, subset=TaskSubset(task_ids=ids,
                                                                  checksum=TaskSubset.compute_checksum(ids)))
    return WebArenaVerifiedEvaluator(config=config, reader=reader)


def judge(request):
    from webarena_verified.types.tracing import NetworkTrace
    wa = evaluator(request["task_file"], request["sites"])
    # no trace recorded: an empty one (the package takes no None and no empty list; a network check then fails)
    empty = NetworkTrace.model_construct(is_playwright=False, src_file=Path("<none>"), events=())
    results = []
    for ep in request["episodes"]:
        trace = Path(ep["trace"]) if ep.get("trace") else empty
        result = wa.evaluate_task(task_id=int(ep["task_id"]), agent_response=ep.get("answer"), network_trace=trace)
        results.append(summary(result.model_dump(mode="json")))
    return {"version": version("webarena-verified"), "results": results}


def summary(result):
    """The package's TaskEvalResult, as JSON, cut to what a run records."""
    evaluators = [{"name": r.get("evaluator_name"), "status": r.get("status"), "score": r.get("score"),
                   "error": r.get("error_msg")} for r in result.get("evaluators_results") or []]
    return {"task_id": result["task_id"], "status": result["status"], "score": result["score"],
            "error": result.get("error_msg"), "evaluators": evaluators}


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    request = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):
        reply = judge(request)
    json.dump(reply, sys.stdout)
