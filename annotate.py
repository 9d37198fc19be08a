"""annotate.py -- guide sentences for every recorded step: LLM-assisted drafts, human verification, splits.

MAG's annotation is "LLM assistance and human verification": a drafter writes the guide sentence
of each step (what a Digital Adoption Platform overlay would tell a person), a person accepts,
edits or rejects it in a review page, and only what a person saw is called `verified`.

Runbook
  python annotate.py draft DATASET --drafter template          offline, deterministic drafts
  python annotate.py draft DATASET --drafter api --api-base http://127.0.0.1:8000/v1 --api-model gpt-4o
                                                                (key from $OPENAI_API_KEY, never logged)
  python annotate.py draft DATASET --drafter local --ckpt ckpt/Qwen2.5-VL-7B-Instruct --batch-size 16
                                                                a local checkpoint folder, the api's prompt
                                                                (bf16 and FlashAttention-2 or SDPA on CUDA,
                                                                fp32 on CPU)
  python annotate.py review DATASET --annotator ada             review page on 127.0.0.1 (URL with a token)
  python annotate.py export DATASET                             decisions -> steps (verified/edited/rejected)
  python annotate.py verify DATASET --accept-drafts             no person in the loop: status `auto`
  python annotate.py paraphrase DATASET --drafter template      guide_alt.paraphrase for replay's probe
                                                                (api and local drafters too)
  python annotate.py split DATASET --val 0.1 --test 0.2         whole episodes -> train/val/test
  python annotate.py audit DATASET                              counts, lengths, grounding, agreement

Files it writes beside episodes.jsonl: drafts.jsonl (every draft as it is made: a crash loses
nothing, a rerun skips what is there), review.jsonl (every decision, appended and fsynced), and
audit.json. episodes.jsonl itself is only ever replaced whole, atomically.

Left out on purpose: no multi-user server (one annotator per review process; two people reviewing
the same steps work from two processes and their agreement is measured by `audit`).
"""
import argparse
import contextlib
import datetime
import html
import http.server
import io
import json
import os
import re
import secrets
import signal
import socket
import string
import sys
import threading
import time
import urllib.parse
from collections import Counter

import metrics

# ----------------------------------------------------------------------------------------------
# Side files: drafts.jsonl and review.jsonl are append-only logs, merged into episodes.jsonl.

def read_jsonl(path, repair=False):
    """Records of an append-only log; a torn last line (a crash mid-write) is skipped with a warning.
    repair=True, before appending: the torn line is moved to PATH.torn (metrics.repair_dataset) first, so the
    next record is never glued onto it."""
    if repair and (repaired := metrics.repair_dataset(path)):
        print(f"warning: {repaired}", file=sys.stderr)
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines):
                raise metrics.DatasetError(f"{path}:{i}: not valid JSON") from None
            print(f"warning: {path}:{i}: torn last line ignored", file=sys.stderr)
    return out


def merge_drafts(path, episodes=None):
    """Fold drafts.jsonl into the steps that have no guide yet and rewrite episodes.jsonl atomically."""
    episodes = episodes if episodes is not None else metrics.load_dataset(path)
    drafts = {(d["episode"], d["step"]): d for d in read_jsonl(os.path.join(path, "drafts.jsonl"))}
    changed = 0
    for ep in episodes:
        for step in ep["steps"]:
            d = drafts.get((ep["id"], step["step"]))
            if d and not step.get("guide"):
                step["guide"], step["guide_status"] = d["guide"], "draft"
                step["guide_meta"] = {"drafter": d["drafter"], "fallback": d.get("fallback"),
                                      "draft": d["guide"]}
                changed += 1
    if changed:
        metrics.write_dataset(path, episodes)
    return episodes, changed


# ----------------------------------------------------------------------------------------------
# The API drafter: any OpenAI-compatible chat-completions endpoint. The screenshot goes with the
# target highlighted; the reply is cleaned and checked (one sentence that names the target) before
# it is stored, else the template draft is kept and the fallback recorded.

API_SYSTEM = (
    "You write the one-sentence guides that a digital adoption platform shows to a person using a web "
    "page. Given the task, the steps so far, the highlighted element and the action taken on it, write ONE "
    f"short imperative sentence (at most {metrics.GUIDE_WORDS} words) telling the person what to do: name "
    "the element by its label in **bold** (never by the value it shows), say where it is when that helps "
    "find it (its table row or section), and why the step is taken. Reply with the sentence only.")
MAX_GUIDE_WORDS = 40


def draft_messages(ep, k):
    """The drafter's prompt for step k in transformers' chat format (a PIL image in it): the screenshot
    with the target highlighted, the task, the earlier steps with their guides, the action. The api
    drafter sends it as OpenAI messages (metrics.openai_messages), the local one through the chat template."""
    from PIL import Image
    step = ep["steps"][k]
    img = Image.open(os.path.join(ep["_root"], step["screenshot"])).convert("RGB")
    el = metrics.gold_element(step)
    if el:
        img = metrics.draw_som(img, [el])
    history = metrics.history_text(ep, k, "som", "guide_first")
    action = metrics.format_action(step["action"], "som", ep["viewport"])
    target = f'[{el["mark"]}] {el.get("role")} "{el.get("text") or ""}"' if el else "none"
    facts = [f'{key} "{el[key]}"' for key in ("value", "row", "section") if el and el.get(key)]
    target += f" ({', '.join(facts)})" if facts else ""
    why = metrics.step_purpose(ep, k)
    text = (f"Task: {ep['instruction']}\nSteps so far:\n{history}\nHighlighted element: {target}\n"
            f"Action: {action}\n" + (f"Purpose: {why}\n" if why else "") + "Guide:")
    return [{"role": "system", "content": [{"type": "text", "text": API_SYSTEM}]},
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "image": img}]}]


def clean_guide(text):
    """The first line of a reply, without a 'Guide:' prefix or wrapping quotes, whitespace collapsed."""
    line = next((l for l in (text or "").strip().splitlines() if l.strip()), "")
    line = re.sub(r"^\s*(\*\*)?guide(\*\*)?\s*:\s*", "", line, flags=re.I).strip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'`":
        line = line[1:-1].strip()
    return " ".join(line.split())


def check_guide(guide, step):
    """None if the guide is one sentence of sane length that names the target, else the reason."""
    if not guide:
        return "empty reply"
    if len(guide.split()) > MAX_GUIDE_WORDS:
        return "too long"
    if re.search(r"[.!?]\s", guide.rstrip(".!?")):
        return "more than one sentence"
    # press/scroll/stop have no element but a key, a direction or a verb to get right (any one sentence
    # passed before, garbage from a weak local model included); only a target with no text is unnameable
    el = metrics.gold_element(step)
    nameable = (el and (el.get("text") or "").strip()) or step["action"]["op"] not in metrics.ELEMENT_OPS
    named = not nameable or metrics.guide_grounding(guide, step)
    return None if named else "does not name the target with a fitting verb"


# ----------------------------------------------------------------------------------------------
# The local drafter: a vision-language checkpoint folder through transformers' Auto classes, the api
# drafter's prompt put through the model's own chat template, greedy batched generation, the same
# cleaning and checks. torch and transformers are imported only here: the other commands start fast.

def load_model(path, device, dtype=None, attn=None):
    """A checkpoint folder -> (model, processor, attention) on `device`: bf16 on CUDA and fp32 on CPU
    unless `dtype` says; FlashAttention-2 on CUDA when flash-attn is installed, PyTorch SDPA otherwise.
    The same text in every stage that loads a model (tests/test_layout.py holds them equal)."""
    import importlib.util

    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForImageTextToText, AutoProcessor
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise SystemExit(f"--ckpt {path}: not a Hugging Face checkpoint folder (no config.json)")
    cuda = device.type == "cuda"
    attn = attn or ("flash_attention_2" if cuda and importlib.util.find_spec("flash_attn") else "sdpa")
    try:
        processor = AutoProcessor.from_pretrained(path, local_files_only=True)
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=dtype or (torch.bfloat16 if cuda else torch.float32), attn_implementation=attn,
            local_files_only=True)
    # a truncated weights file, a config without a model type
    except (OSError, ValueError, SafetensorError) as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise SystemExit(f"--ckpt {path}: cannot load the checkpoint ({why})") from None
    return model.to(device).eval(), processor, attn


def load_local(path):
    """The local drafter's model + processor, on CUDA when there is one (load_model). Local files only: a
    hub name is not a folder with a config.json and is refused, so nothing is ever downloaded (HF_HUB_OFFLINE
    or not)."""
    import torch
    model, processor, attn = load_model(path, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"annotate: {type(model).__name__} from {path}; attention {attn}; {model.dtype}", file=sys.stderr)
    return model, processor


def local_generate(model, processor, chats, max_new_tokens):
    """Greedy, KV-cached, left-padded generation for a batch of chats (transformers' format) -> replies."""
    import torch
    texts = [processor.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    # one image per chat (a draft) or none (a paraphrase), in the shape the processor wants
    images = [part["image"] for c in chats for m in c for part in m["content"] if part["type"] == "image"]
    enc = processor(text=texts, images=metrics.images_arg(processor, images) if images else None,
                    return_tensors="pt", padding=True, padding_side="left").to(model.device)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
    return processor.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def drafter_name(args):
    """What guide_meta.drafter records: template, api:MODEL or local:CKPT."""
    return {"api": f"api:{args.api_model}", "local": f"local:{args.ckpt}"}.get(args.drafter, "template")


def start_drafter(args, needed):
    """The local drafter's (model, processor), or None; the api drafter's endpoint checked first
    (metrics.preflight; no key in the variable: none is sent). A rerun with nothing to ask loads nothing."""
    if args.drafter == "api" and needed:
        metrics.preflight("annotate", args.api_base, args.api_model, os.environ.get(args.api_key_env),
                          args.api_key_env, args.api_timeout)
    return load_local(args.ckpt) if args.drafter == "local" and needed else None


def ask_drafter(args, model, chats):
    """One (cleaned reply, None) or (None, why it failed) per chat, from the endpoint or the local model. An
    endpoint that failed after its retries (metrics.ApiError.outage) is raised: that step is not done."""
    if args.drafter == "local":
        return [(clean_guide(t), None) for t in local_generate(*model, chats, args.max_new_tokens)]
    out = []
    for chat in chats:
        try:
            reply = metrics.chat_completion(args.api_base, args.api_model, metrics.openai_messages(chat),
                                            os.environ.get(args.api_key_env), timeout=args.api_timeout,
                                            retries=args.api_retries, backoff=args.api_backoff,
                                            max_tokens=args.max_new_tokens)
            out.append((clean_guide(reply), None))
        except metrics.ApiError as e:
            if e.outage:
                raise
            out.append((None, str(e)))   # this request refused (too long, ...): the template instead
    return out


def drafted(args, model, todo, chat):
    """(item, reply, failure) per item of `todo`, asked in chunks (a local model's --batch-size, else one by
    one): draft's and paraphrase's one loop. chat(ep, k) -> messages, or None: not asked (reply None)."""
    size = args.batch_size if args.drafter == "local" else 1
    for i in range(0, len(todo), size):
        chunk = todo[i:i + size]
        chats = [chat(*item[:2]) if args.drafter != "template" else None for item in chunk]
        asked = [j for j, c in enumerate(chats) if c is not None]
        replies = dict(zip(asked, ask_drafter(args, model, [chats[j] for j in asked]))) if asked else {}
        for j, item in enumerate(chunk):
            yield (item, *replies.get(j, (None, None)))


# ----------------------------------------------------------------------------------------------
# draft: fill `guide` (status draft) for every step that has none; resumable through drafts.jsonl.

def pending_drafts(episodes, done):
    """(episode, step index, its record holding the template draft) of each step without guide or draft."""
    todo = []
    for ep in episodes:
        for k, (step, guide) in enumerate(zip(ep["steps"], metrics.template_guides(ep))):
            if not (step.get("guide") or (ep["id"], k) in done):
                todo.append((ep, k, {"episode": ep["id"], "step": k, "guide": guide, "drafter": "template",
                                     "fallback": None}))
    return todo


def cmd_draft(args):
    # the api and local drafters show the model every screenshot: check them all first; the template's
    # words for where a target is come from the viewport, which must be the screenshots' size
    episodes = metrics.load_dataset(args.dataset, check_images=True if args.drafter != "template" else "size",
                                    empty_ok=False)
    log = os.path.join(args.dataset, "drafts.jsonl")
    todo = pending_drafts(episodes, {(d["episode"], d["step"]) for d in read_jsonl(log, repair=True)})
    model = start_drafter(args, bool(todo))
    name = drafter_name(args)
    made = fallbacks = 0
    t0 = time.perf_counter()
    try:
        for (ep, k, record), reply, failure in drafted(args, model, todo, draft_messages):
            if args.drafter != "template":
                why = failure or check_guide(reply, ep["steps"][k])
                if why is None:
                    record.update(guide=reply, drafter=name)
                else:
                    record["fallback"] = f"{name}: {why}"
                    fallbacks += 1
            metrics.append_jsonl(log, record)
            made += 1
            if args.drafter == "local" and (made % args.batch_size == 0 or made == len(todo)):
                print(f"draft: {made}/{len(todo)} steps, {fallbacks} fell back, "
                      f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:  # Ctrl-C included: what was drafted is merged, the rest is drafted by the next run
        _, merged = merge_drafts(args.dataset, episodes)  # the loop read but never changed them
        print(f"draft: {made} new drafts ({fallbacks} fell back to the template), {merged} merged into "
              f"{args.dataset}/episodes.jsonl")


# ----------------------------------------------------------------------------------------------
# review: a person verifies the drafts. `serve_review` runs a one-page app on 127.0.0.1 that shows
# one step at a time (the screenshot with its target boxed, the task, the earlier steps, the action,
# the draft guide) and takes one key per decision. Each decision is appended to DATASET/review.jsonl
# and fsynced before the page moves on, and the page is rebuilt from that file on every load: a
# closed tab or a killed server loses nothing, and a restart resumes at the first unreviewed step.
#
# A review.jsonl record: {"episode", "step", "decision", "final", "draft", "reason", "annotator",
# "time" (UTC, ISO 8601), "seq" (increasing through the file)}, where decision is
#   accept       final = the draft
#   edit         final = the person's text
#   reject       final = null, and a reason is required
#   flag_target  the recorded target element is wrong (says nothing about the guide)
#   undo         takes back this annotator's latest decision not yet undone, on whichever step it
#                was; the record names it in "undoes" and carries its episode and step.
# review_state() replays the records; export and audit read the decisions through it.

try:
    import fcntl  # two review processes (two annotators) may append to one review.jsonl
except ImportError:  # Windows: one review process per dataset
    fcntl = None

REVIEW_FILE = "review.jsonl"
GUIDE_DECISIONS = ("accept", "edit", "reject")  # the decisions that settle a step's guide
DECISIONS = GUIDE_DECISIONS + ("flag_target", "undo")
MAX_BODY_BYTES = 64 * 1024  # a decision is a few hundred bytes; anything bigger is not one
MAX_TEXT = 2000  # characters in an edited guide or a reason: one sentence, with room to spare
TOKEN_HEADER = "X-MAG-Token"  # a POST's token: a page of another origin cannot send this header (CORS)
REVIEW_DIM = 0.3  # how much the page around the target is darkened in the review image (0: not at all)


def read_reviews(dataset):
    """The records of DATASET/review.jsonl in file order ([] before the first decision)."""
    return read_jsonl(os.path.join(dataset, REVIEW_FILE))


def _mine(records, annotator):
    """This annotator's records, and the seqs that their undos took back."""
    mine = [r for r in records if r.get("annotator") == annotator]
    return mine, {r.get("undoes") for r in mine if r.get("decision") == "undo"}


def undo_target(records, annotator):
    """The record an undo by `annotator` takes back: their latest decision not yet undone, or None."""
    mine, undone = _mine(records, annotator)
    live = (r for r in reversed(mine) if r.get("decision") != "undo" and r.get("seq") not in undone)
    return next(live, None)


def review_state(dataset, records, annotator):
    """Replay review.jsonl records into the effective review of every step, for one annotator.

    dataset: a dataset folder or a list of episodes (metrics.load_dataset); records: review.jsonl in
    file order (read_reviews), any mix of annotators -- only `annotator`'s count. Returns
    {(episode_id, step_index): entry} for every step of the dataset, in file order, with
      entry = {"decision": "accept"|"edit"|"reject"|None, "final", "draft", "reason", "seq", "time",
               "flagged": bool}
    where decision..time come from the step's latest accept/edit/reject that no undo took back (all
    None if there is none: the step is unreviewed), and flagged is True while a flag_target on the
    step stands. Undoing a decision brings back the one before it on that step, if any. Records of
    steps the dataset does not have (it changed under them) are ignored.
    """
    episodes = metrics.load_dataset(dataset) if isinstance(dataset, (str, os.PathLike)) else dataset
    state = {(ep["id"], k): {"decision": None, "final": None, "draft": None, "reason": None,
                             "seq": None, "time": None, "flagged": False}
             for ep, k in metrics.iter_steps(episodes)}
    mine, undone = _mine(records, annotator)
    for r in mine:  # file order: a later decision on a step replaces an earlier one
        entry = state.get((r.get("episode"), r.get("step")))
        if entry is None or r.get("seq") in undone:
            continue
        if r.get("decision") in GUIDE_DECISIONS:
            entry.update({k: r.get(k) for k in ("decision", "final", "draft", "reason", "seq", "time")})
        elif r.get("decision") == "flag_target":
            entry["flagged"] = True
    return state


class ReviewError(Exception):
    """A request the review server refuses: an HTTP status and a message the page shows."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def decision_record(episodes_by_id, body, annotator, records):
    """Check one POSTed decision against the dataset and build its record (seq and time are added on write);
    returns (record, the record an undo takes back or None)."""
    if not isinstance(body, dict):
        raise ReviewError(400, "the request body must be a JSON object")
    decision = body.get("decision")
    if decision not in DECISIONS:
        raise ReviewError(400, f"unknown decision {decision!r}: expected one of {', '.join(DECISIONS)}")
    if decision == "undo":  # the step is the undone decision's, whichever the page is showing
        undone = undo_target(records, annotator)
        if undone is None:
            raise ReviewError(409, "nothing to undo")
        return {"episode": undone["episode"], "step": undone["step"], "decision": "undo", "final": None,
                "draft": undone.get("draft"), "reason": None}, undone
    ep_id, k = body.get("episode"), body.get("step")
    ep = episodes_by_id.get(ep_id) if isinstance(ep_id, str) else None
    if ep is None:
        raise ReviewError(400, f"unknown episode {ep_id!r}")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(ep["steps"]):
        raise ReviewError(400, f"episode {ep_id} has no step {k!r} (it has {len(ep['steps'])})")
    final, reason = body.get("final"), body.get("reason")
    for field, text in (("final", final), ("reason", reason)):
        if text is not None and not (isinstance(text, str) and len(text) <= MAX_TEXT):
            raise ReviewError(400, f"'{field}' must be a string of at most {MAX_TEXT} characters")
        if text and (bad := re.search(r"[\ud800-\udfff]", text)):   # "\ud800" in JSON: no UTF-8 can store it
            raise ReviewError(400, f"'{field}' holds a lone surrogate (U+{ord(bad[0]):04X} at character "
                                   f"{bad.start()}), half of a character: not text that can be stored")
    reason = " ".join(reason.split()) if reason else None  # one line, like the guide itself
    draft = ep["steps"][k].get("guide")
    if decision == "accept":
        if not draft:
            raise ReviewError(400, f"{ep_id} step {k} has no draft guide to accept: edit it instead")
        final = draft
    elif decision == "edit":
        final = " ".join((final or "").split())
        if not final:
            raise ReviewError(400, "edit needs the new guide text in 'final'")
    else:
        if decision == "reject" and not reason:
            raise ReviewError(400, "reject needs a reason")
        final = None
    return {"episode": ep_id, "step": k, "decision": decision, "final": final, "draft": draft,
            "reason": reason}, None


def save_decision(dataset, episodes_by_id, body, annotator, lock):
    """Validate, number and append one decision to review.jsonl (fsynced); returns (record, undone record).
    The file is read again under the lock, so seq and the undo target are right even when another review
    process appends to the same file."""
    path = os.path.join(dataset, REVIEW_FILE)
    with lock, open(path, "a", encoding="utf-8") as held:
        if fcntl:
            fcntl.flock(held, fcntl.LOCK_EX)  # released when `held` closes
        records = read_jsonl(path, repair=True)
        record, undone = decision_record(episodes_by_id, body, annotator, records)
        seq = 1 + max((r["seq"] for r in records if isinstance(r.get("seq"), int)), default=0)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace(
            "+00:00", "Z")
        record.update(annotator=annotator, time=now, seq=seq)
        if undone:
            record["undoes"] = undone["seq"]  # last, after seq
        metrics.append_jsonl(path, record)
    return record, undone


def action_text(action, viewport):
    """The action as the model writes it (Set-of-Mark), or by point for a step recorded without a mark."""
    unmarked = action["op"] in metrics.ELEMENT_OPS and action.get("mark") is None and action.get("point")
    return metrics.format_action(action, "coord" if unmarked else "som", viewport)


def page_state(episodes, records, annotator):
    """What GET /api/state returns: every step with its context and this annotator's decision, plus progress.

    The page fetches it again after every decision, which keeps review.jsonl the only truth. That
    costs about 0.5 KB a step (measured: 2,000 MiniWoB steps, 1.1 MB, 25 ms); far bigger datasets
    are better reviewed a split at a time.
    """
    state = review_state(episodes, records, annotator)
    steps = []
    for ep in episodes:
        history = []  # the earlier steps of this episode, their guides as they stand now
        for k, step in enumerate(ep["steps"]):
            s, el = state[(ep["id"], k)], metrics.gold_element(step)
            action = action_text(step["action"], ep["viewport"])
            steps.append({
                "episode": ep["id"], "step": k, "steps": len(ep["steps"]), "instruction": ep["instruction"],
                "history": list(history), "action": action, "draft": step.get("guide"),
                "status": step.get("guide_status"),
                "target": el and {"mark": el["mark"], "role": el.get("role"), "text": el.get("text")},
                **{key: s[key] for key in ("decision", "final", "reason", "time", "flagged")}
            })
            guide = {"accept": s["final"], "edit": s["final"],
                     "reject": None}.get(s["decision"], step.get("guide"))
            history.append({"guide": guide, "action": action, "decision": s["decision"]})
    counts = {d: sum(s["decision"] == d for s in steps) for d in GUIDE_DECISIONS}
    return {"annotator": annotator, "steps": steps,
            "first_unreviewed": next((i for i, s in enumerate(steps) if not s["decision"]), None),
            "progress": {"reviewed": sum(counts.values()), "total": len(steps), **counts,
                         "flagged": sum(s["flagged"] for s in steps)}}


def dataset_file(root, rel):
    """The real path of a file the dataset names, refused when it resolves outside the dataset folder.

    `rel` comes from episodes.jsonl, which a person may have edited or received from elsewhere: `..`,
    an absolute path or a symlink must not turn the page into a reader of any file on the machine."""
    try:
        path = os.path.realpath(os.path.join(root, rel))
    except (TypeError, ValueError):  # not a string, or an embedded NUL
        raise ReviewError(403, "refused: not a file of the dataset") from None
    if os.path.commonpath([root, path]) != root:
        raise ReviewError(403, "refused: not a file of the dataset")
    if not os.path.isfile(path):
        raise ReviewError(404, f"screenshot missing: {rel}")
    return path


def review_image(path, step):
    """PNG bytes of the screenshot with only the step's target boxed and numbered (metrics.draw_som).

    The rest of the page is dimmed a little: a 2-px box on a busy page is easy to miss. No element
    (press/scroll/stop): the raw screenshot. A step recorded by point without a mark gets a ring
    at the point, so the reviewer still sees where it acted.
    """
    from PIL import Image, ImageDraw
    img = Image.open(path).convert("RGB")
    el, action = metrics.gold_element(step), step["action"]
    if el:
        box = [round(v) for v in el["bbox"]]
        dimmed = Image.blend(img, Image.new("RGB", img.size, "black"), REVIEW_DIM)
        dimmed.paste(img.crop(box), box[:2])
        img = metrics.draw_som(dimmed, [el])
    elif action["op"] in metrics.ELEMENT_OPS and action.get("point"):
        x, y = action["point"]
        r = max(6, min(img.size) // 40)
        ImageDraw.Draw(img).ellipse([x - r, y - r, x + r, y + r], outline=metrics.SOM_COLORS[0],
                                    width=max(2, r // 3))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def review_page(token):
    """assets/review.html with review.css and review.js put inline: one response, no external
    assets (the CSP forbids them), and the token in a meta tag for the script's POSTs. The script fills
    the page with textContent, never innerHTML: guides and instructions are untrusted text."""
    css, js = metrics.read_asset("review.css"), metrics.read_asset("review.js")
    if "</style" in css.lower() or "</script" in js.lower():  # would end the inline block early
        raise SystemExit("assets/review.css or review.js closes its own <style> or <script> block")
    page = string.Template(metrics.read_asset("review.html"))
    return page.substitute(css=css, js=js, token=html.escape(token, quote=True)).encode()


class ReviewServer(http.server.ThreadingHTTPServer):
    """One dataset, one annotator, one token; listens on 127.0.0.1 only."""
    daemon_threads = True

    def __init__(self, dataset, port, annotator, token):
        self.dataset = os.path.realpath(dataset)
        # before binding: a bad dataset leaves no socket open
        self.episodes = metrics.load_dataset(self.dataset)
        self.by_id = {ep["id"]: ep for ep in self.episodes}
        self.annotator = annotator
        self.token = token
        self.lock = threading.Lock()
        self.page = review_page(token)  # read once: a page edited in assets/ shows after a restart
        super().__init__(("127.0.0.1", port), ReviewHandler)
        self.port = self.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/?token={token}"
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}  # the Host headers it answers

    def stop(self):
        """Stop serving (from another thread) and close the socket."""
        self.shutdown()
        self.server_close()


class ReviewHandler(http.server.BaseHTTPRequestHandler):
    """Four routes, all behind the token: the page, its state, a step's image, a decision. No cookie:
    cookies ignore the port, so every page on 127.0.0.1 would send it (and its server would read it)."""
    server_version = "MAGReview"
    timeout = 10  # seconds a connection may stall (in its headers or its body) before it is dropped
    deadline = 30  # seconds a whole request may take: a client trickling a byte every few seconds is cut too

    def setup(self):   # past the deadline, reading ends (the answer, an error, can still be written)
        super().setup()
        self.cut = False
        self.watchdog = threading.Timer(self.deadline, self.cut_reading)
        self.watchdog.start()

    def cut_reading(self):
        self.cut = True
        with contextlib.suppress(OSError):  # already closed
            self.connection.shutdown(socket.SHUT_RD)

    def finish(self):
        self.watchdog.cancel()
        super().finish()

    def route(self):
        """Every request: Host, a POST's Origin, the token, a POST's Content-Type; then the handler of its
        route."""
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        try:
            host = self.headers.get("Host", "").lower()
            # evil.example resolved to 127.0.0.1: its pages must not reach us
            if host not in self.server.hosts:
                raise ReviewError(421, f"refused: this server answers to 127.0.0.1:{self.server.port} only")
            if self.command != "GET" and self.headers.get("Origin") not in (None, "http://" + host):
                raise ReviewError(403, "refused: a request from a page of another origin")
            if not self.authorized(query):
                raise ReviewError(403,
                                  "missing or wrong token: open the URL that `annotate.py review` printed")
            if self.command == "POST" and self.headers.get_content_type() != "application/json":
                raise ReviewError(415, "a decision is sent as application/json")
            handler = {("GET", "/"): self.page,
                       ("GET", "/api/state"): self.state, ("GET", "/api/image"): self.image,
                       ("POST", "/api/decision"): self.decision}.get((self.command, url.path))
            if handler is None:  # no route serves files by path, so `..` in the path has nothing to reach
                raise ReviewError(404, f"no such page: {self.command} {url.path}")
            handler(query)
        except ReviewError as e:
            self.send_json(e.status, {"error": str(e)})
        except (metrics.DatasetError, OSError) as e:  # review.jsonl unreadable, disk full: say so
            self.send_json(500, {"error": f"{type(e).__name__}: {e}"})

    do_GET = do_POST = do_OPTIONS = route  # http.server calls do_<METHOD>; the method is in self.command

    def authorized(self, query):
        """A GET has the token in its URL (an <img> sends no header; a GET changes nothing), any other request
        in X-MAG-Token: a page of another origin cannot send it without a CORS preflight, which gets 403."""
        given = query.get("token", [""])[0] if self.command == "GET" else self.headers.get(TOKEN_HEADER, "")
        return secrets.compare_digest(given.encode(), self.server.token.encode())

    def page(self, query):
        csp = ("default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
        self.send(200, self.server.page, "text/html; charset=utf-8", [("Content-Security-Policy", csp)])

    def state(self, query):
        self.send_json(
            200, page_state(self.server.episodes, read_reviews(self.server.dataset), self.server.annotator))

    def image(self, query):
        ep = self.server.by_id.get(query.get("episode", [""])[0])  # looked up by id, never used as a path
        k = query.get("step", [""])[0]
        if ep is None or not (k.isascii() and k.isdigit()) or int(k) >= len(ep["steps"]):  # "²".isdigit()
            raise ReviewError(404, "no such step")
        step = ep["steps"][int(k)]
        self.send(200, review_image(dataset_file(self.server.dataset, step["screenshot"]), step), "image/png")

    def decision(self, query):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ReviewError(400, "bad Content-Length") from None
        if not 0 < n <= MAX_BODY_BYTES:
            raise ReviewError(400 if n <= 0 else 413,
                              f"a decision is a JSON object of at most {MAX_BODY_BYTES} bytes")
        try:
            raw = self.rfile.read(n)
            if self.cut:
                raise TimeoutError
            body = json.loads(raw)
        except TimeoutError:
            raise ReviewError(408, f"the body did not arrive within {self.timeout} s "
                                   f"(or {self.deadline} s in all)") from None
        # not UTF-8, not JSON, nested deeper than Python's recursion limit
        except (ValueError, RecursionError):
            raise ReviewError(400, "the request body is not valid JSON") from None
        s = self.server
        record, undone = save_decision(s.dataset, s.by_id, body, s.annotator, s.lock)
        self.send_json(200, {"ok": True, "record": record, "undone": undone})

    def send_json(self, status, obj):
        self.send(status, json.dumps(obj).encode(), "application/json; charset=utf-8")

    def send(self, status, data, ctype, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")  # the token is in the URL: never pass it on
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the tab went away mid-answer: nothing to tell it
            pass

    # a line per request would bury the URL; log_error still prints
    def log_request(self, code="-", size="-"):
        pass


def serve_review(dataset, port=8765, annotator="anonymous", token=None, block=True):
    """Serve the review page of `dataset` on 127.0.0.1 (never another interface) and print its URL.

    The URL carries a random token (or `token`, to keep a URL across restarts); a GET without it in
    the `token` query parameter, or a POST without it in the X-MAG-Token header, gets 403. port=0 takes a
    free port. block=True (the command line) serves until Ctrl-C; block=False serves from a daemon
    thread and returns at once (tests, notebooks): stop that server with `server.stop()`.
    Returns (server, url).
    """
    try:
        server = ReviewServer(dataset, port, annotator, token or secrets.token_urlsafe(24))
    except OSError as e:  # the port is taken: one line, not a traceback
        raise SystemExit(f"review: cannot listen on 127.0.0.1:{port}: {e.strerror} (try --port 0)") from None
    progress = page_state(server.episodes, read_reviews(server.dataset), annotator)["progress"]
    print(f"review: {progress['reviewed']} / {progress['total']} steps reviewed by {annotator}; "
          f"decisions go to {os.path.join(server.dataset, REVIEW_FILE)}")
    print(f"review page: {server.url}", flush=True)
    if not block:
        threading.Thread(target=server.serve_forever, name="review-server", daemon=True).start()
        return server, server.url
    print("Ctrl-C stops the server; every decision is already on disk.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nreview: stopped")
    finally:
        server.server_close()
    return server, server.url


# ----------------------------------------------------------------------------------------------
# verify: pipelines without a person accept the drafts as `auto` -- never `verified`.

def cmd_verify(args):
    if not args.accept_drafts:
        raise SystemExit(
            "verify needs --accept-drafts (it marks drafts `auto`; only `review` makes them `verified`)")
    episodes, _ = merge_drafts(args.dataset)
    drafts = [s for ep in episodes for s in ep["steps"] if s.get("guide_status") == "draft"]
    for step in drafts:
        step["guide_status"] = "auto"
    metrics.write_dataset(args.dataset, episodes)
    print(f"verify: {len(drafts)} drafts marked auto")


# ----------------------------------------------------------------------------------------------
# paraphrase: the same instruction with the target renamed -- described by kind, order and place
# instead of its label -- for replay's mediation probe (WebMRE's "paraphrase" prefix).

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def describe(el, elements, viewport):
    """'the second button in the Shipping section', 'the field on the "Blue mug" row', 'the link at the
    top right': no label words, only what and where (its place among targets of its kind there)."""
    kind = metrics.noun(el) or "element"
    same = [e for e in elements if (metrics.noun(e) or "element") == kind
            and (e.get("section"), e.get("row")) == (el.get("section"), el.get("row"))]
    nth = same.index(el) if el in same else 0
    order = f"{ORDINALS[nth]} " if len(same) > 1 and nth < len(ORDINALS) else ""
    return f"the {order}{kind} {metrics.where_phrase({**el, 'text': ''}, elements, viewport)}"


PARAPHRASES = {
    "click": "Click {d}{y}.", "hover": "Move the mouse over {d}{y}.", "type": 'Type "{v}" into {d}{y}.',
    "select": 'Choose "{v}" from {d}{y}.', "press": "Press the {v} key{y}.", "scroll": "Scroll the page {v}.",
    "stop": "The task is finished.",
}


def template_paraphrase(ep, k):
    """The guide with its target renamed: described, and the purpose kept unless it says the label."""
    step = ep["steps"][k]
    op, value = step["action"]["op"], step["action"].get("value") or ""
    el = metrics.gold_element(step)
    d = describe(el, step["elements"], ep["viewport"]) if el else "the page"
    why = step.get("purpose") or ""
    text = PARAPHRASES[op].format(d=d, v=value, y="")
    if leaks_label(text, step):   # its row or section holds its label: the screen position instead
        d = f"the {metrics.noun(el) or 'element'} {metrics.position(el, ep['viewport'])}"
        text = PARAPHRASES[op].format(d=d, v=value, y="")
    if why and not leaks_label(f"{text} {why}", step):
        text = PARAPHRASES[op].format(d=d, v=value, y=" " + why)
    return text


def leaks_label(text, step):
    """True if the paraphrase holds the target's label (its first words, as guide_grounding reads it)."""
    el = metrics.gold_element(step)
    label = metrics.label_words(el.get("text")) if el else []
    # the typed value may stay
    label = [w for w in label if w not in metrics.label_words(step["action"].get("value"))]
    return bool(label) and metrics.contains_run(metrics.label_words(text),
                                                label[:metrics.GROUNDING_NAME_TOKENS])


PARAPHRASE_SYSTEM = (
    "Rewrite the instruction so that it names the highlighted element WITHOUT its visible label: "
    "describe what and where it is instead. One sentence.")


def paraphrase_messages(ep, k):
    """The request to rewrite step k's guide; None for a step without one (it gets the template's)."""
    step = ep["steps"][k]
    if not step.get("guide"):
        return None
    return [{"role": "system", "content": [{"type": "text", "text": PARAPHRASE_SYSTEM}]},
            {"role": "user", "content": [{"type": "text", "text": f"Instruction: {step['guide']}"}]}]


def cmd_paraphrase(args):
    """guide_alt.paraphrase for every step without one: the drafter's rewrite of the guide when it renames the
    target and passes the checks, else the template's. The dataset is rewritten at the end (Ctrl-C too)."""
    episodes, _ = merge_drafts(args.dataset)
    todo = [(ep, k) for ep, k in metrics.iter_steps(episodes)
            if not (ep["steps"][k].get("guide_alt") or {}).get("paraphrase")]
    model = start_drafter(args, any(ep["steps"][k].get("guide") for ep, k in todo))
    name = drafter_name(args)
    n = fallbacks = 0
    try:
        for (ep, k), reply, _ in drafted(args, model, todo, paraphrase_messages):
            step = ep["steps"][k]
            text, by = template_paraphrase(ep, k), "template"
            if args.drafter != "template" and step.get("guide"):
                sound = reply and check_guide(reply, {**step, "elements": []}) is None
                if sound and not leaks_label(reply, step):
                    text, by = reply, name
                else:
                    fallbacks += 1
            step["guide_alt"] = {**(step.get("guide_alt") or {}), "paraphrase": text, "paraphrase_by": by}
            n += 1
    finally:
        metrics.write_dataset(args.dataset, episodes)
        print(f"paraphrase: {n} written ({fallbacks} fell back to the template)")


# ----------------------------------------------------------------------------------------------
# split: whole episodes to train/val/test by a hash of the episode id (stable across reruns and
# machines); --test-tasks holds whole tasks out.

def assign_split(ep_id, task, val, test, test_tasks):
    if task in test_tasks:
        return "test"
    u = metrics.stable_hash("split:" + ep_id) / 16 ** 8
    return "test" if u < test else "val" if u < test + val else "train"


def cmd_split(args):
    if not (0 <= args.val and 0 <= args.test and args.val + args.test < 1):
        raise SystemExit(f"--val {args.val} and --test {args.test} must be >= 0 and sum to less than 1")
    episodes, _ = merge_drafts(args.dataset)
    held = {t for t in (args.test_tasks or "").split(",") if t}
    unknown = held - {ep["task"] for ep in episodes}
    if unknown:
        raise SystemExit(f"--test-tasks: no episodes of {', '.join(sorted(unknown))} in {args.dataset}")
    for ep in episodes:
        ep["split"] = assign_split(ep["id"], ep["task"], args.val, args.test, held)
    metrics.write_dataset(args.dataset, episodes)
    counts = {s: sum(ep["split"] == s for ep in episodes) for s in ("train", "val", "test")}
    print(f"split: {counts}")


# ----------------------------------------------------------------------------------------------
# export: review decisions -> steps. Several annotators: the latest decision (by seq) wins; audit
# measures how often they agree.

STATUS_OF = {"accept": "verified", "edit": "edited", "reject": "rejected"}


def reviews_by_annotator(episodes, records):
    """{annotator: review_state(...)} for everyone who left a decision."""
    names = sorted({r.get("annotator") for r in records if r.get("annotator")})
    return {a: review_state(episodes, records, a) for a in names}


def cmd_export(args):
    episodes, _ = merge_drafts(args.dataset)
    by = reviews_by_annotator(episodes, read_reviews(args.dataset))
    counts = {"verified": 0, "edited": 0, "rejected": 0, "flagged": 0}
    for ep, k in metrics.iter_steps(episodes):
        step = ep["steps"][k]
        entries = [(e["seq"], a, e) for a, st in by.items() if (e := st[(ep["id"], k)])["decision"]]
        meta = step.setdefault("guide_meta", {"drafter": None, "fallback": None, "draft": step.get("guide")})
        if any(st[(ep["id"], k)]["flagged"] for st in by.values()):
            meta["target_flagged"] = True
            counts["flagged"] += 1
        if not entries:
            continue
        _, annotator, e = max(entries)
        meta.update(draft=e["draft"], annotator=annotator, reviewed_at=e["time"], reason=e["reason"])
        step["guide_status"] = STATUS_OF[e["decision"]]
        if e["decision"] == "edit":
            step["guide"] = e["final"]
        counts[step["guide_status"]] += 1
    metrics.write_dataset(args.dataset, episodes)
    print(f"export: {counts}")


# ----------------------------------------------------------------------------------------------
# lint: every guide checked against the style (docs/annotation.md). Wrong -- the target named by a
# placeholder ("**---------**"), a bare number where the control has a name ("**1**" for Quantity),
# the value a control shows ("the **Quinn Tanaka** list" for Owner), or a screen position alone while
# the target has a name -- makes the command fail. Style -- more than one sentence, over metrics.GUIDE_WORDS
# words, an element step that does not say why -- is counted.

WRONG = ("placeholder", "number", "current value", "position only")
STYLE = ("not one sentence", "too long", "no purpose")
CONTROLS = {"textbox", "searchbox", "spinbutton", "combobox", "slider"}
POSITION = re.compile(r"\b(at the (top|bottom)|in the middle|on the (left|right))\b", re.I)
# a purpose clause: "to <verb>", "so that ..." -- not "to **Tab**" (a target) nor "next to the ..." (a place)
PURPOSE = re.compile(r"\b(so that|so you can|in order to|to (?!the\b|a\b|an\b|\*\*)[a-z]+)", re.I)


def guide_problems(guide, step):
    """The rules step's guide breaks: names from WRONG and STYLE."""
    found = []
    el = metrics.gold_element(step) if step["action"]["op"] in metrics.ELEMENT_OPS else None
    if el:
        name, shown = el.get("text") or "", (el.get("value") or "").strip().lower()
        control = el.get("role") in CONTROLS or el.get("tag") in ("input", "select", "textarea")
        # a combobox's shown value is never its name, even where the page named it so: by role, or by widget
        # (select2's box, in observations before v1.2 a read-only <span> textbox named by the text it shows)
        box = (el.get("tag"), el.get("role")) == ("span", "textbox")
        combo = el.get("role") == "combobox" or box
        shown = shown or (name.strip().lower() if box else "")
        for bold in re.findall(r"\*\*([^*]+)\*\*", guide):
            if not re.search(r"\w", bold):
                found.append("placeholder")
            elif re.fullmatch(r"[\d.,\s]+", bold) and (control or bold.strip() != name.strip()):
                found.append("number")
            elif shown and bold.strip().lower() == shown and (combo or shown != name.strip().lower()):
                found.append("current value")
        said = metrics.contains_run(metrics.label_words(guide),
                                    metrics.label_words(name)[:metrics.GROUNDING_NAME_TOKENS])
        if metrics.label_words(name) and not said and POSITION.search(guide):
            found.append("position only")
        if not PURPOSE.search(guide):
            found.append("no purpose")
    bare = re.sub(r'\*\*[^*]*\*\*|"[^"]*"', "_", guide)   # a name or a value may hold a full stop
    if re.search(r"[.!?]\s+[A-Z]", bare.rstrip(".!? ")):
        found.append("not one sentence")
    if len(guide.split()) > metrics.GUIDE_WORDS:
        found.append("too long")
    return list(dict.fromkeys(found))


def lint_report(episodes):
    """Per suite: element steps, guides, counts of each problem, guide length, share of element steps
    that say why, and up to 3 examples ("episode:step  guide") of each problem."""
    report = {}
    for ep, k in metrics.iter_steps(episodes):
        step, suite = ep["steps"][k], ep.get("suite") or "?"
        r = report.setdefault(suite, {"guides": 0, "element_steps": 0, **dict.fromkeys(WRONG + STYLE, 0),
                                      "lengths": [], "examples": {}})
        if not step.get("guide"):
            continue
        r["guides"] += 1
        r["element_steps"] += step["action"]["op"] in metrics.ELEMENT_OPS
        r["lengths"].append(len(step["guide"].split()))
        for problem in guide_problems(step["guide"], step):
            r[problem] += 1
            if len(r["examples"].setdefault(problem, [])) < 3:
                r["examples"][problem].append(f"{ep['id']}:{k}  {step['guide']}")
    for r in report.values():
        r["guide_words"] = summary(r.pop("lengths"))
        said = r["element_steps"] - r["no purpose"]
        r["purpose_rate"] = round(said / r["element_steps"], 4) if r["element_steps"] else None
    return report


def cmd_lint(args):
    report = lint_report(metrics.load_dataset(args.dataset))
    metrics.write_atomic(os.path.join(args.dataset, "lint.json"), json.dumps(report, indent=1))
    print(f"{'suite':12} {'guides':>7} {'element':>7} " + " ".join(f"{k:>14}" for k in WRONG + STYLE)
          + f" {'median words':>12} {'say why':>8}")
    for suite, r in sorted(report.items()):
        rate = "-" if r["purpose_rate"] is None else f"{100 * r['purpose_rate']:.1f}%"
        median = (r["guide_words"] or {}).get("median", "-")
        print(f"{suite:12} {r['guides']:>7} {r['element_steps']:>7} " +
              " ".join(f"{r[k]:>14}" for k in WRONG + STYLE) + f" {median:>12} {rate:>8}")
        for problem, lines in r["examples"].items():
            print(f"  {problem}:", *lines, sep="\n    ")
    wrong = sum(r[k] for r in report.values() for k in WRONG)
    if wrong and not getattr(args, "no_fail", False):
        raise SystemExit(f"lint: {wrong} guides name their target wrongly (placeholder, bare number, current "
                         f"value or position alone): {args.dataset}/lint.json lists them by suite")
    return report


# ----------------------------------------------------------------------------------------------
# audit: what a person in charge of the data wants to see before training on it.

def edit_distance(a, b):
    """Levenshtein distance in characters (one DP row)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        row = [i]
        for j, y in enumerate(b, 1):
            row.append(min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = row
    return prev[-1]


def summary(values):
    if not values:
        return None
    v = sorted(values)
    median = (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2   # of an even count: the mean of the middle two
    return {"n": len(v), "min": v[0], "median": median, "mean": round(sum(v) / len(v), 2), "max": v[-1]}


def cmd_audit(args):
    episodes = metrics.load_dataset(args.dataset)
    steps = [s for ep in episodes for s in ep["steps"]]
    guided = [s for s in steps if s.get("guide")]
    by = reviews_by_annotator(episodes, read_reviews(args.dataset))
    decided = {}  # step -> {annotator: entry} for every step someone decided
    for a, st in by.items():
        for key, e in st.items():
            if e["decision"]:
                decided.setdefault(key, {})[a] = e
    double = [d for d in decided.values() if len(d) > 1]
    agree = sum(len({(e["decision"], e["final"]) for e in d.values()}) == 1 for d in double)
    edits = [edit_distance(e["draft"] or "", e["final"] or "") for d in decided.values() for e in d.values()
             if e["decision"] == "edit"]
    lengths = [len(s["guide"].split()) for s in guided]
    report = {
        "episodes": len(episodes), "steps": len(steps),
        "status": dict(sorted(Counter(str(s.get("guide_status")) for s in steps).items())),
        "drafter": dict(sorted(Counter(str((s.get("guide_meta") or {}).get("drafter"))
                                       for s in steps).items())),
        "fallbacks": sum(bool((s.get("guide_meta") or {}).get("fallback")) for s in steps),
        "guide_words": summary(lengths),
        "guide_words_histogram": dict(sorted(Counter(min(n // 5 * 5, 40) for n in lengths).items())),
        "grounding_rate": (round(sum(metrics.guide_grounding(s["guide"], s) for s in guided) / len(guided), 4)
                           if guided else None),
        "rejected_reasons": dict(Counter(e["reason"] for d in decided.values() for e in d.values()
                                         if e["decision"] == "reject").most_common()),
        "edit_distance_chars": summary(edits),
        "annotators": {a: sum(bool(e["decision"]) for e in st.values()) for a, st in by.items()},
        "doubly_reviewed": len(double), "agreement": round(agree / len(double), 4) if double else None,
        "target_flagged": [f"{ep['id']}:{k}" for ep, k in metrics.iter_steps(episodes)
                           if any(st[(ep["id"], k)]["flagged"] for st in by.values())],
        "splits": dict(Counter(ep.get("split", "none") for ep in episodes)),
        "lint": {suite: {k: v for k, v in r.items() if k != "examples"}
                 for suite, r in lint_report(episodes).items()},
    }
    metrics.write_atomic(os.path.join(args.dataset, "audit.json"), json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return report


# ----------------------------------------------------------------------------------------------
# The command line.

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    api = argparse.ArgumentParser(add_help=False)
    api.add_argument("--drafter", choices=["template", "api", "local"], default="template",
                     help="who writes the text")
    api.add_argument("--max-new-tokens", type=int, default=80, help="api/local: reply length cap in tokens")
    api.add_argument("--api-base", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible endpoint")
    api.add_argument("--api-model", default=None, help="model name sent to the endpoint (required for api)")
    api.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    api.add_argument("--api-timeout", type=float, default=60.0, help="seconds per request")
    api.add_argument("--api-retries", type=int, default=3, help="retries before the fallback")
    api.add_argument("--api-backoff", type=float, default=1.0,
                     help="seconds before the first retry, doubling after")
    api.add_argument("--ckpt", default=None,
                     help="local: a Hugging Face checkpoint folder (image-text-to-text)")
    api.add_argument("--batch-size", type=int, default=8, help="local: steps generated together")
    for name in ("draft", "paraphrase"):
        sub.add_parser(name, parents=[api]).add_argument("dataset")
    r = sub.add_parser("review")
    r.add_argument("dataset")
    r.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free port)")
    r.add_argument("--annotator", default=os.environ.get("USER", "anonymous"),
                   help="recorded with every decision")
    sub.add_parser("export").add_argument("dataset")
    v = sub.add_parser("verify")
    v.add_argument("dataset")
    v.add_argument("--accept-drafts", action="store_true", help="mark every draft `auto` (no person saw it)")
    s = sub.add_parser("split")
    s.add_argument("dataset")
    s.add_argument("--val", type=float, default=0.1, help="share of episodes in val")
    s.add_argument("--test", type=float, default=0.2, help="share of episodes in test")
    s.add_argument("--test-tasks", default="", help="comma-separated tasks held out entirely for test")
    sub.add_parser("audit").add_argument("dataset")
    sub.add_parser("lint").add_argument("dataset")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # before any work: a wrong path fails at once (load_model's check)
    if getattr(args, "drafter", None) == "local":
        if not args.ckpt:
            raise SystemExit("--drafter local needs --ckpt PATH (a Hugging Face checkpoint folder)")
        if not os.path.isfile(os.path.join(args.ckpt, "config.json")):
            raise SystemExit(f"--ckpt {args.ckpt}: not a Hugging Face checkpoint folder (no config.json)")
        if args.batch_size < 1 or args.max_new_tokens < 1:
            raise SystemExit("--batch-size and --max-new-tokens must be at least 1")
    if getattr(args, "drafter", None) == "api" and not args.api_model:
        raise SystemExit("--drafter api needs --api-model (the model name the endpoint serves)")
    try:
        if args.command == "review":
            return serve_review(args.dataset, args.port, args.annotator)
        commands = {"draft": cmd_draft, "verify": cmd_verify, "paraphrase": cmd_paraphrase,
                    "split": cmd_split, "export": cmd_export, "audit": cmd_audit, "lint": cmd_lint}
        return commands[args.command](args)
    except metrics.DatasetError as e:   # the one line `metrics.py check` prints, exit code 2
        metrics.fail(e)
    except metrics.ApiError as e:   # an outage after the retries: what was done is kept, the step is not done
        raise SystemExit(f"annotate {args.command}: stopped, the endpoint failed ({e}); what was done is "
                         "kept: run the same command again for the rest") from None


if __name__ == "__main__":
    # a shell starts a background job with SIGINT ignored, and children inherit that: Ctrl-C (or a
    # test's SIGINT) must still stop the run cleanly, so the handler is set here, not inherited
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
