"""experiments/reproduce.py -- the MAG and WebMRE findings at small scale: seeded, with confidence intervals.

One study, run through the stage scripts' command lines only (each run is a subprocess, so the study
is unaffected by refactors inside the stages):

  data      collect.py (experts: every MiniWoB++ task with an expert, one back-office task per
            template) -> annotate.py draft (template), verify --accept-drafts, paraphrase, split by episode
  SFT       train_sft.py from --ckpt in the three decoding orders (guide_first, action_first,
            action_only; --orders), one run per training seed, same data and step budget
  from SFT  train_grpo.py from the guide-first SFT agent (as MAG starts from its SFT agent): --expert
            off | always (guide reward ROUGE-L), and the control: continued SFT (train_sft.py from the
            same checkpoint) on as many expert examples as GRPO's groups received; --extras adds
            --expert when_wrong and --guide-reward offline | grounding
  scoring   replay.py on the test split for every checkpoint, the gold / other_step / paraphrase
            probes on the guide-first SFT agent (--extras: on every guide-first checkpoint), evaluate.py
            live on held-out seeds for the SFT agent and the GRPO comparison; the floors beside them:
            the training split's most frequent action, and the random policy offline and live
  analysis  results.json (every number, every seed), claims.md (one row per claim: the paper's
            figure, ours with a 95% interval, the verdict), plots/*.png

Intervals count both the training seeds and the test steps as random draws (Student's t on a two-way
variance: see interval(); arms that share a seed share its data order and starting checkpoint, so
they are paired by seed and by step). A claim is "reproduced" when its interval excludes 0 in the
paper's direction, "reversed" when it excludes 0 the other way, "no effect" when the interval lies
within +-0.03, else "undecided" -- and the table says how many seeds of the measured spread would
decide it.

Runbook
  python experiments/reproduce.py --out runs/reproduce       # the first study (tiny): ~42 min on 2 idle CPU cores
  #   rerun to continue (finished runs are skipped)
  python experiments/reproduce.py --quick --out /tmp/rq      # 2 tasks, 1 seed, a few steps: pipeline + schema only
  python experiments/reproduce.py --quick --recipe nano --mag-only --out /tmp/rqn   # make nano's pipeline, as small
  python experiments/reproduce.py --eval-split val --out runs/tune   # choose hyper-parameters here, never on test
  python experiments/reproduce.py --recipe nano --mag-only --seeds 1 --out runs/nano   # make nano (issue 39)
  python experiments/reproduce.py --recipe nano --seeds 1 --orders guide_first,action_only --out runs/nano
  #   make reproduce: the whole study on the nano agents, in make nano's folder (it keeps make nano's runs)
  # the nano recipe on one GPU: make nano's data and live protocol, a real checkpoint and its budget (it reads
  # the screenshot, so no mark text in the prompt; choose the two rates with --eval-split val)
  python experiments/reproduce.py --recipe nano --mag-only --seeds 1 --ckpt Qwen/Qwen2.5-VL-3B-Instruct \
      --elements none --sft-lr 1e-5 --sft-steps 2000 --batch-size 8 --grpo-lr 1e-6 --grpo-steps 300 \
      --prompts-per-step 16 --group-size 8 --jobs 1 --threads 16 --out runs/nano_3b

Every run writes into <out>/ (data/, ckpt/, replay/, live/, logs/); <out>/done/<run> records the
command of each finished run. A rerun reuses every finished run whose commands are unchanged and
redoes the others and everything that needs them (change --grpo-lr: the SFT runs are kept). A
training run cut short (a stop, a reboot) resumes from its last save: every 200 steps for SFT.
Children get --threads torch threads each and --jobs of them run at once: on CPU one thread per run
and one run per core is the fastest choice. The first SFT runs start alone (everything else needs
them), so when they are fewer than the cores they share the cores out: make nano's one SFT run takes
both (a MiniWoB++ step of 16 examples: 0.55 s on two threads, 0.99 s on one beside another run). A
run's thread count is fixed by the plan, so a rerun repeats its numbers exactly.
"""
import argparse
import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the stage scripts
BACKOFFICE_ONE_PER_TEMPLATE = ("update-customer-contact,mark-orders-paid,close-ticket,deactivate-product,"
                               "count-unpaid-orders,create-staff-user,grant-group-permission,add-order-line,"
                               "delete-product,ship-order,restock-product,reassign-ticket")

# The recipes: a model and its budget. tiny: the demo's 1M-parameter model at the first study's budget, on
# the floor (its agents score about the training split's most frequent action). nano: make nano, chosen on
# a val split (docs/reproduce.md): the 1.4M model learns MiniWoB++'s tasks with the schedule (1,200 SFT
# steps: .513 val step success, 2,400: .531, 3,600: .583), not with a 5x larger model or more episodes.
# 1,800 steps keep make nano near its budget (about 0.9 s a step on 2 cores); --sft-steps 3600 adds 27 min.
# GRPO+expert from that agent, on val (525 steps): lr 2e-4 (the tiny recipe's) .457, 5e-5 .501, SFT .484.
RECIPES = {
    "tiny": {},
    "nano": dict(ckpt="tiny:nano", miniwob_episodes=100, backoffice_episodes=3, val=0.1, batch_size=16,
                 sft_lr=2e-3, sft_warmup=50, sft_steps=1800, grpo_steps=60, grpo_lr=5e-5, max_new_tokens=96,
                 live_episodes=5, live_max_steps=16),
}


ORDERS = ("guide_first", "action_first", "action_only")   # train_sft.py's --order, in the claims' order
SFT_END_LR = 0.1   # train_sft.py's default --min-lr-ratio: where the SFT agent's learning rate ended
SFT_SAVE_EVERY = 200   # a long SFT run a stop cuts short resumes from its last save (execute), not from step 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/reproduce", help="study folder")
    p.add_argument("--recipe", default="tiny", choices=RECIPES,
                   help="the model and budget the flags below default to (each flag still overrides it)")
    p.add_argument("--mag-only", action="store_true",
                   help="only MAG's comparison: the guide-first SFT agent, GRPO with and without the expert, "
                        "continued SFT (no decoding orders, no probes): make nano")
    p.add_argument("--quick", action="store_true",
                   help="2 tasks, 1 seed, a few steps: checks the pipeline, not the effects (with --mag-only: make "
                        "nano's)")
    p.add_argument("--extras", action="store_true",
                   help="also GRPO --expert when_wrong, --guide-reward offline|grounding, and the probes on every "
                        "guide-first checkpoint (about 40 more minutes on 2 cores)")
    p.add_argument("--jobs", type=int, default=2, help="runs at once (one per CPU core on a CPU)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the stage scripts")
    # data
    p.add_argument("--miniwob-tasks", default="all", help="MiniWoB++ tasks ('all' = every task with an expert)")
    p.add_argument("--miniwob-episodes", type=int, default=30, help="expert episodes per MiniWoB++ task")
    p.add_argument("--backoffice-tasks", default=BACKOFFICE_ONE_PER_TEMPLATE, help="back-office tasks ('' = none)")
    p.add_argument("--backoffice-episodes", type=int, default=1, help="expert episodes per back-office task")
    p.add_argument("--data-seed", type=int, default=1000, help="first seed of the recorded episodes")
    p.add_argument("--val", type=float, default=0.15, help="share of episodes in val")
    p.add_argument("--test", type=float, default=0.2, help="share of episodes in test")
    p.add_argument("--eval-split", default="test", help="what replay scores: test for the report, val for tuning")
    # models and training
    p.add_argument("--orders", default=",".join(ORDERS),
                   help="the SFT runs' decoding orders (guide_first always: GRPO and the probes start from it)")
    p.add_argument("--seeds", type=int, default=3, help="training seeds per arm (0..N-1)")
    p.add_argument("--ckpt", default="tiny", help="starting model (train_sft.py --ckpt)")
    p.add_argument("--elements", default="text", choices=["none", "text"],
                   help="prompt variant (a tiny model cannot read pixels: it needs the marks' text)")
    p.add_argument("--batch-size", type=int, default=8, help="SFT examples per step")
    p.add_argument("--sft-lr", type=float, default=5e-3, help="chosen on val: 5e-3 over 2e-3 and 1e-2")
    p.add_argument("--sft-steps", type=int, default=300, help="SFT budget of every decoding order")
    p.add_argument("--sft-warmup", type=int, default=10, help="SFT warmup steps (at most a tenth of the run)")
    p.add_argument("--grpo-steps", type=int, default=30, help="GRPO steps from the guide-first SFT agent")
    p.add_argument("--grpo-lr", type=float, default=2e-4,
                   help="chosen on val: 1e-3 breaks the reply format within 15 steps, from either arm")
    p.add_argument("--grpo-temperature", type=float, default=0.5,
                   help="rollout temperature: at 1.0 a tiny model's samples are almost never well formed")
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=64, help="rollouts, replay and live replies")
    # live evaluation on seeds no episode of the dataset used
    p.add_argument("--live-episodes", type=int, default=1, help="live episodes per MiniWoB++ task and checkpoint")
    p.add_argument("--live-seed", type=int, default=9000)
    p.add_argument("--live-max-steps", type=int, default=8)
    p.set_defaults(**RECIPES[p.parse_known_args(argv)[0].recipe])
    args = p.parse_args(argv)
    args.orders = args.orders.split(",")
    if set(args.orders) - set(ORDERS) or "guide_first" not in args.orders:
        p.error(f"--orders {','.join(args.orders)}: a comma list of {', '.join(ORDERS)}, guide_first among them")
    if args.quick:
        args.miniwob_tasks, args.miniwob_episodes = "click-button,login-user", 4
        args.backoffice_tasks, args.seeds = "", 1
        args.sft_steps, args.grpo_steps = 6, 2
        args.prompts_per_step, args.group_size, args.batch_size = 2, 2, 4
        args.max_new_tokens, args.live_episodes = 24, 1
        args.val, args.test = 0.25, 0.25
    return args


# ----------------------------------------------------------------------------------------------
# The runs: a name, the commands, the runs it needs. Paths are relative to --out.

def plan(a):
    """Every run of the study, in an order that respects their needs."""
    py, stage = a.python, lambda s: str(ROOT / s)
    runs = []

    def run(name, cmds, needs=(), threads=a.threads):
        runs.append({"name": name, "cmds": cmds, "needs": list(needs), "threads": threads})

    collect = [py, stage("collect.py"), "--policy", "expert", "--workers", str(a.jobs), "--out", "data", "--resume",
               "--no-progress"]
    run("data/miniwob", [collect + ["--suite", "miniwob", "--tasks", a.miniwob_tasks, "--episodes",
                                    str(a.miniwob_episodes), "--seed", str(a.data_seed)]])
    if a.backoffice_tasks:
        run("data/backoffice", [collect + ["--suite", "backoffice", "--tasks", a.backoffice_tasks, "--episodes",
                                           str(a.backoffice_episodes), "--seed", str(a.data_seed)]], ["data/miniwob"])
    annotate = [py, stage("annotate.py")]
    run("data/annotate", [annotate + ["draft", "data", "--drafter", "template"],
                          annotate + ["verify", "data", "--accept-drafts"],
                          annotate + ["paraphrase", "data", "--drafter", "template"],
                          annotate + ["split", "data", "--val", str(a.val), "--test", str(a.test)]],
        [r["name"] for r in runs])

    def sft(name, ckpt, steps, order, seed, needs, lr=a.sft_lr, batch=a.batch_size, threads=a.threads, extra=()):
        warmup = max(1, min(a.sft_warmup, steps // 10))
        run(name, [[py, stage("train_sft.py"), "--data", "data", "--ckpt", ckpt, "--order", order, "--elements",
                    a.elements, "--lr", str(lr), "--warmup", str(warmup), "--batch-size", str(batch), "--max-steps",
                    str(steps), "--seed", str(seed), "--eval-every", "0", "--eval-gen-n", "0", "--save-every",
                    str(min(steps, SFT_SAVE_EVERY)), "--out", name, "--no-progress", *extra]], needs, threads)

    def grpo(name, ckpt, seed, expert, guide_reward):
        run(name, [[py, stage("train_grpo.py"), "--data", "data", "--ckpt", ckpt, "--expert", expert,
                    "--guide-reward", guide_reward, "--lr", str(a.grpo_lr), "--max-steps", str(a.grpo_steps),
                    "--prompts-per-step", str(a.prompts_per_step), "--group-size", str(a.group_size),
                    "--max-new-tokens", str(a.max_new_tokens), "--temperature", str(a.grpo_temperature),
                    "--seed", str(seed), "--save-every",
                    str(a.grpo_steps), "--dump-every", "0", "--out", name, "--no-progress"]], [ckpt])

    want = MAG_ARMS if a.mag_only else QUICK_ARMS if a.quick else None if a.extras else CORE_ARMS
    orders = [o for o in ORDERS if o in a.orders and (not want or f"sft_{o}" in want)]
    # the first SFT runs start together: when they are fewer than the cores, each gets its share of them
    sft_threads = max(a.threads, a.jobs * a.threads // (a.seeds * len(orders)))
    for s in range(a.seeds):
        for order in orders:
            sft(f"ckpt/sft_{order}_s{s}", a.ckpt, a.sft_steps, order, s, ["data/annotate"], threads=sft_threads)
        start = f"ckpt/sft_guide_first_s{s}"   # the SFT agent GRPO starts from
        for expert, reward in (("off", "rouge"), ("always", "rouge"), ("when_wrong", "rouge"),
                               ("always", "offline"), ("always", "grounding")):
            name = f"grpo_{expert}" + ("" if reward == "rouge" else f"_{reward}")
            if not want or name in want:
                grpo(f"ckpt/{name}_s{s}", start, s, expert, reward)
        # the control: as many expert examples as GRPO's groups got (one per prompt and step), continuing the
        # SFT run at the rate its schedule ended on (train_sft.py's cosine ends at a tenth of --lr), held: more
        # of the same supervision. Restarting at the peak rate set the tiny agent back (.200 -> .178 step).
        sft(f"ckpt/contsft_s{s}", start, a.grpo_steps, "guide_first", s, [start], lr=a.sft_lr * SFT_END_LR,
            batch=a.prompts_per_step, extra=["--min-lr-ratio", "1"])

    live_tasks = a.miniwob_tasks

    def probes_of(arm):   # the mediation probes on the guide-first SFT agent (--extras: every guide-first one)
        if a.mag_only or "action" in arm or (arm != "sft_guide_first" and (a.quick or not a.extras)):
            return ("none",)
        return ("none", "gold") if a.quick else ("none", "gold", "other_step", "paraphrase")

    live_arms = LIVE_ARMS if a.mag_only or not a.quick else ("sft_guide_first",)
    for r in [r for r in runs if r["name"].startswith("ckpt/")]:
        ckpt = r["name"]
        arm = arm_of(ckpt)
        for probe in probes_of(arm):
            run(f"replay/{probe}/{ckpt[5:]}", [[py, stage("replay.py"), "--ckpt", ckpt, "--data", "data", "--split",
                                               a.eval_split, "--probe", probe, "--batch-size", "16", "--max-new-tokens",
                                               str(a.max_new_tokens), "--out", f"replay/{probe}/{ckpt[5:]}",
                                               "--no-progress"]], [ckpt])
        if arm in live_arms:
            run(f"live/{ckpt[5:]}", [[py, stage("evaluate.py"), "--suite", "miniwob", "--tasks", live_tasks,
                                      "--policy", "ckpt", "--ckpt", ckpt, "--episodes", str(a.live_episodes),
                                      "--seed", str(a.live_seed), "--max-steps", str(a.live_max_steps),
                                      "--max-new-tokens", str(a.max_new_tokens), "--workers", "1",
                                      "--out", f"live/{ckpt[5:]}", "--no-progress"]], [ckpt])
    # the random floor, offline (seeded per step) and live (per task and seed), on the same steps and seeds
    run("replay/floor/random", [[py, stage("replay.py"), "--baseline", "random", "--data", "data", "--split",
                                 a.eval_split, "--out", "replay/floor/random", "--no-progress"]], ["data/annotate"])
    run("live/floor/random", [[py, stage("evaluate.py"), "--suite", "miniwob", "--tasks", live_tasks, "--policy",
                               "random", "--episodes", str(a.live_episodes), "--seed", str(a.live_seed),
                               "--max-steps", str(a.live_max_steps), "--workers", "1", "--out", "live/floor/random",
                               "--no-progress"]])
    return runs


# The arms (every seed of one configuration) each mode trains; contsft always runs. The core is
# what fits 45 minutes on 2 CPU cores; --extras adds the secondary GRPO arms and probes; --quick is one
# arm of each kind, enough to check the pipeline; --mag-only (make nano) is MAG's comparison, quick or not.
CORE_ARMS = ("sft_guide_first", "sft_action_first", "sft_action_only", "grpo_off", "grpo_always")
QUICK_ARMS = ("sft_guide_first", "sft_action_only", "grpo_off", "grpo_always")
MAG_ARMS = ("sft_guide_first", "grpo_off", "grpo_always")
# Live evaluation is the costly part (a browser per run): it covers the arms of the MAG comparison.
LIVE_ARMS = ("sft_guide_first", "grpo_off", "grpo_always")


def arm_of(name):
    """ckpt/grpo_always_s2 -> grpo_always (the arm: every seed of one configuration)."""
    return Path(name).name.rsplit("_s", 1)[0]


# ----------------------------------------------------------------------------------------------
# Running: at most --jobs runs at once, each logged to logs/<run>.log; a finished run is recorded
# in done/<run> with its commands, so a rerun skips it. An unfinished run starts over from nothing
# (its outputs are removed first), which keeps every run a pure function of its command; a training
# run cut short after a save continues from it instead (train_sft.py and train_grpo.py resume bit for
# bit on a CPU), when started/<run> shows it began with the same commands on the same inputs.

def outputs_of(name):
    """What a run writes besides its log: a checkpoint also leaves <out>.log.jsonl etc. beside it."""
    if name.startswith("data/"):
        return []  # collect.py --resume continues its own folder; annotate.py's commands are idempotent
    return [name] + [name + suffix for suffix in (".log.jsonl", ".samples.jsonl", ".tmp", ".old")]


# Flags that change how a run goes, not what it gives: how many browsers collect (the same seeds give the
# same episodes) and how often a checkpoint is saved (a save draws no random number).
HOW_NOT_WHAT = ("--workers", "--save-every")


def commands_text(r):
    """A run's record: its commands without where they ran from (the interpreter, the checkout's folder) or
    the HOW_NOT_WHAT flags, so a study moved to another clone or venv, rerun with another --jobs or saving
    more often, keeps its finished runs."""
    def portable(cmd):
        cmd = [str(x) for x in cmd]
        here = str(ROOT) + os.sep
        return ["python"] + [x[len(here):] if x.startswith(here) else x for x in cmd[1:]]
    return "".join(shlex.join(what_it_gives(portable(c))) + "\n" for c in r["cmds"])


def what_it_gives(cmd):
    """A command less its HOW_NOT_WHAT flags and their values."""
    drop = {k + d for k, flag in enumerate(cmd) if flag in HOW_NOT_WHAT for d in (0, 1)}
    return [x for k, x in enumerate(cmd) if k not in drop]


def record_text(path):
    """A record as commands_text writes it now (records written with HOW_NOT_WHAT flags in them match)."""
    return "".join(shlex.join(what_it_gives(shlex.split(line))) + "\n" for line in path.read_text().splitlines())


def finished(runs, done_dir):
    """The runs a rerun may skip: recorded as done with the same commands, and needing only such runs
    (plan order lists a run after its needs). The record of every other run goes first, so an
    interrupted rerun cannot leave a stale record behind; so does the start record (started/, beside
    done/) of a run whose needs will run again: its saved checkpoint was trained on what they replace."""
    done = set()
    for r in runs:
        record = done_dir / r["name"]
        needs_done = all(n in done for n in r["needs"])
        if record.exists() and record_text(record) == commands_text(r) and needs_done:
            done.add(r["name"])
        else:
            record.unlink(missing_ok=True)
            if not needs_done:
                (done_dir.parent / "started" / r["name"]).unlink(missing_ok=True)
    return done


def resumable(r, out):
    """A training run that began with these commands on these inputs and saved a checkpoint before it was
    cut short (under its name, or under .old when the kill fell inside a save: --resume puts it back)."""
    started = out / "started" / r["name"]
    trains = len(r["cmds"]) == 1 and Path(r["cmds"][0][1]).name in ("train_sft.py", "train_grpo.py")
    saved = any((out / (r["name"] + suffix) / "trainer_state.pt").exists() for suffix in ("", ".old"))
    return trains and saved and started.exists() and started.read_text() == commands_text(r)


def prepare(r, out, say):
    """A run about to start: its outputs removed, or kept when it resumes; its start record. -> (commands, log)"""
    resume = resumable(r, out)
    for path in [] if resume else outputs_of(r["name"]):
        target = out / path
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    for folder in ("started", "logs"):
        (out / folder / r["name"]).parent.mkdir(parents=True, exist_ok=True)
    (out / "started" / r["name"]).write_text(commands_text(r))
    if resume:
        say(f"resuming {r['name']} from its last save")
    log = open(out / "logs" / (r["name"] + ".log"), "a" if resume else "w")
    return ([r["cmds"][0] + ["--resume"]] if resume else r["cmds"]), log


def record_done(r, out):
    """A finished run: its done record (its commands), in place of its start record."""
    (out / "done" / r["name"]).parent.mkdir(parents=True, exist_ok=True)
    (out / "done" / r["name"]).write_text(commands_text(r))
    (out / "started" / r["name"]).unlink(missing_ok=True)


def failure(name, proc, out):
    """The one message of a failed run: its command, exit status, log and the log's last lines."""
    log = out / "logs" / (name + ".log")
    return (f"reproduce: run {name} failed (exit {proc.returncode}): {shlex.join(map(str, proc.args))}\n"
            f"  its log: {log} (last lines below)\n" + "".join(log.read_text().splitlines(True)[-15:]))


def stop_all(active):
    """Stop the runs still going and wait for them: a rerun must not race a run left behind (train_sft.py
    resumes from its last save; evaluate.py and collect.py keep the episodes they finished)."""
    for _, proc, *_ in active.values():
        proc.terminate()
    for _, proc, *_ in active.values():
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()


def execute(runs, a, out):
    from tqdm import tqdm
    done = finished(runs, out / "done")
    todo = [r for r in runs if r["name"] not in done]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cores = a.jobs * a.threads   # a run takes its threads' worth; runs start in plan order while they fit
    bar = tqdm(total=len(runs), initial=len(done), desc="runs", dynamic_ncols=True, file=sys.stderr)
    active = {}  # name -> (run, Popen, remaining commands, start time, log file)
    on_kill = signal.signal(signal.SIGTERM, signal.default_int_handler)   # kill stops the runs as Ctrl-C does

    def start(r, cmds, t0, log):
        threads = str(r["threads"])
        proc = subprocess.Popen(cmds[0], cwd=out, env={**env, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads},
                                stdout=log, stderr=subprocess.STDOUT)
        active[r["name"]] = (r, proc, cmds[1:], t0, log)

    try:
        while todo or active:
            ready = [r for r in todo if all(n in done for n in r["needs"])]
            while ready and sum(v[0]["threads"] for v in active.values()) + ready[0]["threads"] <= cores:
                r = ready.pop(0)
                todo.remove(r)
                cmds, log = prepare(r, out, bar.write)
                start(r, cmds, time.time(), log)
            if not active:
                missing = sorted({n for r in todo for n in r["needs"] if n not in done})
                raise SystemExit(f"reproduce: runs wait for runs that cannot finish: {missing}")
            time.sleep(0.2)
            for name, (r, proc, rest, t0, log) in list(active.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                del active[name]
                if rc != 0:
                    log.close()
                    raise SystemExit(failure(name, proc, out))
                if rest:
                    start(r, rest, t0, log)
                    continue
                log.close()
                record_done(r, out)
                done.add(name)
                bar.update(1)
                bar.write(f"done {name} in {time.time() - t0:.0f} s ({len(done)}/{len(runs)})")
    finally:   # a failure or a stop (Ctrl-C, kill) takes the runs it started with it: none goes on alone
        stop_all(active)
        bar.close()
        signal.signal(signal.SIGTERM, on_kill)


# ----------------------------------------------------------------------------------------------
# Analysis: every number from the runs' own files (replay's predictions.jsonl, evaluate.py's
# results.json, train_grpo.py's log), so it can be redone at any time without rerunning anything.

@functools.lru_cache(maxsize=None)
def predictions(out, probe, arm, seed):
    """{(episode id, step): replay.py's row} of replay/<probe>/<arm>_s<seed>/predictions.jsonl."""
    with open(out / "replay" / probe / f"{arm}_s{seed}" / "predictions.jsonl") as f:
        return {(p["id"], p["step"]): p for p in map(json.loads, f)}


def shared_steps(out, runs, seeds):
    """The steps every (probe, arm) of `runs` replayed for every seed (a probe skips steps with no guide)."""
    keys = [set(predictions(out, probe, arm, s)) for probe, arm in runs for s in seeds]
    return sorted(set.intersection(*keys))


def replay_values(out, probe, arm, metric, seeds, keys=None):
    """[seeds x steps] of one metric of replay/<probe>/<arm>_s<seed>, on `keys` (default: its shared steps);
    None where the run has no such score at all (the guide scores of an action-only run)."""
    import numpy as np
    keys = keys or shared_steps(out, [(probe, arm)], seeds)
    get = (lambda p: p["guide_reward"]) if metric == "guide_reward" else (lambda p: p["scores"].get(metric))
    rows = [[get(predictions(out, probe, arm, s)[k]) for k in keys] for s in seeds]
    if all(v is None for row in rows for v in row):
        return None
    return np.array([[v or 0.0 for v in row] for row in rows], dtype=float)


def live_values(out, arm, metric, seeds):
    """[seeds x episodes] of evaluate.py's per-episode success (or joint), episodes in id order."""
    import numpy as np
    rows = []
    for s in seeds:
        res = json.loads((out / "live" / f"{arm}_s{s}" / "results.json").read_text())
        rows.append([r[metric] or 0 for r in sorted(res["per_episode"], key=lambda r: r["id"])])
    return np.array(rows, dtype=float)


def interval(d):
    """Mean of a [seeds x items] array and its 95% interval. Seeds and items (test steps or live episodes,
    the same ones for every seed) are crossed random draws: the variance of the mean adds a seed part, an
    item part and their interaction (variance_parts), and the interval is Student's t with
    Welch-Satterthwaite degrees of freedom. With 3 seeds the t quantile is 4.3, not 2: a bootstrap that
    resamples 3 seeds gives intervals less than half as wide as the spread warrants."""
    n_seeds, n_items = d.shape
    parts = variance_parts(d)
    var = sum(v for v, _ in parts)
    half = t_quantile(satterthwaite(parts)) * var ** 0.5 if var > 0 else 0.0
    mean = float(d.mean())
    return {"mean": round(mean, 4), "lo": round(mean - half, 4), "hi": round(mean + half, 4),
            "per_seed": [round(float(v), 4) for v in d.mean(axis=1)], "n": int(n_items),
            "sd_seeds": round(float(d.mean(axis=1).std(ddof=1)), 4) if n_seeds > 1 else None}


def variance_parts(d, n_seeds=None):
    """[(variance it adds to the mean, degrees of freedom)]: the two-way random-effects model
    d[s, i] = mu + seed_s + item_i + e_si, its three variances from the ANOVA mean squares (clipped at 0),
    each divided by how many draws the mean averages. n_seeds: the same for a study with that many seeds
    of the spread measured here. One seed: only the items' spread (the seeds' cannot be measured)."""
    S, n_items = d.shape
    n = n_seeds or S
    item_means = d.mean(axis=0)
    if S == 1:
        return [(float(item_means.var(ddof=1)) / n_items, n_items - 1)] if n_items > 1 else []
    seed_means = d.mean(axis=1)
    if n_items == 1:
        return [(float(seed_means.var(ddof=1)) / n, n - 1)]
    resid = d - seed_means[:, None] - item_means[None, :] + d.mean()
    interaction = float((resid ** 2).sum()) / ((S - 1) * (n_items - 1))
    seed = max(float(seed_means.var(ddof=1)) - interaction / n_items, 0.0)
    item = max(float(item_means.var(ddof=1)) - interaction / S, 0.0)
    parts = [(seed / n, n - 1), (item / n_items, n_items - 1),
             (interaction / (n * n_items), (n - 1) * (n_items - 1))]
    return [(v, k) for v, k in parts if v > 0]


def satterthwaite(parts):
    num = sum(v for v, _ in parts) ** 2
    den = sum(v * v / k for v, k in parts)
    return num / den if den > 0 else float("inf")


def t_quantile(df):
    from scipy import stats
    return float(stats.t.ppf(0.975, df))


def seeds_to_decide(d, limit=100):
    """For an undecided contrast: the fewest seeds (more than it has) at which one of this spread would
    get a verdict -- its interval excluding 0 at its present mean, or lying within +-0.03 -- if the
    seeds' spread stayed as measured. None when no number up to `limit` would (the test items' own
    spread is too wide) or the spread cannot be measured (one seed)."""
    S = d.shape[0]
    if S < 2:
        return None
    mean = abs(float(d.mean()))
    for n in range(S + 1, limit + 1):
        parts = variance_parts(d, n)
        half = t_quantile(satterthwaite(parts)) * sum(v for v, _ in parts) ** 0.5
        if half < mean or mean + half <= 0.03:
            return n
    return None


def verdict(ci, direction):
    """direction: +1 / -1 = the paper's sign of B - A, 0 = a control with no paper claim."""
    if ci["lo"] > 0 or ci["hi"] < 0:
        sign = 1 if ci["lo"] > 0 else -1
        if direction == 0:
            return "B > A" if sign > 0 else "B < A"
        return "reproduced" if sign == direction else "reversed"
    if -0.03 <= ci["lo"] and ci["hi"] <= 0.03:
        return "no effect (within ±0.03)"
    return "undecided (interval too wide)"


def decided(d, direction):
    """A contrast's interval, its verdict and, while undecided, the seeds it would take."""
    ci = interval(d)
    ci["verdict"] = verdict(ci, direction)
    ci["seeds_to_decide"] = seeds_to_decide(d) if ci["verdict"].startswith("undecided") else None
    return ci


# The claims. Each contrast: B - A of a metric, paired by seed and step (or episode). Sources:
# ../shared/seeds/ (MAG: 000_..., WebMRE: 003_...). "paper" is the paper's own figure for the row.
SFT_GF = "sft_guide_first"
CONTRASTS = [
    # id, claim, metric, (probe, arm) A, (probe, arm) B, paper figure, paper direction of B - A
    ("W1", "WebMRE: a gold guide as prefix raises action accuracy", "step", ("none", SFT_GF), ("gold", SFT_GF),
     ".422 -> .684", +1),
    ("W1e", "  (the same, element accuracy)", "element", ("none", SFT_GF), ("gold", SFT_GF), ".422 -> .684", +1),
    ("W2", "WebMRE: another step's guide collapses it", "step", ("none", SFT_GF), ("other_step", SFT_GF),
     ".422 -> .055", -1),
    ("W2b", "  (another step's guide against the gold guide: both forced, so only the content differs)", "step",
     ("gold", SFT_GF), ("other_step", SFT_GF), ".684 -> .055", -1),
    ("W3a", "WebMRE: a paraphrase without the label recovers part of the gain", "step", ("none", SFT_GF),
     ("paraphrase", SFT_GF), "about half of gold's gain", +1),
    ("W3b", "  ... but less than the gold guide", "step", ("paraphrase", SFT_GF), ("gold", SFT_GF),
     "gold > paraphrase", +1),
    ("W4", "WebMRE: guide-first decoding beats action-only", "step", ("none", "sft_action_only"), ("none", SFT_GF),
     "+0.2 to +2.2 points", +1),
    ("W4b", "  (action-first against action-only)", "step", ("none", "sft_action_only"),
     ("none", "sft_action_first"), "+0.2 to +2.2 points", +1),
    ("W5", "WebMRE: the offline guide reward ranks guides (gold over another step's)", "guide_reward",
     ("other_step", SFT_GF), ("gold", SFT_GF), "ranks guides by help", +1),
    ("W5b", "  (gold over paraphrase)", "guide_reward", ("paraphrase", SFT_GF), ("gold", SFT_GF),
     "ranks guides by help", +1),
    ("M1", "MAG: GRPO with expert trajectories lifts the SFT agent", "step", ("none", SFT_GF),
     ("none", "grpo_always"), "task success 6.9% -> 13.2%", +1),
    ("M2", "MAG: GRPO without experts helps less", "step", ("none", "grpo_off"), ("none", "grpo_always"),
     "expert > no expert", +1),
    ("M3", "MAG: ... and improves guide quality (ROUGE-L)", "guide_rouge_l", ("none", SFT_GF),
     ("none", "grpo_always"), "better guides", +1),
    ("C1", "control: GRPO+expert against continued SFT on as many expert examples", "step",
     ("none", "contsft"), ("none", "grpo_always"), "(not in the paper)", 0),
    ("C2", "control: expert in every group against only in all-wrong groups", "step", ("none", "grpo_when_wrong"),
     ("none", "grpo_always"), "(not in the paper)", 0),
    ("C3", "guide reward: WebMRE's offline reward against ROUGE-L (step success)", "step", ("none", "grpo_always"),
     ("none", "grpo_always_offline"), "(not in the paper)", 0),
    ("C3g", "  (the same, guide ROUGE-L)", "guide_rouge_l", ("none", "grpo_always"),
     ("none", "grpo_always_offline"), "(not in the paper)", 0),
    ("C4", "guide reward: reference-free grounding against ROUGE-L (step success)", "step", ("none", "grpo_always"),
     ("none", "grpo_always_grounding"), "(not in the paper)", 0),
]
LIVE_CONTRASTS = [
    ("M1L", "MAG, live: GRPO with expert trajectories lifts the SFT agent", SFT_GF, "grpo_always",
     "6.9% -> 13.2%", +1),
    ("M2L", "MAG, live: GRPO without experts helps less", "grpo_off", "grpo_always", "expert > no expert", +1),
]
ARM_METRICS = ("step", "element", "valid", "joint", "guide_rouge_l", "guide_bleu", "guide_chrf", "guide_grounding",
               "guide_reward")


def grpo_curves(out, arm, seeds, fields=("reward", "accuracy", "dropped_frac")):
    """{field: [seeds x steps]} from train_grpo.py's <out>.log.jsonl (logs written before the rename call
    dropped_frac zero_var_frac)."""
    import numpy as np
    logs = [[json.loads(line) for line in open(out / "ckpt" / f"{arm}_s{s}.log.jsonl")] for s in seeds]
    n = min(len(rows) for rows in logs)
    old = {"dropped_frac": "zero_var_frac"}
    return {f: np.array([[r.get(f, r.get(old.get(f))) for r in rows[:n]] for rows in logs], dtype=float)
            for f in fields}


def majority_baseline(out, split):
    """The training split's most frequent action (op, mark, value), answered at every step of `split`:
    what a model that reads nothing scores. A tiny model's step success reads against this floor.
    -> (its summary, {metric: {(episode id, step): score}})."""
    sys.path.insert(0, str(ROOT))
    import metrics  # the protocol's own scorer, so the floor is scored exactly like the replays
    episodes = metrics.load_dataset(str(out / "data"))
    key = lambda a: (a["op"], a.get("mark"), a.get("value"))
    counts = {}
    for ep in episodes:
        for step in ep["steps"] if ep.get("split") == "train" else []:
            counts[key(step["action"])] = counts.get(key(step["action"]), 0) + 1
    op, mark, value = max(sorted(counts, key=str), key=counts.get)
    action = {"op": op, "mark": mark, "point": None, "value": value}
    rows = {m: {} for m in ("step", "element")}
    for ep in sorted(episodes, key=lambda e: e["id"]):
        for k, step in enumerate(ep["steps"]) if ep.get("split") == split else []:
            text = metrics.format_output(None, action, "som", "action_only", ep["viewport"])
            scores = metrics.score_step(text, step, "som", "action_only", ep["viewport"])
            for m in rows:
                rows[m][(ep["id"], k)] = scores[m]
    res = {m: interval(as_array(v)) for m, v in rows.items()}
    return {"action": metrics.format_action(action, "som", episodes[0]["viewport"]), **res}, rows


def random_baseline(out):
    """The random policy's floor: replay.py --baseline random on the scored split and evaluate.py --policy
    random live on the live seeds -> (its summary, {metric: {(episode id, step): score}})."""
    with open(out / "replay" / "floor" / "random" / "predictions.jsonl") as f:
        preds = [json.loads(line) for line in f]
    rows = {m: {(p["id"], p["step"]): p["scores"][m] for p in preds} for m in ("step", "element", "valid")}
    live = json.loads((out / "live" / "floor" / "random" / "results.json").read_text())["per_episode"]
    success = {r["id"]: r["success"] or 0 for r in live}
    summary = {m: interval(as_array(v)) for m, v in rows.items()}
    return {**summary, "live": {"success": interval(as_array(success))}}, rows


def as_array(by_key):
    """{key: value} -> a [1 x items] array in key order (one 'seed': a floor is not trained)."""
    import numpy as np
    return np.array([[by_key[k] for k in sorted(by_key)]], dtype=float)


def by_suite(values, keys):
    """{suite: interval} of a [seeds x steps] array whose columns are `keys`, (episode id, step) pairs."""
    suite = lambda key: key[0].split(".")[0]
    return {s: interval(values[:, [i for i, k in enumerate(keys) if suite(k) == s]])
            for s in sorted({suite(k) for k in keys})}


def report(out, a):
    """results.json, claims.md and plots/ from the finished runs of this plan (what an earlier plan left
    in the folder is not read)."""
    seeds, planned = list(range(a.seeds)), {r["name"] for r in plan(a)}
    res = {"settings": json.loads((out / "settings.json").read_text()), "arms": {}, "contrasts": [], "grpo": {}}
    res["majority_baseline"], majority = majority_baseline(out, a.eval_split)
    res["random_baseline"], random = random_baseline(out)
    res["by_suite"] = {name: by_suite(as_array(rows["step"]), sorted(rows["step"]))
                       for name, rows in (("always the most frequent action", majority), ("random policy", random))}
    arms = sorted({arm_of(name) for name in planned if name.startswith("replay/none/")})
    for arm in arms:
        probes = sorted(name.split("/")[1] for name in planned if name.startswith("replay/") and name.endswith(
            f"/{arm}_s0"))
        res["arms"][arm] = {}
        for probe in probes:
            values = {m: replay_values(out, probe, arm, m, seeds) for m in ARM_METRICS}
            res["arms"][arm][probe] = {m: interval(v) for m, v in values.items() if v is not None}
        keys = shared_steps(out, [("none", arm)], seeds)
        res["by_suite"][arm] = by_suite(replay_values(out, "none", arm, "step", seeds, keys), keys)
        if f"live/{arm}_s0" in planned:
            res["arms"][arm]["live"] = {m: interval(live_values(out, arm, m, seeds))
                                        for m in ("success", "joint")}
    for cid, claim, metric, (pa, aa), (pb, ab), paper, direction in CONTRASTS:
        if not (f"replay/{pa}/{aa}_s0" in planned and f"replay/{pb}/{ab}_s0" in planned):
            continue
        keys = shared_steps(out, [(pa, aa), (pb, ab)], seeds)
        va, vb = (replay_values(out, probe, arm, metric, seeds, keys) for probe, arm in ((pa, aa), (pb, ab)))
        ci = decided(vb - va, direction)
        res["contrasts"].append({"id": cid, "claim": claim, "metric": metric, "a": f"{aa} / probe {pa}",
                                 "b": f"{ab} / probe {pb}", "paper": paper, "a_mean": round(float(va.mean()), 4),
                                 "b_mean": round(float(vb.mean()), 4), **ci})
    for cid, claim, aa, ab, paper, direction in LIVE_CONTRASTS:
        if f"live/{aa}_s0" in planned and f"live/{ab}_s0" in planned:
            va, vb = live_values(out, aa, "success", seeds), live_values(out, ab, "success", seeds)
            ci = decided(vb - va, direction)
            res["contrasts"].append({"id": cid, "claim": claim, "metric": "live task success", "a": aa, "b": ab,
                                     "paper": paper, "a_mean": round(float(va.mean()), 4),
                                     "b_mean": round(float(vb.mean()), 4), **ci})
    for arm in ("grpo_off", "grpo_always", "grpo_when_wrong", "grpo_always_offline", "grpo_always_grounding"):
        if f"ckpt/{arm}_s0" in planned:
            curves = grpo_curves(out, arm, seeds)
            res["grpo"][arm] = {f: round(float(v.mean()), 4) for f, v in curves.items()}
    (out / "results.json").write_text(json.dumps(res, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    table = claims_markdown(res)
    (out / "claims.md").write_text(table)
    plots(out, res, seeds)
    print(table)
    return res


def claims_markdown(res):
    """One row per claim, then one row per arm: what docs/reproduce.md shows."""
    fmt = lambda c: f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"
    lines = ["| id | claim | metric | paper | A → B (mean over seeds) | B − A [95% CI] | verdict | seeds to decide |",
             "|---|---|---|---|---|---|---|---|"]
    for c in res["contrasts"]:
        need = c.get("seeds_to_decide")
        need = "-" if not c["verdict"].startswith("undecided") else "n/a" if need is None else str(need)
        lines.append(f"| {c['id']} | {c['claim']} | {c['metric']} | {c['paper']} | "
                     f"{c['a_mean']:.3f} → {c['b_mean']:.3f} | {fmt(c)} | {c['verdict']} | {need} |")
    lines += ["", "Seeds to decide: how many training seeds of the spread measured here would give an undecided "
              "row a verdict at its present mean; n/a: no number up to 100 would (the test items' own spread is "
              "too wide), or one seed cannot measure the spread."]
    if res["grpo"]:
        lines += ["", "| GRPO arm | mean reward | mean action accuracy | groups dropped (no signal) |",
                  "|---|---|---|---|"]
        for arm, v in res["grpo"].items():
            lines.append(f"| {arm} | {v['reward']:.3f} | {v['accuracy']:.3f} | {v['dropped_frac']:.2f} |")
    cols = ("step", "element", "valid", "joint", "guide_rouge_l", "guide_reward")
    lines += ["", "| arm (probe none) | " + " | ".join(cols) + " | live success |", "|---" * (len(cols) + 2) + "|"]
    ci = lambda c: f"{c['mean']:.3f} ± {(c['hi'] - c['lo']) / 2:.3f}" if c else "-"
    for arm, probes in res["arms"].items():
        live = probes.get("live", {}).get("success")
        cells = [ci(probes["none"].get(m)) for m in cols]
        cells.append(ci(live))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    base, rand = res["majority_baseline"], res["random_baseline"]
    lines.append(f"| always `{base['action']}` (the training split's most frequent action) | {ci(base['step'])} | "
                 f"{ci(base['element'])} | - | - | - | - | - |")
    lines.append(f"| random policy (action only) | {ci(rand['step'])} | {ci(rand['element'])} | {ci(rand['valid'])} | "
                 f"- | - | - | {ci(rand['live']['success'])} |")
    suites = sorted({s for by in res["by_suite"].values() for s in by})
    lines += ["", "| step success by suite | " + " | ".join(suites) + " |", "|---" * (len(suites) + 1) + "|"]
    for name, by in res["by_suite"].items():
        lines.append(f"| {name} | " + " | ".join(ci(by.get(s)) for s in suites) + " |")
    if SFT_GF in res["arms"]:
        pcols = ("step", "element", "valid", "guide_reward")
        lines += ["", f"| probe ({SFT_GF}) | " + " | ".join(pcols) + " |", "|---" * (len(pcols) + 1) + "|"]
        for probe in ("gold", "paraphrase", "none", "other_step"):
            if probe in res["arms"][SFT_GF]:
                lines.append(f"| {probe} | " + " | ".join(ci(res["arms"][SFT_GF][probe].get(m)) for m in pcols) + " |")
    return "\n".join(lines) + "\n"


def plots(out, res, seeds):
    """plots/probes.png (WebMRE's probes on the guide-first SFT agent), plots/grpo.png (MAG's GRPO arms) and
    plots/arms.png (every arm against the floors)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    (out / "plots").mkdir(exist_ok=True)
    plt.rcParams.update({"font.size": 9, "svg.hashsalt": "mag", "figure.dpi": 100})
    meta = {"Software": None}  # no matplotlib version or date in the PNG: the same runs give the same bytes

    if SFT_GF in res["arms"]:
        probes = [p for p in ("gold", "paraphrase", "none", "other_step") if p in res["arms"][SFT_GF]]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        x = np.arange(len(probes))
        for j, (m, label) in enumerate((("element", "element accuracy"), ("step", "step success"))):
            cis = [res["arms"][SFT_GF][p][m] for p in probes]
            ax.bar(x + (j - 0.5) * 0.36, [c["mean"] for c in cis], 0.36, label=label,
                   yerr=[[c["mean"] - c["lo"] for c in cis], [c["hi"] - c["mean"] for c in cis]], capsize=3)
        paper = {"gold": 0.684, "none": 0.422, "other_step": 0.055}
        ax.scatter([i for i, p in enumerate(probes) if p in paper], [paper[p] for p in probes if p in paper],
                   marker="D", color="black", zorder=3, label="WebMRE (action accuracy)")
        ax.set_xticks(x, [{"none": "own guide", "other_step": "other step's"}.get(p, p) for p in probes])
        ax.set_ylabel("test split, mean over seeds")
        ax.set_title("Guide forced as prefix (guide-first SFT agent), 95% CI")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "plots" / "probes.png", metadata=meta)
        plt.close(fig)

    grpo_arms = [arm for arm in ("grpo_off", "grpo_when_wrong", "grpo_always") if arm in res["grpo"]]
    if grpo_arms:
        fig, axes = plt.subplots(1, 4, figsize=(13, 3))
        for arm in grpo_arms:
            curves = grpo_curves(out, arm, seeds)
            for ax, f in zip(axes, ("reward", "accuracy", "dropped_frac")):
                v = curves[f]
                w = min(5, v.shape[1])  # a running mean over 5 steps: one step holds 4 prompts only
                smooth = np.stack([np.convolve(r, np.ones(w) / w, mode="valid") for r in v])
                steps = np.arange(w, v.shape[1] + 1)
                ax.plot(steps, smooth.mean(axis=0), label=arm)
                ax.fill_between(steps, smooth.min(axis=0), smooth.max(axis=0), alpha=0.2)
                ax.set_title({"reward": "reward (policy samples)", "accuracy": "action accuracy (samples)",
                              "dropped_frac": "groups dropped (no signal)"}[f])
                ax.set_xlabel("GRPO step")
        bars = [arm for arm in (SFT_GF, "contsft", "grpo_off", "grpo_when_wrong", "grpo_always") if arm in res["arms"]]
        cis = [res["arms"][arm]["none"]["step"] for arm in bars]
        axes[3].bar(range(len(bars)), [c["mean"] for c in cis],
                    yerr=[[c["mean"] - c["lo"] for c in cis], [c["hi"] - c["mean"] for c in cis]], capsize=3)
        axes[3].set_xticks(range(len(bars)), bars, rotation=30, ha="right")
        axes[3].set_title("test step success, 95% CI")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "plots" / "grpo.png", metadata=meta)
        plt.close(fig)
    arms_plot(out, res, plt, meta)


def arms_plot(out, res, plt, meta):
    """plots/arms.png: each arm's test scores and live success, 95% CI, against the random and the
    most-frequent-action floors (dashed: step success; dotted: live success)."""
    import numpy as np
    metrics_ = (("step", "step success"), ("element", "element accuracy"), ("joint", "joint step"),
                ("guide_rouge_l", "guide ROUGE-L"), ("live", "live task success"))
    arms = [arm for arm in (SFT_GF, "contsft", "grpo_off", "grpo_always") if arm in res["arms"]]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.8 / len(metrics_)
    for j, (m, label) in enumerate(metrics_):
        cis = [res["arms"][arm].get("live", {}).get("success") if m == "live" else res["arms"][arm]["none"].get(m)
               for arm in arms]
        x = np.arange(len(arms)) + (j - (len(metrics_) - 1) / 2) * width
        mean = [c["mean"] if c else 0.0 for c in cis]
        err = [[c["mean"] - c["lo"] if c else 0.0 for c in cis], [c["hi"] - c["mean"] if c else 0.0 for c in cis]]
        ax.bar(x, mean, width, label=label, yerr=err, capsize=2)
    rand, base = res["random_baseline"], res["majority_baseline"]
    ax.axhline(base["step"]["mean"], color="black", ls="--", lw=0.8, label="floor: most frequent action (step)")
    ax.axhline(rand["step"]["mean"], color="gray", ls="--", lw=0.8, label="floor: random policy (step)")
    ax.axhline(rand["live"]["success"]["mean"], color="gray", ls=":", lw=0.8, label="floor: random policy (live)")
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylim(0, 1)
    ax.set_title("Test split and live held-out seeds, mean over seeds, 95% CI")
    ax.legend(fontsize=6, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "plots" / "arms.png", metadata=meta)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(a).items() if k not in ("jobs", "threads", "python", "out")}
    (out / "settings.json").write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")   # for the report
    runs = plan(a)
    t0 = time.time()
    try:
        execute(runs, a, out)
    except KeyboardInterrupt:
        raise SystemExit(f"reproduce: stopped; finished runs are kept in {out}: the same command continues")
    print(f"reproduce: {len(runs)} runs finished ({time.time() - t0:.0f} s this time); analysing", file=sys.stderr)
    report(out, a)


if __name__ == "__main__":
    main()
