#!/usr/bin/env bash
# The GPU checks of training at real scale, in one command on one CUDA GPU (about 8 minutes on an H200),
# written to one JSON file ($OUT/gpu.json) and a table on the console:
#   1. the bench checkpoints: random-init Qwen2.5-VL-3B and -7B at their published sizes, the real
#      vocabulary (151,936), a BPE tokenizer trained offline (bench/bench_model.py; built once, kept);
#   2. GRPO at 3B, ours against TRL's GRPOTrainer at its default gradient checkpointing: s/step, CUDA peak
#      (bench/grpo_step.py: 4 prompts x G=8, 32 new tokens, --elements text), rollout tok/s against one
#      generate per sample, and the attention kernels the profiler saw in a rollout and in an update;
#   3. SFT at 3B, batch 8: total tokens/s (prompt + image + reply) and MFU (train_sft.py's log);
#   4. GRPO at 7B, ours, one timed step: s/step and CUDA peak (does it fit);
#   5. the CUDA pytest subset: tests/test_grpo.py, test_sft.py, test_replay.py.
#
#   bash bench/gpu.sh [WHEELS_DIR]   # WHEELS_DIR or $MAG_WHEELS: pip install --no-index every wheel there first
#   DRY=1 bash bench/gpu.sh          # the same plumbing on a CPU with a tiny model (a few minutes; no 7B)
#
# Environment: PY (default .venv/bin/python), TRL_PY (an interpreter with trl; default .venv-bench-sft's, else PY
# when it has trl; without one the TRL rows are skipped), DATA (a dataset folder, e.g. back-office episodes;
# default: 12 synthetic episodes with 1280x800 screenshots), OUT (default bench/out/gpu).
# Nothing comes from the network. FlashAttention-2 is used when flash-attn is installed (SDPA otherwise:
# the FA2 rows are simply not there); each part has its own time limit and a failed part is recorded, not fatal.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
abspath() {  # an absolute path that keeps a venv's python a venv's (readlink -f would follow it to the base one)
  echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
}
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
fi
PY=$(abspath "$PY")
OUT=${OUT:-bench/out/gpu}
WHEELS=${1:-${MAG_WHEELS:-}}
DRY=${DRY:-0}
mkdir -p "$OUT"
OUT=$(abspath "$OUT")
STATUS="$OUT/status.txt"
: > "$STATUS"
T0=$(date +%s)

part() {  # part NAME SECONDS COMMAND...: run with a time limit, record exit status and seconds
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  echo "$name $rc $(( $(date +%s) - start ))" >> "$STATUS"
  [ "$rc" = 0 ] || echo "== $name: exit status $rc$([ "$rc" = 124 ] && echo ' (its time limit)'), see $OUT/$name.log"
}

if [ -n "$WHEELS" ]; then  # e.g. transformers, trl, flash-attn wheels carried to a machine with no registry
  part wheels 180 bash -c '"$0" -m pip install -q --no-index --find-links "$1" "$1"/*.whl || \
    "$0" -m pip install -q --no-index --break-system-packages --find-links "$1" "$1"/*.whl' "$PY" "$WHEELS"
fi
if [ -z "${TRL_PY:-}" ]; then
  if [ -x .venv-bench-sft/bin/python ]; then TRL_PY=.venv-bench-sft/bin/python; else TRL_PY=$PY; fi
fi
TRL_PY=$(abspath "$TRL_PY")  # TRL's side runs as a child process: an absolute path, whatever its cwd
TRL_ARGS=(--trl-python "$TRL_PY" --trl-grad-checkpointing)
"$TRL_PY" -c "import trl" 2>/dev/null || { echo "no trl in $TRL_PY: TRL rows skipped"; TRL_ARGS=(--skip-trl); }

"$PY" - "$OUT/env.json" "$TRL_PY" <<'EOF'
import importlib.util, json, platform, subprocess, sys
import torch, transformers
env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
       "cuda": torch.cuda.is_available(), "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
       "flash_attn": importlib.util.find_spec("flash_attn") is not None}
trl = subprocess.run([sys.argv[2], "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True)
env["trl"] = trl.stdout.strip() or None
json.dump(env, open(sys.argv[1], "w"), indent=1)
print(json.dumps(env))
EOF

if [ "$DRY" = 1 ]; then  # the plumbing on a CPU: a tiny model with the real vocabulary and processor
  SMALL=test BIG=test SCREEN=160x120 SIZE=(--prompts 2 --group-size 2 --max-new-tokens 8)
  STEPS=(--steps 2 --skip 1) SFT_STEPS=2 TESTS=(tests/test_grpo.py -k "prefilled_once and qwen2_5_vl")
else
  SMALL=3b BIG=7b SCREEN=1280x800 SIZE=(--prompts 4 --group-size 8 --max-new-tokens 32)
  STEPS=(--steps 4 --skip 1) SFT_STEPS=6 TESTS=(tests/test_grpo.py tests/test_sft.py tests/test_replay.py)
fi
CK_SMALL=bench/out/qwen2_5_vl-$SMALL CK_BIG=bench/out/qwen2_5_vl-$BIG
DATA_ARGS=(--screen "$SCREEN")
if [ -n "${DATA:-}" ]; then DATA_ARGS=(--data "$DATA"); fi

part build_small 240 "$PY" bench/bench_model.py --size "$SMALL" --out "$CK_SMALL" --json "$OUT/tokenizer.json"
part grpo_small 300 "$PY" bench/grpo_step.py --ckpt "$CK_SMALL" "${DATA_ARGS[@]}" --elements text --rounds 1 \
  "${SIZE[@]}" "${STEPS[@]}" "${TRL_ARGS[@]}" --json "$OUT/grpo_small.json"

# SFT on the same model and data: batch 8, no checkpoint written; MFU against an H100/H200's 989 bf16 TFLOP/s
SFT_DATA=${DATA:-$OUT/sft_data}
if [ -z "${DATA:-}" ]; then
  "$PY" -c "import sys; sys.path.insert(0, 'tests'); from conftest import make_toy_dataset as m; \
w, h = map(int, '$SCREEN'.split('x')); m('$SFT_DATA', n_episodes=12, size=(w, h))"
fi
SFT=(train_sft.py --data "$SFT_DATA" --split all --val-split "" --ckpt "$CK_SMALL" --elements text --batch-size 8
     --max-steps "$SFT_STEPS" --warmup 0 --lr 1e-5 --save-every 0 --peak-tflops "${PEAK_TFLOPS:-989}" --no-progress
     --out "$OUT/sft")
rm -f "$OUT/sft.log.jsonl"
part sft_small 150 "$PY" "${SFT[@]}"
if [ "$(grep -c . "$OUT/sft.log.jsonl" 2>/dev/null)" != "$SFT_STEPS" ]; then  # out of memory: recompute activations
  rm -f "$OUT/sft.log.jsonl"
  part sft_small_checkpointed 150 "$PY" "${SFT[@]}" --grad-checkpointing
fi

# the CUDA test subset runs beside the 7B build (mostly writing to disk; the tests' models are tiny), and is
# waited for before the 7B step, which needs the GPU's memory to itself
PYTEST_START=$(date +%s)
timeout 300 "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" --junitxml "$OUT/pytest.xml" > "$OUT/pytest.log" 2>&1 &
PYTEST_PID=$!
if [ "$DRY" != 1 ]; then
  part build_big 240 "$PY" bench/bench_model.py --size "$BIG" --out "$CK_BIG"
fi
wait "$PYTEST_PID"
echo "pytest $? $(( $(date +%s) - PYTEST_START ))" >> "$STATUS"
tail -3 "$OUT/pytest.log"
# 7B: fp32 weights + gradients + AdamW are 124 GiB before activations; recompute them
part grpo_big 240 "$PY" bench/grpo_step.py --ckpt "$CK_BIG" "${DATA_ARGS[@]}" --elements text --rounds 1 \
  "${SIZE[@]}" --steps 2 --skip 1 --skip-trl --skip-rollout --grad-checkpointing --json "$OUT/grpo_big.json"

"$PY" - "$OUT" "$(( $(date +%s) - T0 ))" "$SMALL" "$BIG" <<'EOF'
import json, os, statistics, sys
import xml.etree.ElementTree as ET
out, seconds, small, big = sys.argv[1], int(sys.argv[2]), sys.argv[3].upper(), sys.argv[4].upper()

def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None

report = {"seconds": seconds, "env": load("env.json"), "tokenizer": load("tokenizer.json"),
          "parts": {n: {"exit": int(rc), "seconds": int(s)} for n, rc, s in (l.split() for l in open(f"{out}/status.txt"))},
          "sizes": [small, big], "grpo_small": load("grpo_small.json"), "grpo_big": load("grpo_big.json")}
if os.path.exists(f"{out}/sft.log.jsonl"):
    log = [json.loads(l) for l in open(f"{out}/sft.log.jsonl")][1:] or [None]  # the first step warms up
    if log[0]:
        report["sft_small"] = {k: statistics.median(r[k] for r in log) for k in ("tok_per_s", "target_tok_per_s", "dt")}
        report["sft_small"]["mfu"] = statistics.median(r["mfu"] or 0 for r in log)
        report["sft_small"]["tokens_per_step"] = log[0]["tokens"]
        report["sft_small"]["grad_checkpointing"] = "sft_small_checkpointed" in report["parts"]
if os.path.exists(f"{out}/pytest.xml"):
    suite = ET.parse(f"{out}/pytest.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    report["pytest"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    report["pytest"]["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                                  if c.find("failure") is not None or c.find("error") is not None]
json.dump(report, open(f"{out}/gpu.json", "w"), indent=1)

def row(label, value):
    print(f"{label:44}{value}")
g3, g7, sft = report["grpo_small"], report["grpo_big"], report.get("sft_small")
print(f"\n{(report['env'] or {}).get('gpu')}; flash-attn {(report['env'] or {}).get('flash_attn')}; {seconds} s in all")
if g3:
    o, t = g3["step"]["ours"], g3["step"].get("trl")
    row(f"GRPO {small} ours s/step (median), CUDA peak", f"{o['s_per_step_median']:.2f} s, {o.get('cuda_peak_gib', 0):.1f} GiB")
    if t:
        row(f"GRPO {small} TRL (grad. checkpointing)", f"{t['s_per_step_median']:.2f} s, {t.get('cuda_peak_gib', 0):.1f} GiB")
        row("ours / TRL: time, memory", f"{g3['step']['ratio']['s_per_step_median']:.2f}x, "
            f"{g3['step']['ratio'].get('cuda_peak_gib', float('nan')):.2f}x")
    r = g3.get("rollout")
    if r:
        row("rollout tok/s ours vs generate per sample", f"{r['ours_tok_s']:.0f} vs {r['naive_tok_s']:.0f} "
            f"({r['speedup']:.1f}x), same greedy {r['same_greedy_replies']}/{r['replies']}, {r['attention']}")
        for where, kernels in r.get("attention_kernels", {}).items():
            row(f"attention kernels, {where}", "; ".join(kernels[:2]) or "none found")
if sft:
    row(f"SFT {small} batch 8: tok/s (target tok/s), MFU", f"{sft['tok_per_s']:.0f} ({sft['target_tok_per_s']:.0f}), "
        f"{sft['mfu']:.1%}")
if g7:
    o = g7["step"]["ours"]
    row(f"GRPO {big} ours s/step, CUDA peak", f"{o['s_per_step_median']:.2f} s, {o.get('cuda_peak_gib', 0):.1f} GiB")
if "pytest" in report:
    p = report["pytest"]
    row("pytest (CUDA subset)", f"{p['tests']} tests, {p['failures'] + p['errors']} failed, {p['skipped']} skipped "
        + " ".join(p["failed"]))
print(f"-> {out}/gpu.json")
EOF
