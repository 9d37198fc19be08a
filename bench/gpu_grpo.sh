#!/usr/bin/env bash
# GRPO on one CUDA GPU, one command, under 10 minutes on an H200 (not yet run: written on a CPU-only
# machine). A random-init model of Qwen2.5-VL-3B's size (no weights downloaded), bf16 autocast,
# FlashAttention-2 (when flash-attn is installed) against SDPA: s/step and CUDA peak memory of
# train_grpo.py and of TRL's GRPOTrainer, and rollout tok/s of train_grpo.sample against one
# model.generate per prompt and sample. Writes bench/out/grpo_real.json.
#
#   make install && make .venv-bench-sft/.installed   # once: .venv (+ pip install -r requirements-cuda.txt for flash-attn)
#   bash bench/gpu_grpo.sh                            # PY=... TRL_PY=... to use other interpreters
#
# Sizes are kept small enough for the time limit: 4 prompts x G=8 per step, 32 new tokens, 5 steps
# (2 warm-up) per side, one round; six child processes in all (ours, TRL, rollouts; per attention).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TRL_PY=${TRL_PY:-.venv-bench-sft/bin/python}
export HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if "$PY" -c "import flash_attn" 2>/dev/null; then
  echo "flash-attn installed: 'auto' rows use FlashAttention-2"
else
  echo "flash-attn NOT installed: 'auto' rows fall back to SDPA (pip install -r requirements-cuda.txt)"
fi
args=(--real --steps 5 --skip 2 --prompts 4 --group-size 8 --max-new-tokens 32)
if [ -x "$TRL_PY" ]; then args+=(--trl-python "$TRL_PY"); else echo "no TRL venv at $TRL_PY: ours only"; args+=(--skip-trl); fi
timeout 590 "$PY" bench/grpo_step.py "${args[@]}"
