"""experiments/live_faults.py: the copy share and the stuck episodes, counted by hand on made-up runs."""
import os
import sys

import metrics

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments"))
import live_faults  # noqa: E402


def act(op, mark=None, value=None, error=None):
    step = {"action": {"op": op, "mark": mark, "point": None, "value": value}}
    return step | ({"exec_error": error} if error else {})


def test_copied_values_and_stuck_episodes():
    eps = [{"instruction": 'Enter the username "kasie".', "success": False,   # types a remembered name
            "steps": [act("type", 1, "michel"), act("click", 2), act("click", 2), act("click", 2)]},
           {"instruction": 'Enter the username "kasie".', "success": True,
            "steps": [act("type", 1, "kasie"), act("click", 2), act("click", 3), act("click", 2)]},
           {"instruction": "Click OK.", "success": False,   # two unparseable replies between the clicks: no run
            "steps": [act("click", 4), act("stop", value="", error=metrics.UNPARSEABLE),
                      act("stop", value="", error=metrics.UNPARSEABLE), act("click", 4), act("click", 4)]}]
    r = live_faults.faults(eps)
    assert (r["episodes"], r["typed"], r["copied"]) == (3, 2, 0.5)
    assert r["stuck"] == 1 / 3 and r["success"] == 1 / 3 and r["invalid"] == 2 / 13
    assert live_faults.stuck([act("click", 4)] * 3) and not live_faults.stuck([act("click", 4)] * 2)
    assert live_faults.faults([{"instruction": "x", "success": True, "steps": [act("click", 1)]}])["copied"] is None
