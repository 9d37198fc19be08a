"""experiments/reproduce.py: the --quick study end to end (pipeline, output schema, resume, same bytes on a
rerun), the run scheduler's failure path, and the statistics against hand-computed values."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))
import reproduce  # noqa: E402


def test_interval_hand_computed():
    np = pytest.importorskip("numpy")
    pytest.importorskip("scipy")
    # one seed, items {0, 1}: var of the item means 0.5 / 2 items -> se 0.5, 1 df, t = 12.7062
    ci = reproduce.interval(np.array([[0.0, 1.0]]))
    assert (ci["mean"], ci["lo"], ci["hi"], ci["per_seed"], ci["n"]) == (0.5, -5.8531, 6.8531, [0.5], 2)
    # every seed and item equal: no spread at all
    ci = reproduce.interval(np.full((3, 5), 0.25))
    assert (ci["mean"], ci["lo"], ci["hi"]) == (0.25, 0.25, 0.25)
    # two seeds that disagree (0 and 1 on every item): the seeds alone make the spread, 1 df
    ci = reproduce.interval(np.array([[0.0] * 50, [1.0] * 50]))
    assert (ci["mean"], ci["lo"], ci["hi"], ci["sd_seeds"]) == (0.5, -5.8531, 6.8531, 0.7071)
    # all interaction: residuals +-0.25, mean square 0.25 (1 df) is all of the seed means' variance 0.125
    # (0.125 - 0.25/2 = 0) and the item means' (same); the mean's variance 0.25/(2*2), t(1) * 0.25 = 3.1766
    ci = reproduce.interval(np.array([[1.0, 0.0], [1.0, 1.0]]))
    assert (ci["mean"], ci["lo"], ci["hi"]) == (0.75, -2.4266, 3.9266)
    # all three parts: d = [[0, 0, 1], [1, 1.25, 1.75]]. Seed means 1/3, 4/3 (variance 0.5); item means 0.5,
    # 0.625, 1.375 (variance 0.22396); residuals 0, -+0.125, +-0.125: mean square 0.0625 / 2 df = 0.03125.
    # seed 0.5 - 0.03125/3 = 0.48958 over 2 seeds; item 0.22396 - 0.03125/2 = 0.20833 over 3 items;
    # interaction 0.03125 / 6. Satterthwaite: 0.31944^2 / (0.24479^2/1 + 0.06944^2/2 + 0.00521^2/2) = 1.637
    d = np.array([[0.0, 0.0, 1.0], [1.0, 1.25, 1.75]])
    parts = reproduce.variance_parts(d)
    assert np.allclose([v for v, _ in parts], [0.48958 / 2, 0.20833 / 3, 0.03125 / 6], atol=1e-5)
    assert [k for _, k in parts] == [1, 2, 2]
    assert reproduce.satterthwaite(parts) == pytest.approx(1.637, abs=1e-3)
    # four seeds of that spread: the seed part over 4, 3 df
    assert reproduce.variance_parts(d, 4)[0] == (pytest.approx(0.48958 / 4, abs=1e-5), 3)


def test_seeds_to_decide():
    np = pytest.importorskip("numpy")
    pytest.importorskip("scipy")
    # seed means 0.1, 0.2, 0.3 (sd 0.1), no spread over items: at 3 seeds t(2) 4.303 * 0.1 / sqrt(3) = 0.248
    # does not exclude 0 from a mean of 0.2; at 4 seeds t(3) 3.182 * 0.1 / 2 = 0.159 does
    d = np.array([[0.1] * 10, [0.2] * 10, [0.3] * 10])
    assert reproduce.interval(d)["lo"] < 0 and reproduce.seeds_to_decide(d) == 4
    assert reproduce.decided(d, +1)["seeds_to_decide"] == 4
    assert reproduce.decided(d + 1.0, +1) | {"per_seed": None} == {
        "mean": 1.2, "lo": 0.9516, "hi": 1.4484, "per_seed": None, "n": 10, "sd_seeds": 0.1, "verdict": "reproduced",
        "seeds_to_decide": None}   # decided already
    # seeds that agree but items that spread: more seeds change nothing
    assert reproduce.seeds_to_decide(np.array([[0.2, -0.1] * 5] * 3)) is None
    assert reproduce.seeds_to_decide(d[:1]) is None  # one seed: no spread to go by


def test_verdict():
    ci = lambda lo, hi: {"lo": lo, "hi": hi}
    assert reproduce.verdict(ci(0.01, 0.2), +1) == "reproduced"
    assert reproduce.verdict(ci(-0.2, -0.01), -1) == "reproduced"
    assert reproduce.verdict(ci(0.01, 0.2), -1) == "reversed"
    assert reproduce.verdict(ci(-0.02, 0.03), +1) == "no effect (within ±0.03)"
    assert reproduce.verdict(ci(-0.05, 0.03), +1) == "undecided (interval too wide)"
    assert reproduce.verdict(ci(-0.3, -0.1), 0) == "B < A"


def test_failed_run_names_itself_and_its_log(tmp_path):
    runs = [{"name": "ckpt/ok", "cmds": [[sys.executable, "-c", "print('fine')"]], "needs": [], "threads": 1},
            {"name": "ckpt/bad", "cmds": [[sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]],
             "needs": ["ckpt/ok"], "threads": 1},
            {"name": "replay/after", "cmds": [[sys.executable, "-c", "pass"]], "needs": ["ckpt/bad"], "threads": 1}]
    args = reproduce.parse_args(["--jobs", "1"])
    with pytest.raises(SystemExit) as e:
        reproduce.execute(runs, args, tmp_path)
    msg = str(e.value)
    assert "run ckpt/bad failed (exit 3)" in msg and "boom" in msg
    assert str(tmp_path / "logs" / "ckpt" / "bad.log") in msg
    assert (tmp_path / "done" / "ckpt" / "ok").exists()  # what finished stays finished
    assert not (tmp_path / "done" / "ckpt" / "bad").exists() and not (tmp_path / "done" / "replay").exists()


def test_a_recipe_sets_the_defaults_and_each_flag_still_overrides_it():
    nano = reproduce.parse_args(["--recipe", "nano", "--sft-steps", "7"])
    assert (nano.ckpt, nano.sft_steps) == ("tiny:nano", 7)
    assert reproduce.parse_args([]).ckpt == "tiny"
    runs = reproduce.plan(reproduce.parse_args(["--recipe", "nano", "--mag-only", "--seeds", "1"]))
    trained = sorted(r["name"] for r in runs if r["name"].startswith("ckpt/"))
    assert trained == ["ckpt/contsft_s0", "ckpt/grpo_always_s0", "ckpt/grpo_off_s0", "ckpt/sft_guide_first_s0"]
    assert not [r for r in runs if r["name"].startswith("replay/") and "/none/" not in r["name"]
                and "/floor/" not in r["name"]]   # no probes: MAG's comparison only
    sft = next(r for r in runs if r["name"] == "ckpt/sft_guide_first_s0")["cmds"][0]
    assert sft[sft.index("--warmup") + 1] == "50" and sft[sft.index("--ckpt") + 1] == "tiny:nano"
    # the control continues the SFT agent at the rate its schedule ended on, not a restart at the peak
    cont = next(r for r in runs if r["name"] == "ckpt/contsft_s0")["cmds"][0]
    assert float(cont[cont.index("--lr") + 1]) == float(sft[sft.index("--lr") + 1]) * 0.1
    assert cont[cont.index("--min-lr-ratio") + 1] == "1" and cont[cont.index("--ckpt") + 1] == "ckpt/sft_guide_first_s0"


def test_the_gpu_runbook_is_the_nano_recipe_with_a_real_checkpoint():
    """The runbook's GPU command (reproduce.py's docstring, docs/reproduce.md) keeps make nano's data, split
    and live protocol byte for byte; only the model, its prompt variant and its budget change."""
    doc = reproduce.__doc__.replace("\\\n", " ")
    line = next(s for s in doc.split("\n") if "--recipe nano" in s and "Qwen" in s)
    argv = line.split("reproduce.py", 1)[1].split()
    assert " ".join(argv) in " ".join((ROOT / "docs" / "reproduce.md").read_text().replace("\\\n", " ").split())
    gpu, cpu = (reproduce.plan(reproduce.parse_args(a)) for a in (argv, ["--recipe", "nano", "--mag-only", "--seeds",
                                                                         "1", "--jobs", "1"]))
    def data_and_floors(runs):
        return [r["cmds"] for r in runs if r["name"].startswith(("data/", "live/floor"))]
    assert data_and_floors(gpu) == data_and_floors(cpu) != []
    assert [r["name"] for r in gpu] == [r["name"] for r in cpu]
    sfts = [c for r in gpu for c in r["cmds"] if c[1].endswith("train_sft.py")]   # later stages read the ckpt's
    assert len(sfts) == 2 and {c[c.index("--elements") + 1] for c in sfts} == {"none"}
    sft = next(r for r in gpu if r["name"] == "ckpt/sft_guide_first_s0")["cmds"][0]
    assert sft[sft.index("--ckpt") + 1] == "Qwen/Qwen2.5-VL-3B-Instruct" and sft[sft.index("--lr") + 1] == "1e-05"


def test_make_reproduce_continues_make_nano():
    """make reproduce (the whole study on the nano recipe) runs in make nano's folder: every run make nano
    finished is one of its runs with the same record, so it keeps them and adds the decoding orders and the
    probes; the thread counts differ (they are not in the records)."""
    def records(argv):
        return {r["name"]: reproduce.commands_text(r) for r in reproduce.plan(reproduce.parse_args(argv))}
    nano = records(["--recipe", "nano", "--mag-only", "--seeds", "1", "--jobs", "2"])
    study = records(["--recipe", "nano", "--seeds", "1", "--jobs", "2"])
    assert {name: study.get(name) for name in nano} == nano
    added = set(study) - set(nano)
    assert added == {"ckpt/sft_action_first_s0", "ckpt/sft_action_only_s0", "replay/none/sft_action_first_s0",
                     "replay/none/sft_action_only_s0", "replay/gold/sft_guide_first_s0",
                     "replay/other_step/sft_guide_first_s0", "replay/paraphrase/sft_guide_first_s0"}, added
    # --orders leaves a decoding order out (make reproduce: action-first, W4b's, costs most) and nothing else
    two = records(["--recipe", "nano", "--seeds", "1", "--jobs", "2", "--orders", "guide_first,action_only"])
    assert set(study) - set(two) == {"ckpt/sft_action_first_s0", "replay/none/sft_action_first_s0"}
    assert {name: study[name] for name in two} == two
    for wrong in ("action_only", "guide_first,action_last"):   # GRPO starts from guide_first: it is always in
        with pytest.raises(SystemExit):
            reproduce.parse_args(["--orders", wrong])


def test_runs_take_their_threads_and_start_while_they_fit(tmp_path):
    """make nano's one SFT run gets both cores (everything else waits for it); the runs after it take one
    each, two at once; every child sees its own thread count."""
    nano = reproduce.plan(reproduce.parse_args(["--recipe", "nano", "--mag-only", "--seeds", "1", "--jobs", "2"]))
    threads = {r["name"]: r["threads"] for r in nano}
    assert threads["ckpt/sft_guide_first_s0"] == 2
    assert {t for name, t in threads.items() if name != "ckpt/sft_guide_first_s0"} == {1}
    assert {r["threads"] for r in reproduce.plan(reproduce.parse_args(["--jobs", "2"]))} == {1}   # 9 SFT runs
    log = tmp_path / "order.log"
    say = ("import os, sys, time; w = lambda s: open(sys.argv[1], 'a').write(s + '\\n'); "
           "w('start ' + sys.argv[2] + ' ' + os.environ['OMP_NUM_THREADS']); time.sleep(1.5); w('end ' + sys.argv[2])")
    runs = [{"name": f"ckpt/{n}", "cmds": [[sys.executable, "-c", say, str(log), n]], "needs": needs, "threads": t}
            for n, t, needs in (("sft", 2, []), ("grpo", 1, ["ckpt/sft"]), ("contsft", 1, ["ckpt/sft"]))]
    reproduce.execute(runs, reproduce.parse_args(["--jobs", "2"]), tmp_path)
    lines = log.read_text().split("\n")
    assert lines[:2] == ["start sft 2", "end sft"]
    assert sorted(lines[2:4]) == ["start contsft 1", "start grpo 1"]   # both started before either ended


# A stand-in for train_sft.py: four steps, a save (trainer_state.pt) after each even one; it dies after step
# DIE_AFTER when that is set, and logs where it started from.
FAKE_TRAINER = """import os, sys
out = sys.argv[sys.argv.index("--out") + 1]
state = os.path.join(out, "trainer_state.pt")
step = int(open(state).read()) if "--resume" in sys.argv else 0
print("start", step, flush=True)
for step in range(step + 1, 5):
    if step % 2 == 0:
        os.makedirs(out, exist_ok=True)
        open(state, "w").write(str(step))
    if str(step) == os.environ.get("DIE_AFTER"):
        sys.exit(9)
"""


def test_a_training_run_cut_short_resumes_from_its_last_save(tmp_path, monkeypatch):
    """A stop in the middle of a long SFT run costs the steps since its last save, not the run: the rerun
    passes --resume (bit for bit on a CPU) when the run began with the same commands on the same inputs;
    another command, or needs that run again, start it over."""
    (tmp_path / "train_sft.py").write_text(FAKE_TRAINER)
    def runs(seed="0"):
        return [{"name": "data/a", "cmds": [[sys.executable, "-c", "pass"]], "needs": [], "threads": 1},
                {"name": "ckpt/sft", "cmds": [[sys.executable, str(tmp_path / "train_sft.py"), "--seed", seed,
                                               "--save-every", "2", "--out", "ckpt/sft"]],
                 "needs": ["data/a"], "threads": 1}]
    args, out = reproduce.parse_args(["--jobs", "1"]), tmp_path / "study"
    log = out / "logs" / "ckpt" / "sft.log"

    def cut_short(plan, after):
        monkeypatch.setenv("DIE_AFTER", after)
        with pytest.raises(SystemExit, match="run ckpt/sft failed"):
            reproduce.execute(plan, args, out)
        monkeypatch.delenv("DIE_AFTER")

    cut_short(runs(), "3")
    assert (out / "started" / "ckpt" / "sft").exists() and not (out / "done" / "ckpt" / "sft").exists()
    reproduce.execute(runs(), args, out)
    assert log.read_text().split() == ["start", "0", "start", "2"]   # one log, both parts
    assert (out / "done" / "ckpt" / "sft").exists() and not (out / "started" / "ckpt" / "sft").exists()
    # --save-every is not part of what a run gives: a record with another interval still counts as done
    record = (out / "done" / "ckpt" / "sft").read_text()
    assert "--save-every" not in record and reproduce.finished(runs(), out / "done") == {"data/a", "ckpt/sft"}

    cut_short(runs("1"), "3")   # another seed: its run starts over, and is cut short after its save
    reproduce.execute(runs("2"), args, out)   # and another: not the same run either
    assert log.read_text().split() == ["start", "0"]
    cut_short(runs("3"), "3")
    (out / "done" / "data" / "a").write_text("python -c 'an older command'\n")   # its input runs again
    reproduce.execute(runs("3"), args, out)
    assert log.read_text().split() == ["start", "0"]


def test_a_stopped_study_stops_its_runs(tmp_path):
    """kill (or Ctrl-C) on the study stops the runs it started and waits for them: none goes on writing into
    the study beside the rerun that continues it."""
    child = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
    pid_file = tmp_path / "child.pid"
    runs = [{"name": "ckpt/long", "cmds": [[sys.executable, "-c", child, str(pid_file)]], "needs": [], "threads": 1}]
    script = (f"import sys; sys.path.insert(0, {str(ROOT / 'experiments')!r}); import reproduce; "
              f"reproduce.execute({runs!r}, reproduce.parse_args([]), reproduce.Path({str(tmp_path / 'study')!r}))")
    study = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    study.terminate()
    assert study.wait(timeout=60) != 0 and "KeyboardInterrupt" in study.stderr.read()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)   # gone, and reaped
    assert (tmp_path / "study" / "started" / "ckpt" / "long").exists()
    assert not (tmp_path / "study" / "done" / "ckpt" / "long").exists()


def reproduce_quick(out, *more):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "reproduce.py"), "--quick", "--out", str(out),
                           *more],
                          capture_output=True, text=True, timeout=900, env={**__import__("os").environ,
                                                                             "HF_HUB_OFFLINE": "1"})


def test_quick_study_end_to_end(tmp_path):
    out = tmp_path / "study"
    p = reproduce_quick(out)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert set(res) == {"settings", "arms", "contrasts", "grpo", "majority_baseline", "random_baseline", "by_suite"}
    assert res["settings"]["quick"] and res["settings"]["recipe"] == "tiny"
    assert set(res["majority_baseline"]) == {"action", "step", "element"}
    assert set(res["random_baseline"]) == {"step", "element", "valid", "live"}
    assert res["random_baseline"]["live"]["success"]["n"] == 2  # one live episode per task, like the arms'
    assert set(res["by_suite"]) == set(res["arms"]) | {"always the most frequent action", "random policy"}
    assert all(set(by) == {"miniwob"} for by in res["by_suite"].values())
    assert set(res["arms"]) == {"sft_guide_first", "sft_action_only", "grpo_off", "grpo_always", "contsft"}
    gf = res["arms"]["sft_guide_first"]
    assert set(gf) == {"none", "gold", "live"} and set(gf["live"]) == {"success", "joint"}
    assert {"step", "element", "joint", "guide_rouge_l", "guide_reward"} <= set(gf["none"])
    assert "guide_rouge_l" not in res["arms"]["sft_action_only"]["none"]  # no guides, no guide scores (not zeros)
    for c in gf["none"].values():
        assert set(c) == {"mean", "lo", "hi", "per_seed", "n", "sd_seeds"} and c["lo"] <= c["mean"] <= c["hi"]
        assert c["sd_seeds"] is None  # one seed: no spread over seeds to measure
    ids = {c["id"] for c in res["contrasts"]}
    assert {"W1", "W4", "M1", "M2", "C1"} <= ids  # the contrasts whose arms ran; W2 needs other_step
    for c in res["contrasts"]:
        assert c["verdict"] in ("reproduced", "reversed", "no effect (within ±0.03)", "undecided (interval too wide)",
                                "B > A", "B < A")
        assert c["seeds_to_decide"] is None  # one seed cannot say how many would do
    assert set(res["grpo"]) == {"grpo_off", "grpo_always"} and res["grpo"]["grpo_always"]["dropped_frac"] == 0.0
    claims = (out / "claims.md").read_text()
    assert claims.startswith("| id | claim |") and "| W1 |" in claims and "| M2 |" in claims
    assert "| random policy (action only) |" in claims and "| step success by suite | miniwob |" in claims
    for png in ("probes.png", "grpo.png", "arms.png"):
        assert (out / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # an interrupted study: one run's outputs lost and not marked done -> a rerun redoes only that run,
    # and the whole output comes back byte for byte
    before = {f: (out / f).read_bytes() for f in ("results.json", "claims.md", "plots/probes.png", "plots/grpo.png")}
    (out / "done" / "replay" / "none" / "contsft_s0").unlink()
    (out / "replay" / "none" / "contsft_s0" / "predictions.jsonl").write_text('{"torn')
    p = reproduce_quick(out)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "done replay/none/contsft_s0" in p.stdout and p.stdout.count("done ") == 1  # one line per finished run
    assert {f: (out / f).read_bytes() for f in before} == before

    # another GRPO learning rate in the same folder: the GRPO runs and what reads them are redone, the
    # data and SFT runs are kept (their commands did not change)
    sft_record = (out / "done" / "ckpt" / "sft_guide_first_s0").read_text()
    p = reproduce_quick(out, "--grpo-lr", "1e-3")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    redone = sorted(line.split()[1] for line in p.stdout.splitlines() if line.startswith("done "))
    assert redone == ["ckpt/grpo_always_s0", "ckpt/grpo_off_s0", "replay/none/grpo_always_s0",
                      "replay/none/grpo_off_s0"], redone
    assert (out / "done" / "ckpt" / "sft_guide_first_s0").read_text() == sft_record
    assert "--lr 0.001" in (out / "done" / "ckpt" / "grpo_off_s0").read_text()
    assert json.loads((out / "results.json").read_text())["settings"]["grpo_lr"] == 1e-3

    # make nano's pipeline at this size, in the same folder: the same episodes (kept), the nano model, MAG's
    # comparison only (no decoding orders, no probes), live on every arm of it, its claims and plots
    p = reproduce_quick(out, "--recipe", "nano", "--mag-only")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    redone = {line.split()[1] for line in p.stdout.splitlines() if line.startswith("done ")}
    assert not {r for r in redone if r.startswith("data/")} and "live/floor/random" in redone   # 16 steps now
    res = json.loads((out / "results.json").read_text())
    assert set(res["arms"]) == {"sft_guide_first", "grpo_off", "grpo_always", "contsft"}
    assert {arm for arm, by in res["arms"].items() if "live" in by} == {"sft_guide_first", "grpo_off", "grpo_always"}
    assert set(res["arms"]["sft_guide_first"]) == {"none", "live"}
    assert {c["id"] for c in res["contrasts"]} == {"M1", "M2", "M3", "C1", "M1L", "M2L"}
    assert "tiny:nano" in (out / "done" / "ckpt" / "sft_guide_first_s0").read_text()
    assert (out / "plots" / "arms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_moved_study_keeps_its_finished_runs(tmp_path, monkeypatch):
    """The done records leave out the interpreter and the checkout's folder: the same study run from another
    clone or venv skips what finished (it used to redo every run, removing the outputs it had)."""
    def runs(root, python):
        return [{"name": "ckpt/a", "cmds": [[python, str(root / "train_sft.py"), "--seed", "0", "--out", "ckpt/a"]],
                 "needs": []}]
    monkeypatch.setattr(reproduce, "ROOT", Path("/old/clone"))
    record = reproduce.commands_text(runs(Path("/old/clone"), "/old/clone/.venv/bin/python")[0])
    assert record == "python train_sft.py --seed 0 --out ckpt/a\n"
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "a").write_text(record)
    monkeypatch.setattr(reproduce, "ROOT", Path("/new/place"))
    assert reproduce.finished(runs(Path("/new/place"), "/usr/bin/python3"), tmp_path) == {"ckpt/a"}
    # --jobs sets collect.py's --workers, which does not change the episodes: another --jobs keeps the data
    collect = {"name": "data/miniwob", "cmds": [["python", "collect.py", "--workers", "1", "--out", "data"]],
               "needs": []}
    assert reproduce.commands_text(collect) == "python collect.py --out data\n"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "miniwob").write_text("python collect.py --workers 2 --out data\n")   # an older record
    assert reproduce.finished([collect], tmp_path) == {"data/miniwob"}
    other = runs(Path("/new/place"), "/usr/bin/python3")
    other[0]["cmds"][0][3] = "1"   # another seed: not the same run
    assert reproduce.finished(other, tmp_path) == set() and not (tmp_path / "ckpt" / "a").exists()
