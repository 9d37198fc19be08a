"""annotate.py --drafter local: a checkpoint folder drafts through transformers, checked like the api drafter."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import annotate
import metrics


def blank_copy(src, dst, episodes=None):
    """A copy of the toy dataset with every guide and paraphrase removed (drafting skips guided steps)."""
    shutil.copytree(src, dst)
    eps = metrics.load_dataset(str(dst))[:episodes]
    for ep in eps:
        for s in ep["steps"]:
            s.update(guide=None, guide_status=None, guide_alt=None)
    metrics.write_dataset(str(dst), eps)
    return str(dst)


def test_tiny_model_drafts_fall_back_and_rerun_is_a_noop(toy_data, tiny_models, tmp_path, capsys):
    data = blank_copy(toy_data, tmp_path / "d", episodes=3)
    ckpt = tiny_models["qwen2_5_vl"]
    argv = ["draft", data, "--drafter", "local", "--ckpt", ckpt, "--max-new-tokens", "12", "--batch-size", "4"]
    annotate.main(argv)
    eps = metrics.load_dataset(data)
    steps = [(ep, k, s) for ep in eps for k, s in enumerate(ep["steps"])]
    assert len(steps) == 9 and all(s["guide"] and s["guide_status"] == "draft" for _, _, s in steps)
    # a random model writes garbage: every step keeps the template draft, the reason recorded
    previous = {}
    for ep, k, s in steps:
        meta = s["guide_meta"]
        assert meta["drafter"] == "template" and meta["fallback"].startswith(f"local:{ckpt}: "), meta
        guide, previous[ep["id"]] = metrics.template_guide(ep, k, previous.get(ep["id"]))
        assert s["guide"] == guide
    assert len(open(os.path.join(data, "drafts.jsonl")).read().splitlines()) == 9
    assert "9 new drafts (9 fell back" in capsys.readouterr().out
    annotate.main(argv)                                   # idempotent: nothing new, nothing changed
    assert "0 new drafts" in capsys.readouterr().out and metrics.load_dataset(data) == eps
    assert len(open(os.path.join(data, "drafts.jsonl")).read().splitlines()) == 9


def fake_generate(calls):
    """A stand-in for local_generate that writes a good (but messy: prefix, quotes) guide naming the target."""
    def generate(model, processor, chats, max_new_tokens):
        calls.append(chats)
        out = []
        for chat in chats:
            text = chat[1]["content"][0]["text"]
            label = re.search(r'Highlighted element: (?:\[\d+\] \w+ "([^"]*)"|none)', text).group(1)
            action = text.split("Action: ")[-1]
            out.append('Guide: "Click the **%s** button."' % label if action.startswith("click") else
                       "Type the word into the **%s** field.\nmore text" % label if action.startswith("type") else
                       "Stop: the task is finished.")
        return out
    return generate


def test_good_replies_are_kept_with_the_api_prompt(toy_data, tiny_models, tmp_path, monkeypatch):
    data = blank_copy(toy_data, tmp_path / "d", episodes=2)
    ckpt = tiny_models["idefics3"]
    calls = []
    monkeypatch.setattr(annotate, "local_generate", fake_generate(calls))
    annotate.main(["draft", data, "--drafter", "local", "--ckpt", ckpt, "--batch-size", "4"])
    assert [len(c) for c in calls] == [4, 2]              # 6 steps in batches of --batch-size
    eps = metrics.load_dataset(data)
    got = [s for ep in eps for s in ep["steps"]]
    assert all(s["guide_meta"] == {"drafter": f"local:{ckpt}", "fallback": None, "draft": s["guide"]} for s in got)
    target = metrics.gold_element(got[0])["text"]
    assert [s["guide"] for s in got[:3]] == [f"Click the **{target}** button.",
                                             "Type the word into the **Name** field.", "Stop: the task is finished."]
    # the same prompt as the api drafter: identical once put in OpenAI's format
    eps[0]["steps"][0].update(guide=None)  # the history of step 0 is empty either way
    assert metrics.openai_messages(calls[0][0]) == metrics.openai_messages(annotate.draft_messages(eps[0], 0))
    assert calls[0][0][1]["content"][1]["type"] == "image"


def test_local_generate_runs_batched_on_every_tiny_arch(toy_data, tiny_models, capsys):
    """The real generation path (chat template, left padding, nested images for Idefics3) on every
    architecture: it returns one string per chat, whatever a random model writes. load_local is the
    shared load_model (fp32 and SDPA on a CPU, in eval mode) and says what it loaded in one line."""
    ep = metrics.load_dataset(toy_data)[0]
    chats = [annotate.draft_messages(ep, k) for k in range(3)]
    for arch, path in tiny_models.items():
        model, processor = annotate.load_local(path)
        assert str(model.dtype) == "torch.float32" and not model.training, arch
        said = capsys.readouterr().err.splitlines()   # after transformers' own progress bar, if any
        assert said[-1] == f"annotate: {type(model).__name__} from {path}; attention sdpa; torch.float32", arch
        replies = annotate.local_generate(model, processor, chats, 4)
        assert len(replies) == 3 and all(isinstance(r, str) for r in replies), arch
        assert annotate.local_generate(model, processor, chats[:1], 4)[0] == replies[0], arch  # padding does not leak


def test_local_paraphrase(toy_data, tiny_models, tmp_path, monkeypatch):
    data = blank_copy(toy_data, tmp_path / "d", episodes=1)
    annotate.main(["draft", data])
    ckpt = tiny_models["qwen2_5_vl"]
    annotate.main(["paraphrase", data, "--drafter", "local", "--ckpt", ckpt, "--max-new-tokens", "8"])
    alts = [s["guide_alt"] for s in metrics.load_dataset(data)[0]["steps"]]
    assert [a["paraphrase_by"] for a in alts] == ["template"] * 3    # garbage never passes the checks
    data = blank_copy(toy_data, tmp_path / "e", episodes=1)
    annotate.main(["draft", data])
    def generate(model, processor, chats, max_new_tokens):   # renames the click target, echoes the rest
        guides = [c[1]["content"][0]["text"].removeprefix("Instruction: ") for c in chats]
        return ["Click the first button at the top left." if g.startswith("Click") else g for g in guides]
    monkeypatch.setattr(annotate, "local_generate", generate)
    annotate.main(["paraphrase", data, "--drafter", "local", "--ckpt", ckpt])
    steps = metrics.load_dataset(data)[0]["steps"]
    assert steps[0]["guide_alt"] == {"paraphrase": "Click the first button at the top left.",
                                     "paraphrase_by": f"local:{ckpt}"}
    assert steps[1]["guide_alt"]["paraphrase_by"] == "template"   # the echo still says "Name": the label leaks
    # stop: no label to leak
    assert steps[2]["guide_alt"] == {"paraphrase": steps[2]["guide"], "paraphrase_by": f"local:{ckpt}"}


def test_check_guide_wants_a_fitting_verb_without_a_target(toy_data):
    ep = metrics.load_dataset(toy_data)[0]
    stop = ep["steps"][2]
    assert annotate.check_guide("That finishes the task.", stop) is None
    assert annotate.check_guide("|nt6 top cel w'p for", stop) == "does not name the target with a fitting verb"
    press = {**stop, "action": {"op": "press", "mark": None, "value": "Enter", "point": None}}
    assert annotate.check_guide("Press **Enter**.", press) is None and annotate.check_guide("Press a key.", press)


def test_missing_or_invalid_ckpt(toy_data, tmp_path):
    data = blank_copy(toy_data, tmp_path / "d", episodes=1)
    with pytest.raises(SystemExit, match="needs --ckpt"):
        annotate.main(["draft", data, "--drafter", "local"])
    (tmp_path / "empty").mkdir()
    for bad in (str(tmp_path / "empty"), str(tmp_path / "nowhere"), "Qwen/Qwen2.5-VL-3B-Instruct"):
        why = f"--ckpt {bad}: not a Hugging Face checkpoint folder (no config.json)"
        with pytest.raises(SystemExit, match=re.escape(why)):
            annotate.main(["paraphrase" if bad.startswith("Q") else "draft", data, "--drafter", "local", "--ckpt", bad])
    assert not os.path.exists(os.path.join(data, "drafts.jsonl"))   # nothing was written


def test_broken_checkpoint_is_one_clear_line(toy_data, tiny_models, tmp_path):
    """A checkpoint folder whose weights file was cut short: load_model's SystemExit, not a traceback, and
    nothing drafted."""
    data = blank_copy(toy_data, tmp_path / "d", episodes=1)
    ckpt = tmp_path / "broken"
    shutil.copytree(tiny_models["qwen2_5_vl"], ckpt)
    weights = next(ckpt.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:64])
    with pytest.raises(SystemExit, match=re.escape(f"--ckpt {ckpt}: cannot load the checkpoint (")):
        annotate.main(["draft", data, "--drafter", "local", "--ckpt", str(ckpt)])
    assert not os.path.exists(os.path.join(data, "drafts.jsonl"))


def test_annotate_starts_without_torch():
    code = ("import sys, annotate; annotate.parse_args(['draft', 'x', '--drafter', 'local']); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
