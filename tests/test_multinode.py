"""Training past one machine: both trainers run as 2 "nodes" x 1 rank -- two torchrun launches meeting at a
c10d rendezvous on 127.0.0.1, exactly what docs/scale-out.md's multi-node commands do on two hosts -- and give what
one process (SFT) or one two-rank node (GRPO, whose ranks each roll out their own share) gives."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(script, args):
    """Launch `script` on 2 nodes x 1 rank: two torchrun agents, one rendezvous endpoint."""
    rdzv = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "mag-test"]
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *rdzv, os.path.join(ROOT, script),
                               *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    try:
        logs = [node.communicate(timeout=300)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert all(node.returncode == 0 for node in nodes), "\n".join(log[-3000:] for log in logs)


def one_node(script, args, nproc):
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                    os.path.join(ROOT, script), *args], check=True, env=ENV, capture_output=True, timeout=300)


def weights_and_log(out):
    with open(out + ".log.jsonl") as f:
        return load_file(os.path.join(out, "model.safetensors")), [json.loads(line) for line in f]


def test_sft_on_two_nodes_matches_one_process(tiny_models, toy_data, tmp_path):
    opts = ["--data", toy_data, "--ckpt", tiny_models["qwen2_5_vl"], "--split", "all", "--val-split", "",
            "--no-progress", "--batch-size", "2", "--grad-accum", "2", "--max-steps", "3", "--lr", "3e-3",
            "--warmup", "1", "--device", "cpu"]
    two_nodes("train_sft.py", [*opts, "--out", str(tmp_path / "nodes")])
    one_node("train_sft.py", [*opts, "--out", str(tmp_path / "one")], nproc=1)
    (a, log_a), (b, log_b) = weights_and_log(str(tmp_path / "nodes")), weights_and_log(str(tmp_path / "one"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [r["loss"] for r in log_a] == pytest.approx([r["loss"] for r in log_b], rel=1e-5)


def test_grpo_on_two_nodes_matches_two_ranks_on_one_node(tiny_models, toy_data, tmp_path):
    opts = ["--ckpt", tiny_models["qwen2_5_vl"], "--data", toy_data, "--split", "all", "--no-progress", "--device",
            "cpu", "--group-size", "2", "--prompts-per-step", "2", "--max-new-tokens", "8", "--max-steps", "2"]
    two_nodes("train_grpo.py", [*opts, "--out", str(tmp_path / "nodes")])
    one_node("train_grpo.py", [*opts, "--out", str(tmp_path / "node")], nproc=2)
    (a, log_a), (b, log_b) = weights_and_log(str(tmp_path / "nodes")), weights_and_log(str(tmp_path / "node"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [r["step"] for r in log_a] == [1, 2]
    untimed = lambda r: {k: v for k, v in r.items() if not k.endswith(("_s", "sec", "dt"))}  # noqa: E731
    for ra, rb in zip(log_a, log_b):   # the same rollouts, rewards and loss: timings aside
        ra, rb = untimed(ra), untimed(rb)
        assert ra.keys() == rb.keys()
        for k in ra:
            assert ra[k] == (pytest.approx(rb[k], rel=1e-5) if isinstance(rb[k], float) else rb[k]), k
