"""annotate.py -- guide sentences for every recorded step: LLM-assisted drafts, human verification, splits.

MAG's annotation is "LLM assistance and human verification": a drafter writes the guide sentence
of each step (what a Digital Adoption Platform overlay would tell a person), a person accepts,
edits or rejects it in a review page, and only what a person saw is called `verified`.

Runbook
  python annotate.py draft DATASET --drafter template          offline, deterministic drafts
  python annotate.py draft DATASET --drafter api --api-base http://127.0.0.1:8000/v1 --api-model gpt-4o
                                                                (key from $OPENAI_API_KEY, never logged)
  python annotate.py review DATASET --annotator ada             review page on 127.0.0.1 (URL with a token)
  python annotate.py export DATASET                             decisions -> steps (verified/edited/rejected)
  python annotate.py verify DATASET --accept-drafts             no person in the loop: status `auto`
  python annotate.py paraphrase DATASET --drafter template      guide_alt.paraphrase for replay's probe
  python annotate.py split DATASET --val 0.1 --test 0.2         whole episodes -> train/val/test
  python annotate.py audit DATASET                              counts, lengths, grounding, agreement

Files it writes beside episodes.jsonl: drafts.jsonl (every draft as it is made: a crash loses
nothing, a rerun skips what is there), review.jsonl (every decision, appended and fsynced), and
audit.json. episodes.jsonl itself is only ever replaced whole, atomically.

Left out on purpose: no multi-user server (one annotator per review process; two people reviewing
the same steps work from two processes and their agreement is measured by `audit`).
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time

import metrics

# ----------------------------------------------------------------------------------------------
# Side files: drafts.jsonl and review.jsonl are append-only logs, merged into episodes.jsonl.

def append_jsonl(path, record):
    """One record per line, flushed and fsynced before returning."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path):
    """Records of an append-only log; a torn last line (a crash mid-write) is skipped with a warning."""
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
            if i == len(lines):
                print(f"warning: {path}:{i}: torn last line ignored", file=sys.stderr)
                continue
            raise metrics.DatasetError(f"{path}:{i}: not valid JSON") from None
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
                step["guide_meta"] = {"drafter": d["drafter"], "fallback": d.get("fallback"), "draft": d["guide"]}
                changed += 1
    if changed:
        metrics.write_dataset(path, episodes)
    return episodes, changed


# ----------------------------------------------------------------------------------------------
# The template drafter: offline, deterministic, varied. It names the target by its visible text and
# role ("the **Save** button"), uses a verb that fits the op, says where the target is when its name
# does not single it out, and for typing says what to type.

ROLE_NOUN = {"button": "button", "link": "link", "textbox": "field", "searchbox": "search box", "checkbox": "checkbox",
             "radio": "option", "combobox": "list", "tab": "tab", "menuitem": "menu entry", "option": "option",
             "treeitem": "item", "slider": "slider", "spinbutton": "field", "switch": "switch", "gridcell": "cell"}
TAG_NOUN = {"li": "item", "img": "image", "input": "field", "textarea": "text box", "select": "list", "button": "button"}
NAME_WORDS = 8  # longer labels are cut to their first words (guide_grounding needs the first six)


def stable_hash(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def target_of(step):
    mark = step["action"].get("mark")
    return next((e for e in step["elements"] if e["mark"] == mark), None)


def position(el, viewport):
    """'at the top left', 'in the middle', ... from the box centre's third of the screen."""
    x, y = metrics.box_center(el["bbox"])
    row = ("top", "middle", "bottom")[min(2, int(3 * y / viewport[1]))]
    col = ("left", "", "right")[min(2, int(3 * x / viewport[0]))]
    if row == "middle":
        return "in the middle" + (f" on the {col}" if col else "")
    return f"at the {row}" + (f" {col}" if col else "")


def noun(el):
    return ROLE_NOUN.get(el.get("role")) or TAG_NOUN.get(el.get("tag"), "")


def name_phrase(el, elements, viewport):
    """"the **Save** button", or "the button at the top right" when the label is empty or shared."""
    words = (el.get("text") or "").rstrip(":").split()  # form labels often end in a colon
    label = " ".join(words[:NAME_WORDS]) + (" ..." if len(words) > NAME_WORDS else "")
    kind = noun(el)
    if not label:
        return f"the {kind or 'element'} {position(el, viewport)}"
    phrase = f"the **{label}** {kind}".rstrip() if kind else f"**{label}**"
    twins = [e for e in elements if e is not el and (e.get("text") or "").strip() == (el.get("text") or "").strip()]
    return f"{phrase} {position(el, viewport)}" if twins else phrase


# Each op has several sentence shapes; consecutive steps never reuse the shape of the step before.
TEMPLATES = {
    "click": ["Click {n}.", "Press {n}.", "Click on {n}."],
    "click:item": ["Select {n}.", "Choose {n}.", "Click {n}."],
    "click:link": ["Click {n}.", "Open {n}.", "Follow {n}."],
    "click:checkbox": ["Tick {n}.", "Check {n}.", "Click {n} to select it."],
    "click:tab": ["Switch to {n}.", "Open {n}.", "Click {n}."],
    "click:textbox": ["Click {n} to put the cursor in it.", "Select {n} to start typing there."],
    "type": ['Type "{v}" into {n}.', 'Enter "{v}" in {n}.', 'Fill in {n} with "{v}".'],
    "select": ['Choose "{v}" from {n}.', 'Select "{v}" in {n}.', 'Pick "{v}" from {n}.'],
    "hover": ["Hover over {n}.", "Move the mouse over {n}.", "Point at {n}."],
    "press": ["Press **{v}**.", "Hit **{v}** on the keyboard.", "Press the **{v}** key."],
    "scroll": ["Scroll {v} to see more of the page.", "Scroll {v} to bring more of the page into view."],
    "stop": ["You are done: the task is complete.", "That finishes the task.", "Stop here: everything is done."],
}


def template_kind(step):
    op, el = step["action"]["op"], target_of(step)
    if op == "click" and el:
        role = el.get("role")
        if role in ("link", "checkbox", "tab"):
            return f"click:{role}"
        if role in ("textbox", "searchbox"):
            return "click:textbox"
        if role in ("option", "menuitem", "treeitem", "gridcell") or el.get("tag") == "li":
            return "click:item"
    return op


def template_guide(ep, k, previous=None):
    """The template draft of step k; `previous` is (kind, shape) of step k-1, never repeated."""
    step = ep["steps"][k]
    op, value = step["action"]["op"], step["action"].get("value") or ""
    el = target_of(step)
    n = name_phrase(el, step["elements"], ep["viewport"]) if el else "the page"
    kind = template_kind(step)
    shapes = TEMPLATES[kind]
    i = (stable_hash(ep["id"]) + k) % len(shapes)
    if previous == (kind, i):
        i = (i + 1) % len(shapes)
    if op == "stop" and value:
        text = f'You are done: answer "{value}".'
    else:
        text = shapes[i].format(n=n, v=value)
    return text[0].upper() + text[1:], (kind, i)


# ----------------------------------------------------------------------------------------------
# The API drafter: any OpenAI-compatible chat-completions endpoint. The screenshot goes with the
# target highlighted; the reply is cleaned and checked (one sentence that names the target) before
# it is stored, else the template draft is kept and the fallback recorded.

API_SYSTEM = ("You write the one-sentence guides that a digital adoption platform shows to a person using a web "
              "page. Given the task, the steps so far, the highlighted element and the action taken on it, write ONE "
              "short imperative sentence telling the person what to do, naming the element by its visible label "
              "in **bold**. Reply with the sentence only.")
MAX_GUIDE_WORDS = 40


def png_data_url(img):
    import base64
    import io
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def api_messages(ep, k):
    from PIL import Image
    step = ep["steps"][k]
    img = Image.open(os.path.join(ep["_root"], step["screenshot"])).convert("RGB")
    el = target_of(step)
    if el:
        img = metrics.draw_som(img, [el])
    history = metrics.history_text(ep, k, "som", "guide_first")
    action = metrics.format_action(step["action"], "som", ep["viewport"])
    target = f'[{el["mark"]}] {el.get("role")} "{el.get("text") or ""}"' if el else "none"
    text = f"Task: {ep['instruction']}\nSteps so far:\n{history}\nHighlighted element: {target}\nAction: {action}\nGuide:"
    return [{"role": "system", "content": API_SYSTEM},
            {"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": png_data_url(img)}}]}]


def chat_completion(api_base, model, messages, key=None, timeout=30.0, retries=3, backoff=1.0, max_tokens=80):
    """POST /chat/completions with retries and exponential backoff; returns the reply text or raises
    RuntimeError naming the last failure (the key is never part of any message)."""
    import urllib.error
    import urllib.request
    body = json.dumps({"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    last = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            req = urllib.request.Request(api_base.rstrip("/") + "/chat/completions", data=body, headers=headers)
            with urllib.request.urlopen(req, timeout=timeout) as r:
                reply = json.loads(r.read())
            return reply["choices"][0]["message"]["content"] or ""
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
            if e.code < 500 and e.code != 429:  # a client error will not get better with retries
                break
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
            last = f"malformed reply ({type(e).__name__})"
    raise RuntimeError(f"{api_base}: {last} after {attempt + 1} attempt(s)")


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
    if len(re.findall(r"[.!?](\s|$)", guide.rstrip(".!?") + " ")) > 0:
        return "more than one sentence"
    el = target_of(step)
    named = not (el and (el.get("text") or "").strip()) or metrics.guide_grounding(guide, step)
    return None if named else "does not name the target with a fitting verb"


# ----------------------------------------------------------------------------------------------
# draft: fill `guide` (status draft) for every step that has none; resumable through drafts.jsonl.

def cmd_draft(args):
    episodes = metrics.load_dataset(args.dataset)
    log = os.path.join(args.dataset, "drafts.jsonl")
    done = {(d["episode"], d["step"]) for d in read_jsonl(log)}
    key = os.environ.get(args.api_key_env) if args.drafter == "api" else None
    made = fallbacks = 0
    try:
        for ep in episodes:
            previous = None
            for k, step in enumerate(ep["steps"]):
                guide, previous = template_guide(ep, k, previous)
                if step.get("guide") or (ep["id"], k) in done:
                    continue
                record = {"episode": ep["id"], "step": k, "guide": guide, "drafter": "template", "fallback": None}
                if args.drafter == "api":
                    try:
                        reply = clean_guide(chat_completion(args.api_base, args.api_model, api_messages(ep, k), key,
                                                            timeout=args.api_timeout, retries=args.api_retries, backoff=args.api_backoff))
                        why = check_guide(reply, step)
                    except RuntimeError as e:
                        reply, why = None, str(e)
                    if why is None:
                        record.update(guide=reply, drafter=f"api:{args.api_model}")
                    else:
                        record["fallback"] = f"api:{args.api_model}: {why}"
                        fallbacks += 1
                append_jsonl(log, record)
                made += 1
    finally:  # Ctrl-C included: what was drafted is merged, the rest is drafted by the next run
        _, merged = merge_drafts(args.dataset)
        print(f"draft: {made} new drafts ({fallbacks} fell back to the template), {merged} merged into "
              f"{args.dataset}/episodes.jsonl")


# === review server (section owned by the review-page work) ===
# === end review server ===


# ----------------------------------------------------------------------------------------------
# verify: pipelines without a person accept the drafts as `auto` -- never `verified`.

def cmd_verify(args):
    if not args.accept_drafts:
        raise SystemExit("verify needs --accept-drafts (it marks drafts `auto`; only `review` makes them `verified`)")
    episodes, _ = merge_drafts(args.dataset)
    n = 0
    for _, step in ((ep, s) for ep in episodes for s in ep["steps"]):
        if step.get("guide_status") == "draft":
            step["guide_status"] = "auto"
            n += 1
    metrics.write_dataset(args.dataset, episodes)
    print(f"verify: {n} drafts marked auto")


# ----------------------------------------------------------------------------------------------
# paraphrase: the same instruction with the target renamed -- described by kind, order and place
# instead of its label -- for replay's mediation probe (WebMRE's "paraphrase" prefix).

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def describe(el, elements, viewport):
    """'the second button, at the top right': no label words, only what and where."""
    kind = noun(el) or "element"
    same = [e for e in elements if (noun(e) or "element") == kind]
    nth = same.index(el) if el in same else 0
    order = f"{ORDINALS[nth]} " if len(same) > 1 and nth < len(ORDINALS) else ""
    return f"the {order}{kind} {position(el, viewport)}"


PARAPHRASES = {
    "click": "Click {d}.", "hover": "Move the mouse over {d}.", "type": 'Type "{v}" into {d}.',
    "select": 'Choose "{v}" from {d}.', "press": "Press the {v} key.", "scroll": "Scroll the page {v}.",
    "stop": "The task is finished.",
}


def template_paraphrase(ep, k):
    step = ep["steps"][k]
    op, value = step["action"]["op"], step["action"].get("value") or ""
    el = target_of(step)
    d = describe(el, step["elements"], ep["viewport"]) if el else "the page"
    return PARAPHRASES[op].format(d=d, v=value)


def leaks_label(text, step):
    """True if the paraphrase still contains the target's label (its first words, as guide_grounding reads it)."""
    el = target_of(step)
    label = metrics._words(el.get("text")) if el else []
    label = [w for w in label if w not in metrics._words(step["action"].get("value"))]  # the typed value may stay
    return bool(label) and metrics._contains_seq(metrics._words(text), label[:metrics.GROUNDING_NAME_TOKENS])


def cmd_paraphrase(args):
    episodes, _ = merge_drafts(args.dataset)
    key = os.environ.get(args.api_key_env) if args.drafter == "api" else None
    n = fallbacks = 0
    for ep in episodes:
        for k, step in enumerate(ep["steps"]):
            alt = step.get("guide_alt") or {}
            if alt.get("paraphrase"):
                continue
            text, by = template_paraphrase(ep, k), "template"
            if args.drafter == "api" and step.get("guide"):
                messages = [{"role": "system", "content": "Rewrite the instruction so that it names the highlighted "
                             "element WITHOUT its visible label: describe what and where it is instead. One sentence."},
                            {"role": "user", "content": f"Instruction: {step['guide']}"}]
                try:
                    reply = clean_guide(chat_completion(args.api_base, args.api_model, messages, key,
                                                        timeout=args.api_timeout, retries=args.api_retries, backoff=args.api_backoff))
                    if reply and not leaks_label(reply, step) and check_guide(reply, {**step, "elements": []}) is None:
                        text, by = reply, f"api:{args.api_model}"
                    else:
                        fallbacks += 1
                except RuntimeError:
                    fallbacks += 1
            step["guide_alt"] = {**alt, "paraphrase": text, "paraphrase_by": by}
            n += 1
    metrics.write_dataset(args.dataset, episodes)
    print(f"paraphrase: {n} written ({fallbacks} fell back to the template)")


# ----------------------------------------------------------------------------------------------
# split: whole episodes to train/val/test by a hash of the episode id (stable across reruns and
# machines); --test-tasks holds whole tasks out.

def assign_split(ep_id, task, val, test, test_tasks):
    if task in test_tasks:
        return "test"
    u = stable_hash("split:" + ep_id) / 16 ** 8
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
# The command line.

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    api = argparse.ArgumentParser(add_help=False)
    api.add_argument("--drafter", choices=["template", "api"], default="template", help="who writes the text")
    api.add_argument("--api-base", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible endpoint")
    api.add_argument("--api-model", default="gpt-4o", help="model name sent to the endpoint")
    api.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    api.add_argument("--api-timeout", type=float, default=60.0, help="seconds per request")
    api.add_argument("--api-retries", type=int, default=3, help="retries before the fallback")
    api.add_argument("--api-backoff", type=float, default=1.0, help="seconds before the first retry, doubling after")
    for name in ("draft", "paraphrase"):
        sub.add_parser(name, parents=[api]).add_argument("dataset")
    r = sub.add_parser("review")
    r.add_argument("dataset")
    r.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free port)")
    r.add_argument("--annotator", default=os.environ.get("USER", "anonymous"), help="recorded with every decision")
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
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.command == "review":
        return serve_review(args.dataset, args.port, args.annotator)
    try:
        return globals()["cmd_" + args.command](args)
    except metrics.DatasetError as e:
        raise SystemExit(f"annotate {args.command}: {e}")


if __name__ == "__main__":
    main()
