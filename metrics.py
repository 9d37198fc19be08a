"""metrics.py -- the one shared module of the MAG harness.

Everything two stages must agree on lives here, so that collection, annotation, training,
evaluation and replay can never drift apart. The protocol comes first -- what a model reads and writes and
how a reply is scored -- then the files it lives in:

  1. the output grammar (guide + grounded action)               -> format_output, parse_output
  2. the prompt a model sees                                    -> build_messages
  3. the step's scores: action, guide grounding, BLEU/chrF/ROUGE -> element_correct, guide_grounding
     a step's guide as the template drafter writes it          -> template_guide, template_guides
  4. a reply's scores, their aggregation and intervals          -> score_step, aggregate, paired_bootstrap
  5. the observation: which elements get a Set-of-Mark box      -> INIT_JS, OBSERVE_JS, draw_som
  6. the dataset format (load, validate, append, repair, merge) -> load_dataset, merge_datasets
     a benchmark: its definition, job list and data fingerprint -> load_benchmark, check_benchmark_data
     the export for the Hugging Face Hub                        -> export_dataset
  7. what the model stages share, torch-free                    -> usable_steps, chat_prompt, images_arg
  8. the OpenAI-compatible client (api policy and drafter)      -> chat_completion, preflight
and a command line: python metrics.py check | som | merge | export.

INIT_JS and OBSERVE_JS are not plain names: a module-level __getattr__ (section 5) reads them from
assets/init.js and assets/observe.js on first use, with their knobs filled in, so that a copy of
metrics.py without assets/ (beside a trainer, say) still imports; only a live browser needs them.

It imports no stage and no torch (collect.py and annotate.py must start fast); Pillow is
imported lazily by the two functions that draw or read images, Hugging Face's datasets (optional) by
the export alone.

Quick check:
  python -c "import metrics as m; print(m.parse_output('Guide: Hi.\\nAction: click(3)', 'som',
      'guide_first', None))"
"""
import argparse
import functools
import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import string
import struct
import sys
import time
from collections import Counter

OPS = ("click", "type", "select", "hover", "press", "scroll", "stop")
# where a suite allows several tabs (its steps record "tabs"): new_tab(), tab_focus(K) (K: the tab's index in
# the prompt's list, from 0, as in WebArena and BrowserGym), close_tab(); never valid on a step without tabs
TAB_OPS = ("new_tab", "tab_focus", "close_tab")
ELEMENT_OPS = ("click", "type", "select", "hover")   # ops that need a target (a mark or a point)
VALUE_OPS = ("type", "select", "press", "scroll")    # ops whose value is required
GROUNDINGS = ("som", "coord")
ORDERS = ("guide_first", "action_first", "action_only")
GUIDE_STATUSES = ("draft", "auto", "verified", "edited", "rejected", None)
COORD_SCALE = 1000  # pixel grounding uses a 0..1000 frame of the screenshot, like Qwen-VL/SeeClick


# ----------------------------------------------------------------------------------------------
# 1. The action grammar: Set-of-Mark `click(7)`, pixel `click(412, 233)` in a 0..1000 frame.

def to_norm(point, viewport):
    """Screenshot pixels -> integer 0..1000 frame (clamped)."""
    return [min(COORD_SCALE, max(0, round(p / v * COORD_SCALE))) for p, v in zip(point, viewport)]


def from_norm(point, viewport):
    """0..1000 frame -> screenshot pixels (floats)."""
    return [p / COORD_SCALE * v for p, v in zip(point, viewport)]


def make_action(op, mark=None, point=None, value=None):
    return {"op": op, "mark": mark, "point": point, "value": value}


RANDOM_WORDS = ("hello", "test", "blue", "42", "Alice")


def random_action(rng, marks):
    """The random policy's action (collect.py's live one, replay.py's offline chance row): uniform over the
    marks; mostly clicks, sometimes typing a word, scrolling or pressing Enter."""
    u = rng.random()
    if not marks or u < 0.1:
        return make_action("scroll", value=rng.choice(["down", "up"])) if u < 0.07 \
            else make_action("press", value="Enter")
    if u < 0.3:
        return make_action("type", mark=rng.choice(marks), value=rng.choice(RANDOM_WORDS))
    return make_action("click", mark=rng.choice(marks))


def format_action(action, grounding, viewport):
    """The one-line action string, e.g. `type(7, "ada")` (som) or `type(412, 233, "ada")` (coord)."""
    op, value = action["op"], action.get("value")
    args = []
    if op in ELEMENT_OPS:
        if grounding == "som":
            args.append(str(action["mark"]))
        else:
            args += [str(v) for v in to_norm(action["point"], viewport)]
        if op in ("type", "select"):
            args.append(json.dumps(value or "", ensure_ascii=False))
    elif op in ("press", "scroll") or (op == "stop" and value):
        args.append(json.dumps(value or "", ensure_ascii=False))
    elif op == "tab_focus":   # its value is the tab's index, written as a number
        args.append(value or "0")
    return f"{op}({', '.join(args)})"


_CALL = re.compile(r"^([a-z_]+)\s*\((.*)\)$", re.S)
_ARG = re.compile(r'\s*(?:(-?\d+(?:\.\d+)?)|("(?:[^"\\]|\\.)*"))\s*(?:,|$)', re.S)
SCROLL_DIRECTIONS = ("up", "down", "left", "right")


def _split_args(s):
    """'7, "a, b"' -> [7, 'a, b']; numbers and JSON strings only, else None."""
    out, pos = [], 0
    s = s.strip()
    while pos < len(s):
        m = _ARG.match(s, pos)
        if not m or m.end() == pos:
            return None
        if m.group(1) is not None:
            num = m.group(1)
            out.append(float(num) if "." in num else int(num))
        else:
            try:
                out.append(json.loads(m.group(2)))
            except json.JSONDecodeError:
                return None
        pos = m.end()
    return out


ANSWER_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)\n?```", re.S)   # WebArena-Verified's own pattern


def json_answer(text):
    """A stop() argument that is a JSON object, bare or in a fenced ```json block (found as WebArena-Verified
    finds it in an answer) -> the object as compact JSON text; None when it is not one."""
    m = ANSWER_FENCE.search(text)
    try:
        obj = json.loads(m.group(1).strip() if m else text)
    except json.JSONDecodeError:
        return None
    return json.dumps(obj, ensure_ascii=False) if isinstance(obj, dict) else None


def parse_action(text, grounding, viewport, tabs=False):
    """Parse one action string into an action dict, or None if it is not in the grammar. Never raises.
    tabs: the suite allows several tabs (TAB_OPS are in its grammar)."""
    if not isinstance(text, str):
        return None
    text = text.strip().strip("`").strip()
    m = _CALL.match(text)
    if not m or m.group(1) not in (OPS + TAB_OPS if tabs else OPS):
        return None
    op, args = m.group(1), _split_args(m.group(2))
    if args is None:   # stop({...}): a JSON answer (WebArena-Verified's), kept as its JSON text
        value = json_answer(m.group(2)) if op == "stop" else None
        return None if value is None else make_action(op, value=value)
    nums = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    strs = [a for a in args if isinstance(a, str)]
    if args != nums + strs:  # numbers first, then strings
        return None
    if op in TAB_OPS:   # tab_focus(K), K a whole number from 0; new_tab() and close_tab() take nothing
        want = 1 if op == "tab_focus" else 0
        ok = len(args) == want and all(_is_int(a) and a >= 0 for a in args)
        return make_action(op, value=str(args[0]) if args else None) if ok else None
    if op in ELEMENT_OPS:
        want_str = 1 if op in ("type", "select") else 0
        if len(strs) != want_str:
            return None
        value = strs[0] if want_str else None
        if grounding == "som":
            if len(nums) != 1 or not isinstance(nums[0], int) or nums[0] < 1:
                return None
            return make_action(op, mark=nums[0], value=value)
        if len(nums) != 2 or not all(0 <= v <= COORD_SCALE for v in nums):
            return None
        return make_action(op, point=from_norm(nums, viewport), value=value)
    bare = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*", m.group(2))
    if op == "stop" and bare:   # stop(6): a bare number is the answer, as written (6.50 stays 6.50)
        return make_action(op, value=bare.group(1))
    if nums or len(strs) > 1:
        return None
    value = strs[0] if strs else None
    if op in ("press", "scroll") and not value:
        return None
    if op == "scroll" and value not in SCROLL_DIRECTIONS:
        return None
    return make_action(op, value=value if op != "stop" else (value or ""))


def format_output(guide, action, grounding, order, viewport):
    """The model's target text: `Guide: ...` and `Action: ...` lines in the given order."""
    act = "Action: " + format_action(action, grounding, viewport)
    if order == "action_only":
        return act
    g = "Guide: " + " ".join((guide or "").split())
    return f"{g}\n{act}" if order == "guide_first" else f"{act}\n{g}"


_LINE = re.compile(r"^\s*(?:[*_#>\-]+\s*)?(guide|action)\s*(?:[*_]+\s*)?:\s*(?:[*_]+\s*)?(.*?)\s*$", re.I)


def _fields(text):
    """[(kind, value), ...] for every Guide:/Action: line, in order."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((m.group(1).lower(), m.group(2)))
    return out


def parse_output(text, grounding, order, viewport, tabs=False):
    """(guide | None, action | None) from a model's reply. Never raises; never evaluates code.

    Lenient about order and markdown decoration (so one misplaced line costs only the format
    reward, see check_format); the first Guide and the first Action line are used. With
    order='action_only' the guide is always None. tabs: the tab actions are in the grammar.
    """
    if not isinstance(text, str):
        return None, None
    fields = _fields(text)
    guide = next((v for k, v in fields if k == "guide"), None)
    action_text = next((v for k, v in fields if k == "action"), None)
    action = parse_action(action_text, grounding, viewport, tabs) if action_text is not None else None
    if action is None and action_text and action_text.startswith("stop("):   # a JSON answer on several lines
        rest = text[text.index(action_text):]
        action = parse_action(rest[:rest.rfind(")") + 1], grounding, viewport)
    if order == "action_only" or not guide:
        guide = None
    return guide, action


def check_format(text, grounding, order, viewport, tabs=False):
    """True when the reply is exactly the expected lines in the expected order, each well-formed."""
    if not isinstance(text, str):
        return False
    lines = [l for l in text.strip().splitlines() if l.strip()]
    kinds = {"action_only": ["action"], "guide_first": ["guide", "action"]}.get(order, ["action", "guide"])
    if len(lines) != len(kinds):
        return False
    for line, kind in zip(lines, kinds):
        m = _LINE.match(line)
        if not m or m.group(1).lower() != kind or not m.group(2):
            return False
        if kind == "action" and parse_action(m.group(2), grounding, viewport, tabs) is None:
            return False
    return True


# ----------------------------------------------------------------------------------------------
# 2. The prompt: chat messages with the screenshot, the task and the history.

GROUNDING_HELP = {
    "som": ("The screenshot shows numbered boxes (marks) on the page's interactive elements. "
            "Name an element by its mark number.\n"
            "Actions: click(MARK), hover(MARK), type(MARK, \"text\"), select(MARK, \"option\"), "
            "press(\"Key\"), scroll(\"down\"|\"up\"), stop(\"answer or empty\")."),
    "coord": ("Name an element by a point on it: x, y in a 0-1000 frame of the screenshot "
              "(0,0 top-left; 1000,1000 bottom-right).\n"
              "Actions: click(X, Y), hover(X, Y), type(X, Y, \"text\"), select(X, Y, \"option\"), "
              "press(\"Key\"), scroll(\"down\"|\"up\"), stop(\"answer or empty\")."),
}
ORDER_HELP = {
    "guide_first": "Reply with exactly two lines:\n"
                   "Guide: <one sentence telling a person what to do next>\nAction: <the action>",
    "action_first": "Reply with exactly two lines:\n"
                    "Action: <the action>\nGuide: <one sentence telling a person what to do next>",
    "action_only": "Reply with exactly one line:\nAction: <the action>",
}
TAB_HELP = ("Several tabs may be open (listed with the task; the screenshot is the focused one's): "
            "new_tab() opens the task's start page in a new tab, tab_focus(K) shows tab K, close_tab() "
            "closes the focused one.")
SYSTEM_PROMPT = ("You operate a web page for a person and tell them what you do. At each step you see a "
                 "screenshot of the page, the task, and the steps so far; you write the next step.")
MAX_HISTORY = 8  # earlier steps shown in the prompt; older ones are summarised by their count


def system_text(grounding, order, tabs=False):
    actions = f"{GROUNDING_HELP[grounding]}\n{TAB_HELP}" if tabs else GROUNDING_HELP[grounding]
    return f"{SYSTEM_PROMPT}\n{actions}\n{ORDER_HELP[order]}"


def tabs_text(step):
    """The open tabs of a step, the focused one marked: "[0] Corner Shop (focused) | [1] About"."""
    return " | ".join(f"[{k}] {t['title'] or t['url']}" + (" (focused)" if k == step["tab"] else "")
                      for k, t in enumerate(step["tabs"]))


# a step's exec_error when the policy's reply did not parse (recorded as stop())
UNPARSEABLE = "unparseable reply"


def history_text(episode, step_index, grounding, order):
    # a step whose reply did not parse did nothing: the episode loop records it as stop() (a dataset
    # step needs an action), and the model must not read that it had stopped
    steps = [s for s in episode["steps"][:step_index] if s.get("exec_error") != UNPARSEABLE]
    lines = []
    if len(steps) > MAX_HISTORY:
        lines.append(f"({len(steps) - MAX_HISTORY} earlier steps not shown)")
    for n, s in enumerate(steps[-MAX_HISTORY:], start=max(0, len(steps) - MAX_HISTORY) + 1):
        act = format_action(s["action"], grounding, episode["viewport"])
        guide = s.get("guide") if order != "action_only" else None
        lines.append(f"{n}. " + (f"Guide: {guide} | " if guide else "") + f"Action: {act}")
    return "\n".join(lines) if lines else "none"


def elements_text(elements):
    """SeeAct-style textual choices: one line per mark (prompt variant elements='text')."""
    lines = []
    for e in elements:
        text = json.dumps(e.get("text") or "", ensure_ascii=False)
        # what a control shows now (a select's choice, a field's text), beside its name
        shows = f" = {json.dumps(e['value'], ensure_ascii=False)}" if e.get("value") else ""
        lines.append(f"[{e['mark']}] {e.get('role') or e.get('tag')} {text}{shows}")
    return "\n".join(lines)


def step_image(episode, step_index, grounding, png=None):
    """The image a model sees for a step: marks drawn for 'som', the raw screenshot for 'coord'; the
    recorded screenshot, or `png` (bytes: a live observation not yet on disk)."""
    from PIL import Image
    step = episode["steps"][step_index]
    path = io.BytesIO(png) if png is not None else os.path.join(episode.get("_root", "."), step["screenshot"])
    img = Image.open(path).convert("RGB")
    return draw_som(img, step["elements"]) if grounding == "som" else img


def build_messages(episode, step_index, grounding, order, elements=None, image=None):
    """Chat messages (transformers' multimodal chat format) for predicting step `step_index`.

    `elements="text"` adds the list of marks with their text (off by default: MAG is
    screenshot-only). `image` overrides the image (a live observation not yet on disk);
    otherwise it is read from the dataset and marked for 'som'.
    """
    step = episode["steps"][step_index]
    if image is None:
        image = step_image(episode, step_index, grounding)
    history = history_text(episode, step_index, grounding, order)
    text = f"Task: {episode['instruction']}\n\nPrevious steps:\n{history}\n"
    if "tabs" in step:   # a suite with several tabs: which are open, which one the screenshot shows
        text += f"\nOpen tabs: {tabs_text(step)}\n"
    if elements == "text":
        text += f"\nElements:\n{elements_text(step['elements'])}\n"
    text += "\nWhat is the next step?"
    return [
        {"role": "system", "content": [{"type": "text",
                                        "text": system_text(grounding, order, "tabs" in step)}]},
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]},
    ]


# ----------------------------------------------------------------------------------------------
# 3. Scores. Action scores follow Mind2Web; guide scores match sacrebleu / rouge-score exactly.

def _tokens(s):
    return (s or "").lower().split()


def op_string(action):
    """Mind2Web's operation string: "op value" (value only where the op has one)."""
    if action is None:
        return ""
    with_value = ("type", "select", "press", "scroll", "stop", "tab_focus")   # tab_focus: the tab's index
    value = action.get("value") if action["op"] in with_value else None
    return f"{action['op']} {value or ''}".strip()


def token_f1(a, b):
    """Token F1 between two strings: lowercased, split on whitespace, multiset overlap."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta and not tb:
        return 1.0
    common = sum((Counter(ta) & Counter(tb)).values())
    if common == 0:
        return 0.0
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)


def op_f1(pred_action, gold_action):
    """Operation F1 (Mind2Web): token F1 of "op value" strings; 0 for an invalid prediction."""
    if pred_action is None:
        return 0.0
    return token_f1(op_string(pred_action), op_string(gold_action))


def gold_element(gold_step):
    mark = gold_step["action"].get("mark")
    return next((e for e in gold_step["elements"] if e["mark"] == mark), None)


def in_box(point, bbox):
    """Point inside a box, edges included."""
    return bbox[0] <= point[0] <= bbox[2] and bbox[1] <= point[1] <= bbox[3]


def element_correct(pred_action, gold_step, grounding):
    """1 if the prediction hits the gold target: same mark (som) or a point in its box (coord).

    For element-free gold ops (press/scroll/stop) the target is "no element": correct when the
    prediction has none either.
    """
    if pred_action is None:
        return 0
    gold = gold_step["action"]
    if gold["op"] not in ELEMENT_OPS:
        return int(pred_action["op"] not in ELEMENT_OPS)
    if pred_action["op"] not in ELEMENT_OPS:
        return 0
    if grounding == "som":
        return int(pred_action.get("mark") is not None and pred_action["mark"] == gold.get("mark"))
    el = gold_element(gold_step)
    box = el["bbox"] if el else None
    if box is None and gold.get("point"):  # a pixel-only gold step: a box of one pixel around the point
        box = [gold["point"][0] - 0.5, gold["point"][1] - 0.5, gold["point"][0] + 0.5, gold["point"][1] + 0.5]
    return int(box is not None and pred_action.get("point") is not None and in_box(pred_action["point"], box))


# Verbs a guide may use for each op (matched as word prefixes: "clicking", "types").
GUIDE_VERBS = {
    "click": ("click", "press", "tap", "select", "choose", "pick", "open", "check", "uncheck", "tick",
              "toggle", "hit", "go", "expand", "collapse", "switch", "submit", "follow", "navigate", "mark",
              "enable", "disable"),
    "type": ("type", "enter", "fill", "input", "write", "put", "provide", "add", "key", "insert", "search"),
    "select": ("select", "choose", "pick", "set", "change", "switch"),
    "hover": ("hover", "move", "point", "mouse", "rest", "place"),
    "press": ("press", "hit", "tap", "push", "type", "use"),
    "scroll": ("scroll", "swipe", "move", "go"),
    "stop": ("stop", "done", "finish", "finished", "complete", "answer", "report", "end", "submit", "say",
             "reply", "tell"),
    # the tab actions (a suite with several tabs): a verb is enough, as for stop
    "new_tab": ("open", "new", "start"),
    "tab_focus": ("switch", "go", "focus", "open", "return", "show", "select"),
    "close_tab": ("close", "shut"),
}
GROUNDING_NAME_TOKENS = 6  # a long label counts as named when its first six words are


def label_words(s):
    """The words guide grounding matches on: lowercased alphanumeric runs ("Sign-in!" -> sign, in)."""
    return re.findall(r"[a-z0-9]+", (s or "").lower())


def contains_run(hay, needle):
    """True if the word list `needle` occurs contiguously in `hay` (an empty needle never does)."""
    n = len(needle)
    return n > 0 and any(hay[i:i + n] == needle for i in range(len(hay) - n + 1))


def guide_grounding(guide, gold_step):
    """1 if the guide names the gold target and uses a verb that fits the gold op (reference-free).

    Naming: the target's visible text/label (its first six words, case- and punctuation-
    insensitive) appears in the guide; for type/select the value also counts as naming; for
    press/scroll the key or direction must appear; stop and the tab actions need only a verb. A target with no
    text can only be named through the value.
    """
    if not guide:
        return 0
    words = label_words(guide)
    op = gold_step["action"]["op"]
    verb_ok = any(w.startswith(v) for w in words for v in GUIDE_VERBS[op])
    names = []
    if op in ELEMENT_OPS:
        el = gold_element(gold_step)
        if el and label_words(el.get("text")):
            names.append(label_words(el["text"])[:GROUNDING_NAME_TOKENS])
    if op in ("type", "select", "press", "scroll"):
        value = label_words(gold_step["action"].get("value"))
        if value:
            names.append(value[:GROUNDING_NAME_TOKENS])
    name_ok = op == "stop" or op in TAB_OPS or any(contains_run(words, n) for n in names)
    return int(verb_ok and name_ok)


# --- The template drafter: offline, deterministic, the guide a Digital Adoption Platform would show
# (docs/annotation.md, "Style"): a verb that fits the op, the target by the name a person sees, in
# **bold** ("the **Owner** list"), where it is when that helps find it (its table row, its section:
# a form's fieldset, a card, the sidebar; the screen position only when the page gives neither and its
# name is not unique), and why the step is taken (the expert's purpose). One sentence, at most
# GUIDE_WORDS words: the value typed is cut first, then the where, then a long name. Consecutive steps vary
# the sentence. Shared: annotate.py's `draft --drafter template` and evaluate.py's expert write these.

ROLE_NOUN = {
    "button": "button", "link": "link", "textbox": "field", "searchbox": "search box", "checkbox": "checkbox",
    "radio": "option", "combobox": "list", "tab": "tab", "menuitem": "menu entry", "option": "option",
    "treeitem": "item", "slider": "slider", "spinbutton": "field", "switch": "switch", "gridcell": "cell"
}
TAG_NOUN = {"li": "item", "img": "image", "input": "field", "textarea": "text box", "select": "list",
            "button": "button"}
NAME_WORDS = 10  # longer labels are cut to their first words (guide_grounding needs the first six)
GUIDE_WORDS = 25  # a DAP tooltip is read at a glance: one sentence of at most this many words
VALUE_WORDS = 6  # a long text to type is quoted by its first words ("Thanks for the report ...")
WHERE_WORDS = 6  # a section or row longer than this does not help anyone find the target
LANDMARKS = {"sidebar": "in the sidebar", "header": "in the page header", "navigation": "in the navigation",
             "footer": "at the foot of the page", "search": "in the search area", "dialog": "in the dialog"}


def stable_hash(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def position(el, viewport):
    """'at the top left', 'in the middle', ... from the box centre's third of the screen."""
    x, y = box_center(el["bbox"])
    row = ("top", "middle", "bottom")[min(2, int(3 * y / viewport[1]))]
    col = ("left", "", "right")[min(2, int(3 * x / viewport[0]))]
    if row == "middle":
        return "in the middle" + (f" on the {col}" if col else "")
    return f"at the {row}" + (f" {col}" if col else "")


def noun(el):
    return ROLE_NOUN.get(el.get("role")) or TAG_NOUN.get(el.get("tag"), "")


def short(text, n):
    words = (text or "").split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def label_of(el, words=NAME_WORDS):
    """The target's name as a guide shows it: its first words, a form label's colon and required mark
    ("Username*") dropped."""
    return short((el.get("text") or "").strip().rstrip(":* "), words)


def where_phrase(el, elements, viewport, here=None):
    """'on the "Blue mug" row', 'in the "Shipping" section', 'in the sidebar', or the screen position
    when the page names no place and the target's name alone does not single it out; '' if not needed.
    `here`: the section of the step before's target -- a person already there is not told again, unless
    the name is not unique."""
    row, section = [(el.get(key) or "").replace('"', "'") or None for key in ("row", "section")]
    own = label_words(el.get("text"))
    twins = [e for e in elements if e is not el and label_words(e.get("text")) == own]
    if row and len(row.split()) <= WHERE_WORDS and label_words(row) != own:
        return f'on the "{row}" row'
    if section and (el.get("section") != here or twins or not own):
        if section in LANDMARKS:
            return LANDMARKS[section]
        if section != "main" and len(section.split()) <= WHERE_WORDS:
            return f'in the "{section.rstrip(":* ")}" section'   # a form's required mark dropped
    return position(el, viewport) if twins or not label_of(el) else ""


def section_before(ep, k):
    """The section of the last target before step k (scrolls skipped): where the person is."""
    for step in reversed(ep["steps"][:k]):
        if step["action"]["op"] != "scroll":
            el = gold_element(step)
            return el.get("section") if el else None
    return None


def name_phrase(el, words=NAME_WORDS):
    """"the **Save** button", "**Quinn Tanaka**" (a link's own words), or "the field" for an unnamed one."""
    label, kind = label_of(el, words), noun(el)
    if not label:
        return f"the {kind or 'element'}"
    return f"the **{label}** {kind}" if kind and kind not in ("link", "item", "cell") else f"**{label}**"


def step_purpose(ep, k):
    """Why step k is taken: the expert's purpose; a scroll's is to bring the next target into view."""
    step = ep["steps"][k]
    if step.get("purpose") or step["action"]["op"] != "scroll":
        return step.get("purpose") or ""
    for later in ep["steps"][k + 1:]:
        if later["action"]["op"] != "scroll":
            el = gold_element(later)
            return f"to bring {name_phrase(el)} into view" if el and label_of(el) else ""
    return ""


# Each op has several sentence shapes; consecutive steps never reuse the shape of the step before.
# {n}: the target's name phrase, {w}: where it is, {v}: the value, {y}: why.
TEMPLATES = {
    "click": ["Click {n}{w}{y}.", "Press {n}{w}{y}.", "Click on {n}{w}{y}."],
    "click:item": ["Select {n}{w}{y}.", "Choose {n}{w}{y}.", "Click {n}{w}{y}."],
    "click:link": ["Click {n}{w}{y}.", "Open {n}{w}{y}.", "Follow {n}{w}{y}."],
    "click:checkbox": ["Tick {n}{w}{y}.", "Check {n}{w}{y}.", "Click {n}{w}{y}."],
    "click:checked": ["Uncheck {n}{w}{y}.", "Switch off {n}{w}{y}.", "Toggle off {n}{w}{y}."],
    "click:tab": ["Switch to {n}{w}{y}.", "Open {n}{w}{y}.", "Click {n}{w}{y}."],
    "click:textbox": ["Click {n}{w}{y}.", "Click into {n}{w}{y}."],
    "type": ['Type "{v}" into {n}{w}{y}.', 'Enter "{v}" in {n}{w}{y}.', 'Fill in {n}{w} with "{v}"{y}.'],
    "select": ['Choose "{v}" from {n}{w}{y}.', 'Select "{v}" in {n}{w}{y}.', 'Pick "{v}" from {n}{w}{y}.'],
    "hover": ["Hover over {n}{w}{y}.", "Move the mouse over {n}{w}{y}.", "Point at {n}{w}{y}."],
    "press": ["Press **{v}**{y}.", "Hit **{v}** on the keyboard{y}.", "Press the **{v}** key{y}."],
    "scroll": ["Scroll {v}{y}.", "Scroll {v} the page{y}."],
    "stop": ["You are done: the task is complete.", "That finishes the task.",
             "Stop here: everything is done."],
}


def template_kind(step):
    op, el = step["action"]["op"], gold_element(step)
    if op == "click" and el:
        role = el.get("role")
        if role in ("checkbox", "switch") and el.get("value") == "checked":
            return "click:checked"
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
    el = gold_element(step)
    kind = template_kind(step)
    shapes = TEMPLATES[kind]
    i = (stable_hash(ep["id"]) + k) % len(shapes)
    if previous == (kind, i):
        i = (i + 1) % len(shapes)
    if op == "stop":
        text = f'You are done: answer "{value}".' if value else shapes[i]
        return text, (kind, i)
    why = step_purpose(ep, k)
    parts = {"n": name_phrase(el) if el else "the page", "v": value,
             "w": where_phrase(el, step["elements"], ep["viewport"], section_before(ep, k)) if el else "",
             "y": why}
    def render():
        return shapes[i].format(**{key: (" " + v if key in "wy" and v else v) for key, v in parts.items()})
    text = render()
    # over the limit: the value typed is cut to its first words, then the where goes, then a long name is
    # cut to the words guide grounding reads
    shorter = {"v": short(value, VALUE_WORDS), "w": "",
               "n": name_phrase(el, GROUNDING_NAME_TOKENS) if el else parts["n"]}
    for cut in ("v", "w", "n"):
        if len(text.split()) <= GUIDE_WORDS:
            break
        parts[cut] = shorter[cut]
        text = render()
    return text[0].upper() + text[1:], (kind, i)


def template_guides(ep):
    """The template draft of every step of `ep` (annotate.py draft; evaluate.py's expert writes the same
    sentences live, tests/test_evaluate.py holds them equal)."""
    guides, previous = [], None
    for k in range(len(ep["steps"])):
        guide, previous = template_guide(ep, k, previous)
        guides.append(guide)
    return guides


# --- BLEU / chrF / ROUGE-L: pure Python, equal to sacrebleu 2.x's sentence_bleu / sentence_chrf defaults
# and rouge-score's rougeL F (default tokenizer, no stemming); parity is tested on 400+ pairs.

# mteval-v13a splits off every ASCII punctuation mark except ' , - .
# (the apostrophe is never split; the other three depend on their neighbours).
_V13A_PUNCT = re.compile(r'([!"#$%&()*+/:;<=>?@\[\\\]^_`{|}~])')
# These rules *consume* the neighbouring character, so a character that was
# already used as context cannot start the next match: in "a.,5" the comma
# stays glued to the 5.  A look-around rewrite would split it, so the
# consuming form is kept to stay faithful to mteval-v13a.
_V13A_CONTEXT_RULES = [
    (re.compile(r'([^0-9])([.,])'), r'\1 \2 '),  # "." or "," not after a digit
    (re.compile(r'([.,])([^0-9])'), r' \1 \2'),  # "." or "," not before a digit
    (re.compile(r'([0-9])(-)'), r'\1 \2 '),  # "-" after a digit (ranges, minus)
]
# Entity order matters: "&amp;lt;" ends up as "<", but "&amp;quot;" as "&quot;".
_V13A_ENTITIES = [('&quot;', '"'), ('&amp;', '&'), ('&lt;', '<'), ('&gt;', '>')]

_ROUGE_TOKEN = re.compile(r'[a-z0-9]+')


def _tokenize_13a(text):
    """Split text into tokens as mteval-v13a (sacrebleu's default) does."""
    # sacrebleu strips trailing whitespace first, so a final "-\n" is kept as "-".
    line = text.rstrip()
    line = line.replace('<skipped>', '').replace('-\n', '').replace('\n', ' ')
    for entity, char in _V13A_ENTITIES:
        line = line.replace(entity, char)
    # The padding gives edge characters a neighbour, so ".5" -> ". 5" and "5." -> "5 .".
    line = _V13A_PUNCT.sub(r' \1 ', f' {line} ')
    for pattern, replacement in _V13A_CONTEXT_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


def _ngrams(seq, n):
    """Multiset of the length-n windows of a token list or a string."""
    return Counter(tuple(seq[i:i + n]) for i in range(len(seq) - n + 1))


def _matches(hyp, ref, n):
    """Number of hypothesis n-grams found in the reference, each clipped to its reference count."""
    return sum((_ngrams(hyp, n) & _ngrams(ref, n)).values())


def _lcs_length(a, b):
    """Length of the longest common subsequence, keeping only one DP row."""
    prev = [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def sentence_bleu(hyp: str, ref: str) -> float:
    """BLEU on 0..100: 100 * BP * geometric mean of clipped n-gram precisions p_1..p_N.

    Both strings are rstripped and split with the mteval-v13a tokenizer (case kept).
    N = min(4, hyp tokens); an order with 0 matches gets p = 1 / (2**k * total) for the
    k-th such order; BP = exp(1 - ref_len/hyp_len) if hyp_len < ref_len, else 1.
    Returns 0.0 when no unigram matches, e.g. when either string is empty.
    """
    h, r = _tokenize_13a(hyp), _tokenize_13a(ref)
    if not h or _matches(h, r, 1) == 0:
        return 0.0
    precisions, zero_orders = [], 0
    for n in range(1, min(4, len(h)) + 1):
        total, matched = len(h) - n + 1, _matches(h, r, n)
        if matched == 0:
            zero_orders += 1
            precisions.append(100.0 / (2 ** zero_orders * total))
        else:
            precisions.append(100.0 * matched / total)
    bp = math.exp(1 - len(r) / len(h)) if len(h) < len(r) else 1.0
    return bp * math.exp(sum(math.log(p) for p in precisions) / len(precisions))


def chrf(hyp: str, ref: str) -> float:
    """chrF2 on 0..100: F_beta (beta=2) of char n-gram precision and recall, each averaged
    over orders n = 1..N, with N = min(6, len(hyp), len(ref)) after removing all whitespace
    (case kept, no word n-grams). Orders that one side is too short for are skipped rather
    than smoothed. Returns 0.0 if either string has no non-whitespace characters or nothing matches.
    """
    h, r = ''.join(hyp.split()), ''.join(ref.split())
    orders = min(6, len(h), len(r))
    if orders == 0:
        return 0.0
    precision = recall = 0.0
    for n in range(1, orders + 1):
        matched = _matches(h, r, n)
        precision += matched / (len(h) - n + 1)
        recall += matched / (len(r) - n + 1)
    precision, recall = precision / orders, recall / orders
    if precision + recall == 0:
        return 0.0
    beta2 = 2 ** 2
    return 100 * ((1 + beta2) * precision * recall / (beta2 * precision + recall))


def rouge_l(hyp: str, ref: str) -> float:
    """ROUGE-L F1 in 0..1: harmonic mean of LCS/len(hyp) and LCS/len(ref), where LCS is the
    longest common token subsequence. Tokens are the [a-z0-9]+ runs of the lowercased text
    (everything else separates tokens and is dropped; no stemming).
    Returns 0.0 if either side has no tokens (empty, punctuation-only, non-Latin script).
    """
    h, r = _ROUGE_TOKEN.findall(hyp.lower()), _ROUGE_TOKEN.findall(ref.lower())
    if not h or not r:
        return 0.0
    lcs = _lcs_length(h, r)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(h), lcs / len(r)
    return 2 * precision * recall / (precision + recall)

# ----------------------------------------------------------------------------------------------
# 4. A reply's scores against the gold step, their aggregation over a run and its intervals.

def score_action(pred_text, gold_step, grounding, order, viewport):
    """The action half of score_step: -> ({valid, format, element, op_f1, step}, the parsed guide, the
    parsed action). train_grpo.py's reward is made of its format, element and op_f1; its step success drops
    groups and calls in the expert there, and is not rewarded itself."""
    tabs = "tabs" in gold_step   # a step of a suite with several tabs: their actions are in its grammar
    guide, action = parse_output(pred_text, grounding, order, viewport, tabs)
    el = element_correct(action, gold_step, grounding)
    f1 = op_f1(action, gold_step["action"])
    well_formed = check_format(pred_text, grounding, order, viewport, tabs)
    scores = {"valid": int(action is not None), "format": int(well_formed), "element": el, "op_f1": f1,
              "step": int(el == 1 and f1 == 1.0)}
    return scores, guide, action


def score_step(pred_text, gold_step, grounding, order, viewport):
    """All per-step scores of one reply against the gold step. Never raises on bad model output.

    Guide scores are None where they do not apply (action_only, or no gold guide for the
    reference-based ones); aggregate() skips None.
    """
    scores, guide, _ = score_action(pred_text, gold_step, grounding, order, viewport)
    step_ok = scores["step"]
    out = scores | {"guide_bleu": None, "guide_rouge_l": None, "guide_chrf": None, "guide_grounding": None,
                    "joint": None}
    if order != "action_only":
        gg = guide_grounding(guide, gold_step)
        out["guide_grounding"] = gg
        out["joint"] = int(step_ok and gg)
        ref = gold_step.get("guide")
        if ref and gold_step.get("guide_status") != "rejected":
            hyp = guide or ""
            out["guide_bleu"] = sentence_bleu(hyp, ref)
            out["guide_rouge_l"] = rouge_l(hyp, ref)
            out["guide_chrf"] = chrf(hyp, ref)
    return out


def estimate(by_task):
    """(micro, macro) of a ratio from {task: [(numerator, denominator) per item]}: micro = the sums' ratio
    over every item, macro = the mean of the per-task ratios; None where nothing is counted. A mean is the
    ratio with denominators of 1."""
    num = sum(n for v in by_task.values() for n, _ in v)
    den = sum(d for v in by_task.values() for _, d in v)
    rates = [sum(n for n, _ in v) / sum(d for _, d in v) for v in by_task.values() if sum(d for _, d in v)]
    return (num / den if den else None), (sum(rates) / len(rates) if rates else None)


def bootstrap(by_task, n_boot=1000, seed=0, alpha=0.05):
    """estimate() and its percentile intervals: the items (episodes) resampled with replacement within each
    task, as paired_bootstrap resamples. -> {"micro", "micro_ci", "macro", "macro_ci"}"""
    micro, macro = estimate(by_task)
    rng = random.Random(seed)
    boots = [estimate({t: [v[rng.randrange(len(v))] for _ in v] for t, v in by_task.items()})
             for _ in range(n_boot)]
    out = {"micro": micro, "macro": macro}
    for i, name in enumerate(("micro", "macro")):
        xs = sorted(b[i] for b in boots if b[i] is not None)
        lo = math.floor(alpha / 2 * (len(xs) - 1))
        hi = math.ceil((1 - alpha / 2) * (len(xs) - 1))
        out[name + "_ci"] = [xs[lo], xs[hi]] if xs else None
    return out


def aggregate(rows, groups):
    """{metric: {"micro", "macro", "n"}}: micro = mean over rows, macro = mean of per-group means (estimate).

    `rows` are score dicts, `groups` the task of each row; None values are skipped.
    """
    out = {}
    for key in sorted({k for r in rows for k in r}):
        by = {}
        for r, g in zip(rows, groups):
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool):
                by.setdefault(g, []).append((r[key], 1))
        if by:
            micro, macro = estimate(by)
            out[key] = {"micro": micro, "macro": macro, "n": sum(len(v) for v in by.values())}
    return out


def paired_bootstrap(a, b, n_boot=1000, seed=0, alpha=0.05):
    """Paired bootstrap of mean(a) - mean(b) over the same items (steps or tasks).

    Returns {"diff", "lo", "hi", "p"}: the observed difference, its (1-alpha) percentile
    interval, and the share of resamples with a difference <= 0 (a one-sided p for a > b).
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_bootstrap needs two equal, non-empty lists (got {len(a)} and {len(b)})")
    rng = random.Random(seed)
    n = len(a)
    d = [x - y for x, y in zip(a, b)]
    stats = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    lo = stats[int(math.floor(alpha / 2 * (n_boot - 1)))]
    hi = stats[int(math.ceil((1 - alpha / 2) * (n_boot - 1)))]
    return {"diff": sum(d) / n, "lo": lo, "hi": hi, "p": sum(s <= 0 for s in stats) / n_boot}


# ----------------------------------------------------------------------------------------------
# 5. Observation: the JavaScript that finds the elements a Set-of-Mark box goes on. It lives in
# assets/init.js and assets/observe.js as plain JavaScript; the knobs below go in as $NAMES.
# INIT_JS runs before any page script (Playwright add_init_script). It records which elements
# got click-like listeners -- MiniWoB++ widgets are spans and divs with jQuery handlers, which
# no tag or role rule can see -- and keeps what the settle loop needs: the time of the last DOM
# mutation and the set of pending short timers (jQuery-UI autocomplete opens its menu from a
# 300 ms timer, with no DOM change before it fires).

SETTLE_TIMER_MS = 1000  # timers longer than this (episode clocks, polling) are not waited for

MIN_SIDE_PX = 3      # CSS px: thinner boxes are separators, not targets
MIN_AREA_PX = 16     # CSS px^2
CONTAINER_COVER = 0.5  # a marked element whose marked descendants cover this much of it is a container

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")  # the stages' pages and scripts


@functools.lru_cache(maxsize=None)
def read_asset(name):
    """The text of assets/<name>: a page, style sheet or script that a stage serves or injects (read once
    per process: the expert's find_mark.js runs at every step, the report template once per episode)."""
    with open(os.path.join(ASSETS, name), encoding="utf-8") as f:
        return f.read()


OBSERVATION_JS = {"INIT_JS": ("init.js", {"SETTLE_TIMER_MS": SETTLE_TIMER_MS}),
                  "OBSERVE_JS": ("observe.js", {"MIN_SIDE_PX": MIN_SIDE_PX, "MIN_AREA_PX": MIN_AREA_PX,
                                                "CONTAINER_COVER": CONTAINER_COVER})}


def __getattr__(name):
    """metrics.INIT_JS and metrics.OBSERVE_JS, read from assets/ on first use: train_grpo.py and
    metrics.py copied without assets/ still import, since only a live browser needs the snippets."""
    if name not in OBSERVATION_JS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    file, knobs = OBSERVATION_JS[name]
    # substitute() raises on a $NAME left without a value, so a renamed knob cannot reach a page unfilled
    js = globals()[name] = string.Template(read_asset(file)).substitute(
        {k: json.dumps(v)
         for k, v in knobs.items()})
    return js


def box_center(bbox):
    """The click point of a box: its centre, in the box's own pixels."""
    return [(bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2]


# Set-of-Mark drawing. Colours are dark enough for white digits; a label goes to the first of a
# few spots around its box that is on-screen and clear of earlier labels (least overlap if none is).
SOM_COLORS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#008080",
              "#9a6324", "#800000", "#808000", "#000075", "#f032e6", "#469990"]


def _label_spot(box, w, h, W, H, taken):
    x0, y0, x1, y1 = box
    spots = [(x0, y0 - h), (x0, y0), (x0, y1), (x1 - w, y0 - h), (x1 - w, y0), (x1 - w, y1 - h), (x1, y0),
             (x0 - w, y0)]
    best, best_cost = None, None
    for sx, sy in spots:
        sx, sy = min(max(0, sx), W - w), min(max(0, sy), H - h)
        r = (sx, sy, sx + w, sy + h)
        cost = sum(max(0, min(r[2], t[2]) - max(r[0], t[0])) * max(0, min(r[3], t[3]) - max(r[1], t[1]))
                   for t in taken)   # the area it overlaps earlier labels
        if cost == 0:
            return r
        if best_cost is None or cost < best_cost:
            best, best_cost = r, cost
    return best


def draw_som(image, elements):
    """Draw a box and a numbered label for every element; deterministic (same input -> same pixels).

    `image` is a PIL image or a path; the result is a new RGB image, the input is untouched.
    """
    from PIL import Image, ImageDraw, ImageFont
    img = (Image.open(image) if isinstance(image, (str, os.PathLike)) else image).convert("RGB")
    W, H = img.size
    line = max(1, round(min(W, H) / 300))
    size = max(10, round(min(W, H) / 40))
    try:
        font = ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        font = ImageFont.load_default()
    draw = ImageDraw.Draw(img)
    taken = []
    for el in elements:
        color = SOM_COLORS[(el["mark"] - 1) % len(SOM_COLORS)]
        x0, y0, x1, y1 = el["bbox"]
        draw.rectangle([x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)], outline=color, width=line)
        text = str(el["mark"])
        l, t, r, b = font.getbbox(text)
        w, h = r - l + 2 * line + 2, b - t + 2 * line
        spot = _label_spot((x0, y0, x1, y1), w, h, W, H, taken)
        taken.append(spot)
        draw.rectangle(spot, fill=color)
        draw.text((spot[0] + line + 1 - l, spot[1] + line - t), text, fill="white", font=font)
    return img


# ----------------------------------------------------------------------------------------------
# 6. Dataset: <dir>/episodes.jsonl (one episode per line) + <dir>/img/<episode>/<step>.png

class DatasetError(ValueError):
    """A dataset that cannot be read; the message names the file, line, episode, step and field."""


def fail(msg):
    """End a command-line run on a bad input: one line on stderr and exit code 2 (argparse's code for
    bad usage), never a traceback. Every stage turns a DatasetError into this."""
    print(msg, file=sys.stderr)
    raise SystemExit(2)


def _check(cond, where, msg):
    if not cond:
        raise DatasetError(f"{where}: {msg}")


MAX_COORD = 1e6  # pixels; a larger |coordinate| is corruption, not a screen (1e308 overflows a box's area)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _numbers(v, n):
    """`v` is a list of n finite numbers of sane size (JSON lets NaN, Infinity and 1e308 through)."""
    return isinstance(v, list) and len(v) == n and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= MAX_COORD
        for x in v)


def _check_text(obj, field, where):
    """Every string (and key) in `obj` is encodable: a lone surrogate (JSON's "\\ud800") passes json.loads
    but breaks every later write, tokenizer and web page."""
    if field == "":   # the whole object: one fast C pass, the walk only to name a bad string
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
            return
        except UnicodeEncodeError:
            pass
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            raise DatasetError(f"{where}: {field}: a lone surrogate in {obj!r:.80}") from None
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_text(k, f"{field} (a key)", where)
            _check_text(v, f"{field}.{k}" if field else k, where)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_text(v, f"{field}[{i}]", where)


def _check_screenshot_path(shot, where):
    """A screenshot path stays inside the dataset folder: relative, no `..`, no NUL byte."""
    _check(isinstance(shot, str) and shot.strip(), where, f"screenshot: not a path ({shot!r:.80})")
    _check("\0" not in shot, where, f"screenshot: a NUL byte in the path ({shot!r:.80})")
    parts = re.split(r"[\\/]", shot)
    _check(not os.path.isabs(shot) and not shot.startswith(("/", "\\")) and not re.match(r"^[A-Za-z]:", shot),
           where, f"screenshot: an absolute path ({shot!r:.80}); paths are relative to the dataset folder")
    _check(".." not in parts, where, f"screenshot: `..` leaves the dataset folder ({shot!r:.80})")


def _check_step(step, k, where):
    w = f"{where} step {k}"
    _check(isinstance(step, dict), w, "a step must be a JSON object")
    _check(_is_int(step.get("step")) and step["step"] == k, w,
           f"step: steps are numbered 0..n-1, got {step.get('step')!r:.80}")
    _check_screenshot_path(step.get("screenshot"), w)
    els = step.get("elements")
    _check(isinstance(els, list), w, f"elements: not a list ({els!r:.80})")
    marks = set()
    for j, el in enumerate(els):
        f = f"elements[{j}]"
        _check(isinstance(el, dict), w, f"{f}: not a JSON object ({type(el).__name__})")
        m = el.get("mark")
        _check(_is_int(m) and m >= 1, w, f"{f}.mark: not a positive integer ({m!r:.80})")
        _check(m not in marks, w, f"{f}.mark: mark {m} appears twice in this step")
        marks.add(m)
        b = el.get("bbox")
        _check(_numbers(b, 4), w, f"{f}.bbox: not 4 finite numbers of at most {MAX_COORD:g} ({b!r:.80})")
        _check(b[0] <= b[2] and b[1] <= b[3], w,
               f"{f}.bbox: not [x0, y0, x1, y1] with x0 <= x1, y0 <= y1 ({b})")
        for key in ("tag", "role", "text", "value", "section", "row"):
            v = el.get(key)
            _check(v is None or isinstance(v, str), w, f"{f}.{key}: not a string ({v!r:.80})")
    _check_action(step.get("action"), marks, step.get("exec_error"), w, "tabs" in step)
    if "tabs" in step:   # the open tabs ({"title", "url"} each) and the focused one's index, "tab"
        tabs = step["tabs"]
        _check(isinstance(tabs, list) and tabs and all(isinstance(t, dict) and isinstance(t.get("title"), str)
                                                       and isinstance(t.get("url"), str) for t in tabs), w,
               f"tabs: not a non-empty list of {{title, url}} ({tabs!r:.80})")
        _check(_is_int(step.get("tab")) and 0 <= step["tab"] < len(tabs), w,
               f"tab: not the index of an open tab ({step.get('tab')!r:.80})")
    for key in ("guide", "exec_error", "purpose"):
        v = step.get(key)
        _check(v is None or isinstance(v, str), w, f"{key}: not a string or null ({v!r:.80})")
    _check(step.get("guide_status") in GUIDE_STATUSES, w, f"guide_status: not one of {GUIDE_STATUSES} "
           f"({step.get('guide_status')!r:.80})")
    alt = step.get("guide_alt")
    strings = isinstance(alt, dict) and all(v is None or isinstance(v, str) for v in alt.values())
    _check(alt is None or strings, w, f"guide_alt: not an object of strings or null ({alt!r:.80})")
    _check_text(step, "", w)


def _check_action(a, marks, exec_error, w, tabs=False):
    ops = OPS + TAB_OPS if tabs else OPS
    _check(isinstance(a, dict), w, f"action: not a JSON object ({a!r:.80})")
    _check(a.get("op") in ops, w, f"action.op: not one of {', '.join(ops)} ({a.get('op')!r:.80})")
    m = a.get("mark")
    _check(m is None or _is_int(m) and m >= 1, w, f"action.mark: not a positive integer or null ({m!r:.80})")
    # a policy's action on a mark that is not on screen is recorded with its exec_error (evaluate.py):
    # that step says what the policy did; any other step's mark must name one of its elements
    _check(m is None or m in marks or exec_error, w, f"action.mark: {m} is not among this step's elements "
           f"({sorted(marks)})")
    p = a.get("point")
    _check(p is None or _numbers(p, 2), w, f"action.point: not 2 finite numbers or null ({p!r:.80})")
    v = a.get("value")
    _check(v is None or isinstance(v, str), w, f"action.value: not a string or null ({v!r:.80})")


def validate_episode(ep, where):
    """Raise DatasetError if `ep` does not follow docs/data.md: types, ranges, marks, strings and
    screenshot paths. The message reads `<where>: episode '<id>' step <k>: <field>: <what is wrong>`."""
    _check(isinstance(ep, dict), where, "an episode must be a JSON object")
    _check(isinstance(ep.get("id"), str) and ep["id"], where, "id: not a non-empty string "
                                                              f"({ep.get('id')!r:.80})")
    where = f"{where}: episode {ep['id']!r}"
    for key, typ in (("suite", str), ("task", str), ("instruction", str), ("start_url", str),
                     ("viewport", list), ("steps", list), ("success", bool)):
        _check(isinstance(ep.get(key), typ), where, f"{key}: not a {typ.__name__} ({ep.get(key)!r:.80})")
    _check(len(ep["viewport"]) == 2 and all(_is_int(v) and 0 < v <= MAX_COORD for v in ep["viewport"]),
           where, f"viewport: not [w, h] in pixels ({ep['viewport']!r:.80})")
    r = ep.get("reward")
    _check(r is None or _numbers([r], 1), where, f"reward: not a finite number ({r!r:.80})")
    # meta may be left out (a dataset another tool wrote); present, it is an object the stages read keys of
    _check(isinstance(ep.get("meta", {}), dict), where, f"meta: not a JSON object ({ep.get('meta')!r:.80})")
    _check_text({k: v for k, v in ep.items() if k != "steps"}, "", where)
    for k, step in enumerate(ep["steps"]):
        _check_step(step, k, where)


def _check_image(root, shot, viewport, where, whole=True):
    """The screenshot is a file inside the dataset folder (symlinks included) whose PNG header gives the
    episode's viewport as its size (collect.py records it so) and, with `whole`, all of it a sound PNG;
    without (a stage that opens no image), only a PNG that is there is read, and only its header."""
    path = os.path.join(root, shot)
    real, top = os.path.realpath(path), os.path.realpath(root)
    if not whole and not (os.path.commonpath([real, top]) == top and os.path.isfile(path)):
        return
    _check(os.path.commonpath([real, top]) == top, where, f"screenshot: {shot!r} leads outside the "
                                                          f"dataset ({real})")
    _check(os.path.exists(path), where, f"screenshot: image {path} is missing")
    _check(os.path.isfile(path), where, f"screenshot: {path} is not a file")
    with open(path, "rb") as f:
        head = f.read(24)   # the signature, then the IHDR chunk's length, type, width and height
    _check(head[:8] == PNG_MAGIC or not whole, where, f"screenshot: {path} is not a PNG "
                                                      "(its first bytes are not PNG's)")
    if head[:8] == PNG_MAGIC and head[12:16] == b"IHDR" and len(head) == 24:
        size = list(struct.unpack(">II", head[16:]))
        _check(size == viewport, where, f"screenshot: {path} is {size[0]}x{size[1]} pixels, but the "
               f"episode's viewport is {viewport} (every coordinate is in its pixels)")
    if not whole:
        return
    from PIL import Image
    try:
        with Image.open(path) as img:
            _check(img.format == "PNG" and img.width > 0 and img.height > 0, where,
                   f"screenshot: {path}: not a PNG")
            img.verify()   # every chunk to the end, each against its CRC: a cut or damaged file fails here
    except (OSError, ValueError, SyntaxError, EOFError) as e:   # PIL's errors for a damaged file
        raise DatasetError(
            f"{where}: screenshot: {path}: PIL cannot read it ({type(e).__name__}: {e})") from None


def load_dataset(path, check_images=False, empty_ok=True):
    """Read <path>/episodes.jsonl (or a .jsonl file) into a list of episodes, validating each line
    (validate_episode; ids unique; with check_images, every screenshot a PNG inside the folder of the
    viewport's size, "size": only the size of those there). empty_ok=False: a stage's input has episodes.

    Each episode gets a private key "_root" (the dataset folder) so image paths resolve; keys
    starting with "_" are never written back. A torn last line (a write cut by a crash) or any
    bad line raises DatasetError naming the file and line; `repair_dataset` fixes a torn tail.
    """
    file = path if str(path).endswith(".jsonl") else os.path.join(path, "episodes.jsonl")
    root = os.path.dirname(os.path.abspath(file))
    if not os.path.isfile(file):
        raise DatasetError(f"{file}: no such dataset file")
    episodes, seen = [], {}
    with open(file, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{file}:{i}"
        try:
            ep = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            torn = i == len(lines) and not raw.endswith(b"\n")
            hint = (" (the last line is cut short: an interrupted write; `collect.py --resume` repairs it)"
                    if torn else "")
            raise DatasetError(f"{where}: not valid JSON{hint}: {e}") from None
        validate_episode(ep, where)
        _check(ep["id"] not in seen, where,
               f"episode {ep['id']!r}: id: already used on line {seen.get(ep['id'])}")
        seen[ep["id"]] = i
        for step in ep["steps"] if check_images else ():
            _check_image(root, step["screenshot"], ep["viewport"], f"{where}: episode {ep['id']!r} step "
                         f"{step['step']}", whole=check_images != "size")
        ep["_root"] = root
        episodes.append(ep)
    _check(episodes or empty_ok, file, "no episodes in it (an empty dataset)")
    return episodes


def load_dataset_or_exit(path, check_images=False):
    """load_dataset for a stage's command line: a broken or empty dataset ends the run with its one line."""
    try:
        return load_dataset(path, check_images, empty_ok=False)
    except DatasetError as e:
        fail(e)


def repair_dataset(path):
    """Move a torn last line of episodes.jsonl (or of any append-only .jsonl log) aside, to
    <file>.torn, so appends can go on.

    Returns a message saying what was done, or None if the file was fine. Nothing is deleted:
    the torn bytes are kept for inspection. A bad line elsewhere is not guessed at: load_dataset
    reports it and a person decides.
    """
    file = path if str(path).endswith(".jsonl") else os.path.join(path, "episodes.jsonl")
    if not os.path.exists(file):
        return None
    with open(file, "rb") as f:
        raw = f.read()
    if not raw or raw.endswith(b"\n"):
        return None
    cut = raw.rfind(b"\n") + 1
    tail = raw[cut:]
    try:
        json.loads(tail)   # a complete record that only lacks its newline: keep it
        with open(file, "ab") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
        return f"{file}: added the missing newline after the last record"
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    with open(file + ".torn", "ab") as f:
        f.write(tail + b"\n")
    with open(file, "r+b") as f:
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    line_no = raw[:cut].count(b"\n") + 1
    return f"{file}:{line_no}: torn last line ({len(tail)} bytes) moved to {file}.torn"


API_FAILED = "api_failed.jsonl"   # episodes an API endpoint failed (the run's error): kept beside, redone


def append_episode(path, episode, name="episodes.jsonl"):
    """Append one episode as one line, flushed and fsynced, so a crash never loses a finished episode.

    The episode is validated first: a bug upstream fails here, loudly, not in a later stage.
    """
    validate_episode(episode, f"{os.path.join(path, name)} (not written)")
    os.makedirs(path, exist_ok=True)
    clean = {k: v for k, v in episode.items() if not k.startswith("_")}
    append_jsonl(os.path.join(path, name), clean, separators=(",", ":"))


def append_jsonl(file, record, separators=None):
    """One record as one line of an append-only log, flushed and fsynced before returning."""
    with open(file, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False, separators=separators) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_dataset(path, episodes):
    """Rewrite a whole dataset atomically (temp file + rename): used by stages that edit steps."""
    os.makedirs(path, exist_ok=True)
    file = os.path.join(path, "episodes.jsonl")
    tmp = file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for ep in episodes:
            clean = {k: v for k, v in ep.items() if not k.startswith("_")}
            f.write(json.dumps(clean, ensure_ascii=False, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, file)


def iter_steps(episodes):
    """Yield (episode, step_index) for every step of every episode, in file order."""
    for ep in episodes:
        for k in range(len(ep["steps"])):
            yield ep, k


def episode_id(suite, task, seed):
    """Deterministic id from (suite, task, seed): the same episode always lands in the same place."""
    return f"{suite}.{task}.{seed}"


# Past one machine: a collection or evaluation job list is split with --shard K/N (any scheduler runs
# the N parts: a Slurm job array, a Kubernetes indexed Job), and `python metrics.py merge` joins the folders.

def shard_spec(text):
    """argparse type for --shard: 'K/N' (1 <= K <= N) -> (K, N)."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected K/N with 1 <= K <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def shard(jobs, spec):
    """Shard K of N of a deterministic job list: every N-th job from the K-th, so each shard gets a
    share of every task. The N shards are disjoint and together are the whole list."""
    if spec is None:
        return list(jobs)
    k, n = spec
    return [job for i, job in enumerate(jobs) if i % n == k - 1]


MERGED_LOGS = ("drafts.jsonl", "review.jsonl")   # annotation logs: merge the datasets first, then annotate
PER_MACHINE = ("shard", "workers")               # run.json keys that may differ between the shards of one run


def _same_episode(a, b):
    strip = lambda ep: {k: v for k, v in ep.items() if k != "meta" and not k.startswith("_")}  # noqa: E731
    return strip(a) == strip(b)


def _shards_of_one_run(runs, sources):
    """Evaluation runs to merge ({folder: run.json without its per-machine keys}) must all be runs, with
    the same settings -> (folder, settings) of the first, or None for plain datasets."""
    if runs and len(runs) != len(sources):
        plain = [s for s in sources if s not in runs]
        raise DatasetError(
            f"merge: {plain[0]} is a dataset but {next(iter(runs))} is an evaluation run (run.json)")
    first = next(iter(runs.items()), None)
    for src, config in runs.items():
        diff = [k for k in sorted(set(config) | set(first[1])) if config.get(k) != first[1].get(k)]
        if diff:
            raise DatasetError(f"merge: {src} and {first[0]} are not shards of one run: they differ in "
                               + ", ".join(f"{k} ({first[1].get(k)!r} vs {config.get(k)!r})" for k in diff))
    return first


def _merge_source(src):
    """A merge's source folder, validated whole -> its episodes; refused with annotation logs (merge, then
    annotate) or with episodes an endpoint failed that no rerun redid (evaluate.py set them aside)."""
    built = os.path.exists(os.path.join(src, "benchmark.json"))   # a benchmark's build: its guides are final
    if (logs := [name for name in MERGED_LOGS if os.path.exists(os.path.join(src, name))]) and not built:
        raise DatasetError(f"merge: {src} holds annotation logs ({', '.join(logs)}): merge the collected "
                           "datasets first, then annotate the merged one")
    episodes = load_dataset(src, check_images=True)
    set_aside = os.path.join(src, API_FAILED)
    undone = {ep["id"] for ep in load_dataset(set_aside)} if os.path.exists(set_aside) else set()
    if undone := undone - {ep["id"] for ep in episodes}:
        raise DatasetError(f"merge: {src}: {len(undone)} episodes the endpoint failed are not redone "
                           f"({API_FAILED}): run that shard's evaluation again first")
    return episodes


def _merged_benchmark(tmp, sources):
    """Shards of one benchmark split (collect.py --benchmark --shard, each with its benchmark.json) merged
    into `tmp`: the split's verdict and fingerprint, written to its benchmark.json -> the words for merge's
    line ("" for other folders). Checking never blocks the merge: a verdict that fails is reported."""
    builds = []
    for src in sources:
        try:
            with open(os.path.join(src, "benchmark.json"), encoding="utf-8") as f:
                builds.append(json.load(f))
        except FileNotFoundError:
            return ""
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DatasetError(f"merge: {src}/benchmark.json: not valid JSON ({e})") from None
    kinds = {(b.get("definition"), b.get("split")) for b in builds}
    if len(kinds) > 1:
        raise DatasetError(f"merge: {', '.join(sources)} are builds of different benchmark splits: "
                           + ", ".join(f"{d} {s}" for d, s in sorted(kinds, key=str)))
    definition, split = kinds.pop()
    if not definition:   # a build before benchmark.json named its definition
        return ""
    try:
        bench = load_benchmark(definition)
        digest, found = check_benchmark_data(bench, split, data_manifest(tmp))
    except (DatasetError, KeyError) as e:
        return f"; the split not checked ({e})"
    problems = sorted({p for b in builds for p in b.get("problems") or []})
    write_atomic(os.path.join(tmp, "benchmark.json"), json.dumps(dict(
        builds[0], shard=None, fingerprint=digest, matches=not found, differences=found, problems=problems,
        comparable=all(b.get("comparable", True) for b in builds), merged_from=list(sources),
        unsettled_steps=sum(b.get("unsettled_steps") or 0 for b in builds)), indent=1))
    name = f"{bench['benchmark']} {split}"
    note = "" if not problems else " -- NOT comparable: " + "; ".join(problems)
    if found:
        return f"; NOT {name}: {describe_differences(found)}{note}"
    return f"; {name}, byte for byte (fingerprint {digest}){note}"


def merge_datasets(out, sources):
    """Join dataset or evaluation-run folders (the shards of one job) into the new folder `out`.

    Each source is validated whole first (every line, every screenshot). An episode id seen twice is
    kept once when the two records agree apart from "meta" (timings: the same episode run twice) and
    is refused as a conflict otherwise. Evaluation runs (run.json) must have the same settings apart
    from the shard and the worker count; results.json and report.html are not copied (evaluate.py
    --report renders them from the merged run). `out` is written aside and renamed into place, so it
    exists complete or not at all. Returns a one-line summary; raises DatasetError naming the folder.
    """
    if os.path.exists(out):
        raise DatasetError(f"merge: {out} already exists: choose a new folder")
    if not sources:
        raise DatasetError("merge: no source folders given")
    runs = {}       # source folder -> its run.json (evaluation runs)
    episodes = []
    origin = {}     # episode id -> (the folder it came from, the episode)
    seen = 0
    for src in sources:
        for ep in _merge_source(src):
            seen += 1
            if ep["id"] not in origin:
                origin[ep["id"]] = (src, ep)
                episodes.append(ep)
            elif not _same_episode(origin[ep["id"]][1], ep):
                raise DatasetError(
                    f"merge: episode {ep['id']!r} differs between {origin[ep['id']][0]} and {src} "
                    "(not only in meta): refusing to choose one")
        if os.path.exists(os.path.join(src, "run.json")):
            with open(os.path.join(src, "run.json"), encoding="utf-8") as f:
                runs[src] = {k: v for k, v in json.load(f).items() if k not in PER_MACHINE}
    first = _shards_of_one_run(runs, sources)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for ep in episodes:
        for step in ep["steps"]:
            dst = os.path.join(tmp, step["screenshot"])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(ep["_root"], step["screenshot"]), dst)
    write_dataset(tmp, episodes)
    verdict = _merged_benchmark(tmp, sources)
    if first:
        write_atomic(os.path.join(tmp, "run.json"),
                     json.dumps(dict(first[1], merged_from=list(sources)), indent=1))
    os.replace(tmp, out)
    return (
        f"merge: {len(episodes)} episodes from {len(sources)} folders "
        f"({seen - len(episodes)} duplicates dropped)"
        f" -> {out}{verdict}"
        + (f"; render its report with: python evaluate.py --report {out}" if first else ""))


# --- A benchmark (MAG-Bench): a definition, tasks/<name>.json, names the (suite, task, seed) list of each
# split and the run protocol; since a seed gives byte-identical screenshots, a split's data is then pinned
# by its fingerprint: a hash over every record (without meta) and every screenshot. The manifest it is
# made of (tasks/<name>/<split>.jsonl: short hashes per episode and step) says where a copy departs.

BENCHMARK_SPLITS = ("train", "val", "test")
BENCHMARK_RUN = ("max_steps", "action_timeout", "settle_quiet_ms", "settle_cap_ms")  # collect.RUN_DEFAULTS
BENCHMARK_GUIDES = ("template",)   # drafted by annotate.py's template drafter, verified `auto`


def _seed_range(spec, where):
    """[first, count] -> range(first, first + count)."""
    _check(isinstance(spec, list) and len(spec) == 2 and all(_is_int(v) for v in spec) and spec[1] > 0,
           where, f"seeds must be [first, count] ({spec!r})")
    return range(spec[0], spec[0] + spec[1])


def load_benchmark(name):
    """A benchmark definition by name (tasks/<name>.json beside this file) or by path, checked: every
    split names seeds for every suite, and no (suite, seed) of val or test is one of train's."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = name if name.endswith(".json") else os.path.join(here, "tasks", name + ".json")
    if not os.path.exists(path):
        raise DatasetError(f"benchmark {name!r}: no definition at {path}")
    with open(path, encoding="utf-8") as f:
        try:
            bench = json.load(f)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}: not valid JSON ({e})") from None
    for key in ("benchmark", "version", "protocol", "suites", "splits"):
        _check(key in bench, path, f"no {key!r}")
    run = bench["protocol"].get("run")
    _check(isinstance(run, dict) and set(run) == set(BENCHMARK_RUN), path,
           f"protocol.run must set exactly {', '.join(BENCHMARK_RUN)}")
    seeds = {}
    for split, spec in bench["splits"].items():
        _check(split in BENCHMARK_SPLITS, path, f"unknown split {split!r}")
        _check(spec.get("guides") in BENCHMARK_GUIDES, path,
               f"{split}: guides must be one of {BENCHMARK_GUIDES}")
        for suite in bench["suites"]:
            where = f"{path}: {split} {suite}"
            seeds[split, suite] = set(_seed_range(spec.get("seeds", {}).get(suite), where))
    for split in ("val", "test"):
        for suite in bench["suites"]:
            shared = seeds.get((split, suite), set()) & seeds.get(("train", suite), set())
            _check(not shared, path, f"{split} seeds of {suite} are training seeds too: {sorted(shared)[:5]}")
    bench["path"] = path
    return bench


def benchmark_jobs(bench, split):
    """The (suite, task, seed) list of a split, in the definition's order."""
    if split not in bench["splits"]:
        raise DatasetError(f"benchmark {bench['benchmark']} has no split {split!r} "
                           f"(it has {', '.join(bench['splits'])})")
    seeds = bench["splits"][split]["seeds"]
    return [(suite, task, seed) for suite, tasks in bench["suites"].items()
            for task in tasks for seed in _seed_range(seeds[suite], f"{split} {suite}")]


def observation_version():
    """The observation protocol's version: a hash of the two snippets every page runs (their knobs filled)."""
    module = sys.modules[__name__]
    return _short_hash((module.INIT_JS + module.OBSERVE_JS).encode())


def protocol_problems(bench, browser, observation):
    """How a build's browser ("Chromium 150.0.7871.100 ...": its version number counts) and observation
    snippets (observation_version()) differ from what the benchmark was built with, in words ([]: none).
    A definition that names no browser (a test's) is not checked on it; None (not recorded) is not checked."""
    name = bench["benchmark"]
    number = lambda text: (re.findall(r"\d+(?:\.\d+){2,3}", text or "") or [text])[0]  # noqa: E731
    want = bench["protocol"].get("browser")
    out = []
    if want and browser and number(want) != number(browser):
        out.append(f"the browser is {browser}, {name}'s is {want}")
    mine = observation
    theirs = bench["protocol"].get("observation")
    if theirs and mine and mine != theirs:
        commit = bench["protocol"].get("harness_commit")
        out.append(f"the observation snippets are {mine}, {name}'s are {theirs}" + (
            f" (rebuild it with the harness of commit {commit}: git worktree add ../{name} {commit})"
            if commit else ""))
    return out


def _short_hash(data):
    return hashlib.sha256(data).hexdigest()[:12]


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def data_manifest(path, episodes=None):
    """One row per episode, sorted by id: the hash of its record without meta and steps, per step the hashes
    of the step's record and of its screenshot's bytes, and `detail`: per step, short hashes of its fields
    (and of each element), which say where a copy departs; the fingerprint leaves `detail` out."""
    episodes = load_dataset(path) if episodes is None else episodes
    rows = []
    for ep in sorted(episodes, key=lambda e: e["id"]):
        head = {k: v for k, v in ep.items() if k not in ("meta", "steps", "_root")}
        steps = []
        for step in ep["steps"]:
            try:
                with open(os.path.join(path, step["screenshot"]), "rb") as f:
                    steps.append([_short_hash(_canonical(step)), _short_hash(f.read())])
            except OSError as e:
                raise DatasetError(f"{path}: episode {ep['id']}'s screenshot {step['screenshot']}: "
                                   f"{e.strerror}") from None
        rows.append({"id": ep["id"], "head": _short_hash(_canonical(head)), "steps": steps,
                     "detail": [_step_detail(step) for step in ep["steps"]]})
    return rows


# A step's fields named in a verdict; the rest of its record (step, screenshot path, guide_status, purpose,
# exec_error) is hashed as `other`. Four hex digits each: they say where; the step's hash says whether.
DETAIL_FIELDS = ("url", "elements", "action", "guide", "guide_alt")


def _h4(obj):
    return _short_hash(_canonical(obj))[:4]


def _step_detail(step):
    detail = {field: _h4(step.get(field)) for field in DETAIL_FIELDS if field != "elements"}
    detail["elements"] = "".join(_h4(e) for e in step.get("elements") or [])   # one hash per mark, in order
    detail["other"] = _h4({k: v for k, v in step.items() if k not in DETAIL_FIELDS})
    return detail


def _bare(row):
    """A manifest row without its `detail` (mag-v1's manifests have none): what the fingerprint covers."""
    return {k: v for k, v in row.items() if k != "detail"}


def fingerprint(manifest):
    """The sha256 of a data manifest: equal fingerprints, equal records and screenshots."""
    return hashlib.sha256(b"\n".join(_canonical(_bare(row)) for row in manifest)).hexdigest()


def _first_mark(mine, theirs):
    """The elements' words: the first mark whose element differs, and both counts when they differ."""
    a = [mine[i:i + 4] for i in range(0, len(mine), 4)]
    b = [theirs[i:i + 4] for i in range(0, len(theirs), 4)]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    counts = f", {len(a)} marks here, {len(b)} in the benchmark" if len(a) != len(b) else ""
    return f"elements (from mark {first + 1}{counts})"


def _step_fields(mine, theirs, k):
    """Which fields of step k differ between two manifest rows, in words."""
    ep_id = theirs["id"]
    out = [f"screenshot img/{ep_id}/{k}.png"] if mine["steps"][k][1] != theirs["steps"][k][1] else []
    if mine["steps"][k][0] == theirs["steps"][k][0]:
        return out
    if "detail" not in mine or "detail" not in theirs:
        return out + ["the step's record (this manifest names no fields)"]
    a, b = mine["detail"][k], theirs["detail"][k]
    fields = [_first_mark(a[f], b[f]) if f == "elements" else f for f in (*DETAIL_FIELDS, "other")
              if a.get(f) != b.get(f)]
    return out + (fields or ["the step's record (short hashes agree: a field that is not named)"])


def _episode_difference(mine, theirs):
    """Where one episode's manifest row departs from the reference's, in words: the first differing step's
    fields and how many steps differ (None: the same)."""
    ep_id = theirs["id"]
    if mine["head"] != theirs["head"]:
        return f"episode {ep_id}: its record differs outside the steps (instruction, outcome, split ...)"
    bad = [k for k, (step, gold) in enumerate(zip(mine["steps"], theirs["steps"])) if step != gold]
    length = "" if len(mine["steps"]) == len(theirs["steps"]) else \
        f"{len(mine['steps'])} steps where the benchmark has {len(theirs['steps'])}"
    if not bad:
        return f"episode {ep_id}: {length}" if length else None
    more = [f"{len(bad)} steps differ"] if len(bad) > 1 else []
    return f"episode {ep_id} step {bad[0]}: " + ", ".join(_step_fields(mine, theirs, bad[0])) + \
        "".join(f"; {note}" for note in more + ([length] if length else []))


def differences(manifest, expected):
    """Every way a manifest departs from the expected one, in words, in episode order: an episode missing
    or extra, or where a differing episode first departs. [] when they agree."""
    got = {r["id"]: r for r in manifest}
    want = {r["id"]: r for r in expected}
    out = [f"episode {i} is missing" for i in sorted(set(want) - set(got))]
    out += [f"episode {i} is not in the benchmark" for i in sorted(set(got) - set(want))]
    for ep_id in sorted(set(want) & set(got)):
        if where := _episode_difference(got[ep_id], want[ep_id]):
            out.append(where)
    return out


def manifest_path(bench, split):
    """Where a split's reference manifest lives: tasks/<name>/<split>.jsonl beside the definition."""
    return os.path.join(os.path.splitext(bench["path"])[0], f"{split}.jsonl")


def check_unfrozen(bench, split):
    """--freeze's precondition, checked before a build too: a split is frozen once."""
    if bench["splits"][split].get("fingerprint"):
        raise DatasetError(f"{bench['path']}: the {split} split is frozen already: a changed benchmark is a "
                           "new version (a new definition file)")


def freeze_benchmark(bench, split, manifest):
    """Record the data of `manifest` (data_manifest of a folder) as the split's reference: the manifest
    (tasks/<name>/<split>.jsonl) and its fingerprint in the definition. Once per split: a frozen split is
    never overwritten."""
    check_unfrozen(bench, split)
    os.makedirs(os.path.dirname(manifest_path(bench, split)), exist_ok=True)
    write_atomic(manifest_path(bench, split), "".join(_canonical(r).decode() + "\n" for r in manifest))
    with open(bench["path"], encoding="utf-8") as f:
        definition = json.load(f)
    definition["splits"][split].update(fingerprint=fingerprint(manifest), episodes=len(manifest),
                                       steps=sum(len(r["steps"]) for r in manifest))
    write_atomic(bench["path"], json.dumps(definition, indent=1) + "\n")
    bench["splits"][split] = definition["splits"][split]


def check_benchmark_data(bench, split, manifest, partial=False):
    """Is the data of `manifest` (data_manifest of a folder) this benchmark's split? -> (its fingerprint,
    the differences: [] when it is); a split not yet frozen (no fingerprint in the definition) counts as
    differing. `partial` (a shard, a part of the split): only its episodes are compared with the split's
    rows for them; missing ones are not differences."""
    digest = fingerprint(manifest)
    expected = bench["splits"][split].get("fingerprint")
    if digest == expected:
        return digest, []
    if not expected or not os.path.exists(manifest_path(bench, split)):
        return digest, [f"the definition has no fingerprint for {split} yet (this copy's: {digest})"]
    reference = read_manifest(bench, split)
    if partial:
        here = {row["id"] for row in manifest}
        reference = [row for row in reference if row["id"] in here]
    return digest, differences(manifest, reference) or (
        [] if partial else ["the manifest file disagrees with the definition"])


def read_manifest(bench, split):
    """A frozen split's reference manifest (tasks/<name>/<split>.jsonl)."""
    with open(manifest_path(bench, split), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def departing_episodes(bench, split, manifest):
    """The ids of the episodes of `manifest` (data_manifest of a folder) that the frozen split holds too,
    but whose data differ from it (a rendering race under load can flip a frame: a rerun of the episode
    may give the reference's); [] for a split not frozen."""
    if not bench["splits"][split].get("fingerprint") or not os.path.exists(manifest_path(bench, split)):
        return []
    reference = {row["id"]: _bare(row) for row in read_manifest(bench, split)}
    return [row["id"] for row in manifest
            if row["id"] in reference and _bare(row) != reference[row["id"]]]


def describe_differences(found):
    """One line for a verdict: every difference, with missing episodes counted rather than listed."""
    missing = [f for f in found if f.endswith(" is missing")]
    parts = [f for f in found if not f.endswith(" is missing")]
    if len(missing) > 1:
        parts.insert(0, f"{len(missing)} episodes are missing (the first: {missing[0].split()[1]})")
    else:
        parts = missing + parts
    return parts[0] if len(found) == 1 else f"{len(found)} episodes differ: " + " | ".join(parts)


# --- Export for the Hugging Face Hub (`python metrics.py export`): Parquet files of one row per step (the
# unit Mind2Web and WebMRE publish) with the screenshot's PNG bytes inside, and a dataset card. `datasets`
# is needed by this command only (requirements-dev.txt), so it is imported here and nowhere else.

SHARD_BYTES = 500 * 2**20   # screenshots per Parquet file, about: push_to_hub's default max_shard_size
EPISODE_COLUMNS = ("id", "suite", "task", "seed", "split", "instruction", "start_url", "viewport", "success",
                   "reward", "meta")
STEP_COLUMNS = ("step", "url", "elements", "action", "guide", "guide_status")


def _export_features(datasets):
    """The rows' columns. `elements`, `meta` and `extra` are JSON strings: they come back exactly as written
    (any keys, integers as integers), where an Arrow struct drops or pads keys and makes integers floats."""
    text = datasets.Value("string")
    integer = datasets.Value("int64")
    action = {"op": text, "mark": integer, "point": datasets.List(datasets.Value("float64")), "value": text}
    return datasets.Features({
        "id": text, "suite": text, "task": text, "seed": integer, "split": text, "instruction": text,
        "start_url": text, "viewport": datasets.List(integer), "success": datasets.Value("bool"),
        "reward": datasets.Value("float64"), "meta": text, "step": integer, "url": text, "elements": text,
        "action": action, "guide": text, "guide_status": text, "paraphrase": text, "image": datasets.Image(),
        "extra": text})


def _export_row(ep, step):
    """One step as a row: its episode's fields, its own, its screenshot's bytes and path. A key without a
    column goes to `extra`, and so does a guide_alt with more than a paraphrase: nothing recorded is lost."""
    dump = functools.partial(json.dumps, ensure_ascii=False)
    alt = step.get("guide_alt") or {}
    held = STEP_COLUMNS + ("screenshot",) + (("guide_alt",) if set(alt) <= {"paraphrase"} else ())
    extra = {"episode": {k: v for k, v in ep.items() if k not in EPISODE_COLUMNS + ("steps", "_root")},
             "step": {k: v for k, v in step.items() if k not in held}}
    with open(os.path.join(ep["_root"], step["screenshot"]), "rb") as f:
        image = {"bytes": f.read(), "path": step["screenshot"]}
    row = {key: ep.get(key) for key in EPISODE_COLUMNS} | {key: step.get(key) for key in STEP_COLUMNS}
    return row | {"split": ep.get("split", "train"), "meta": dump(ep["meta"]) if "meta" in ep else None,
                  "elements": dump(step["elements"]), "paraphrase": alt.get("paraphrase"), "image": image,
                  "extra": dump(extra)}


def _export_splits(episodes):
    """{split: [[(episode, step), ...] per Parquet file]}: train, val, test, each cut into files of about
    SHARD_BYTES of screenshots; an episode without a split is in train."""
    steps = {}
    for ep, k in iter_steps(episodes):
        where = f"export: episode {ep['id']!r}"
        _check(ep.get("split", "train") in BENCHMARK_SPLITS, where, f"split: not one of {BENCHMARK_SPLITS}")
        _check(ep.get("seed") is None or _is_int(ep["seed"]), where, f"seed: not an integer ({ep['seed']!r})")
        steps.setdefault(ep.get("split", "train"), []).append((ep, ep["steps"][k]))
    parts = {}
    for split in (split for split in BENCHMARK_SPLITS if split in steps):
        rows = steps[split]
        size = sum(os.path.getsize(os.path.join(ep["_root"], step["screenshot"])) for ep, step in rows)
        n = math.ceil(size / SHARD_BYTES)
        parts[split] = [rows[i * len(rows) // n:(i + 1) * len(rows) // n] for i in range(n)]
    return parts


def _guides_said(episodes):
    """What a folder's steps hold as guides and splits, in words for the card: nothing claimed untruly."""
    steps = [step for ep in episodes for step in ep["steps"]]
    statuses = {}
    for step in steps:
        if step.get("guide"):
            statuses[step["guide_status"]] = statuses.get(step["guide_status"], 0) + 1
    guided = sum(statuses.values())
    said = "no guides (not annotated: every `guide` is null)" if not guided else (
        f"guides on {'all ' if guided == len(steps) else ''}{guided} of {len(steps)} steps ("
        + ", ".join(f"{status} {n}" for status, n in sorted(statuses.items(), key=str)) + ")")
    if unsplit := sum("split" not in ep for ep in episodes):
        said += f"; {unsplit} of {len(episodes)} episodes record no split (exported as `train`)"
    return said


def _provenance(src, episodes):
    """The card's line on how the folder `src` was made: the benchmark split (or shard) collect.py built, if
    it did, and what its steps hold as guides."""
    try:
        with open(os.path.join(src, "benchmark.json"), encoding="utf-8") as f:
            b = json.load(f)
    except FileNotFoundError:
        return f"- `{src}`: collected with `collect.py`; {_guides_said(episodes)}"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"{src}/benchmark.json: not valid JSON ({e})") from None
    verdict = "its split, byte for byte"
    if b.get("shard"):
        verdict = (f"shard {b['shard'][0]}/{b['shard'][1]}: {len(episodes)} episodes, a part of the split, "
                   + ("each matching the split's" if b.get("matches") else "NOT all matching the split's"))
    if not b.get("matches"):
        verdict += f": {describe_differences(b.get('differences') or ['unknown'])}"
    if b.get("comparable") is False:
        verdict += "; NOT comparable: " + "; ".join(b.get("problems") or ["another browser"])
    shard = f" --shard {b['shard'][0]}/{b['shard'][1]}" if b.get("shard") else ""
    return (f"- `{src}`: `python collect.py --benchmark {b.get('benchmark')} --split {b.get('split')}{shard} "
            f"--out {src}` ({b.get('benchmark')} {b.get('version')}"
            + (f", fingerprint `{b['fingerprint']}`" if b.get("fingerprint") else "")
            + f": {verdict}); {_guides_said(episodes)}")


def _dataset_card(datasets, info, lines, sources, out):
    """README.md for the Hub: the YAML header push_to_hub writes (licence, configs, features, splits), then
    assets/dataset_card.md filled in."""
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCardData
    name = os.path.basename(os.path.abspath(out))
    card = DatasetCardData(license="other", license_name="mag-harness-data", pretty_name=name,
                           language=["en"], task_categories=["image-text-to-text"])
    DatasetInfosDict({"default": info}).to_dataset_card_data(card)
    files = [{"split": split, "path": f"data/{split}-*"} for split in info.splits]
    MetadataConfigs({"default": {"data_files": files}}).to_dataset_card_data(card)
    counts = ", ".join(f"{split} {info.splits[split].num_examples}" for split in info.splits)
    return string.Template(read_asset("dataset_card.md")).substitute(
        yaml=card.to_yaml(), title=name, counts=counts, made="\n".join(lines), sources=" ".join(sources),
        out=out, first=next(iter(info.splits)), splits=", ".join(info.splits))


def export_dataset(out, sources):
    """Write the dataset folders `sources` (validated whole first, episode ids unique) to the new folder `out`
    for the Hugging Face Hub: data/<split>-NNNNN-of-MMMMM.parquet, one row per step in its episode's split,
    and README.md, the dataset card; datasets.load_dataset(out) reads it. Written aside and renamed, so `out`
    exists complete or not at all. Returns a one-line summary; raises DatasetError."""
    try:
        import datasets
    except ImportError:
        raise DatasetError("export: needs Hugging Face's datasets library: pip install datasets") from None
    if os.path.exists(out):
        raise DatasetError(f"export: {out} already exists: choose a new folder")
    origin = {}
    episodes = []
    lines = []
    for src in sources:
        mine = load_dataset(src, check_images=True, empty_ok=False)
        for ep in mine:
            _check(ep["id"] not in origin, src, f"episode {ep['id']!r} is in {origin.get(ep['id'])} too")
            origin[ep["id"]] = src
            episodes.append(ep)
        lines.append(_provenance(src, mine))
    parts = _export_splits(episodes)
    features = _export_features(datasets)
    splits = datasets.SplitDict()
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "data"))
    for split, files in parts.items():
        splits.add(datasets.SplitInfo(name=split, num_bytes=0, num_examples=sum(map(len, files))))
        for i, part in enumerate(files):
            rows = datasets.Dataset.from_list([_export_row(ep, step) for ep, step in part], features=features)
            rows.to_parquet(os.path.join(tmp, "data", f"{split}-{i:05d}-of-{len(files):05d}.parquet"))
            splits[split].num_bytes += rows.data.nbytes
    info = datasets.DatasetInfo(features=features, splits=splits)
    write_atomic(os.path.join(tmp, "README.md"), _dataset_card(datasets, info, lines, sources, out))
    os.replace(tmp, out)
    counts = ", ".join(f"{split} {splits[split].num_examples}" for split in splits)
    files = sum(map(len, parts.values()))
    return f"export: {len(episodes)} episodes, steps {counts}; {files} Parquet files -> {out}"

# ----------------------------------------------------------------------------------------------
# 7. What every model stage shares, torch-free: the steps worth learning from, the options a
# checkpoint was trained with, the chat prompt, and files written so a kill never leaves half of one.

TRAIN_CONFIG = "train_config.json"   # written by train_sft.py and train_grpo.py beside the weights


def usable_steps(episodes, split, statuses, order):
    """(episode, step index) of every step worth learning from, in episode-id order (not file order: parallel
    workers append episodes as they finish, so one dataset collected twice has two line orders): it ran (an
    action, no exec_error) and, unless the order writes no guide, its guide has one of `statuses` ("a,b")."""
    keep = set(statuses.split(","))
    out = []
    for ep in sorted(episodes, key=lambda e: e["id"]):
        if split != "all" and ep.get("split", "train") != split:
            continue
        for k, step in enumerate(ep["steps"]):
            if step.get("exec_error") or step["action"] is None:
                continue
            if order != "action_only" and (step.get("guide_status") not in keep or not step.get("guide")):
                continue
            out.append((ep, k))
    return out


def trained_options(path):
    """What a checkpoint folder was trained with ({} when it says nothing): its train_config.json,
    or sft_config.json in checkpoints written before that name."""
    for name in (TRAIN_CONFIG, "sft_config.json"):
        if os.path.exists(os.path.join(path, name)):
            with open(os.path.join(path, name)) as f:
                return json.load(f)
    return {}


def prompt_options(grounding=None, order=None, elements=None, trained=None):
    """The prompt options: a flag given wins, then what the checkpoint was trained with, then the default."""
    trained = trained or {}
    return {"grounding": grounding or trained.get("grounding") or "som",
            "order": order or trained.get("order") or "guide_first",
            "elements": elements or trained.get("elements") or "none"}


def chat_prompt(processor, ep, k, opts, image=None):
    """(prompt text, image) for step k: build_messages under the processor's chat template, the
    generation prompt added -- what SFT trains on and every other model stage sends."""
    elements = opts["elements"] if opts["elements"] != "none" else None
    msgs = build_messages(ep, k, opts["grounding"], opts["order"], elements=elements, image=image)
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return text, msgs[1]["content"][0]["image"]


def write_atomic(path, text):
    """Write a text file whole or not at all (aside, then renamed over the old one)."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def publish_dir(tmp, out):
    """Put the finished folder `tmp` in place of `out`. The old `out` is moved to `out.old` first and
    removed last, so at every moment one complete copy exists: `out`, or `out.old` (recover_dir)."""
    old = out.rstrip("/") + ".old"
    if os.path.isdir(out):
        if os.path.isdir(old):
            shutil.rmtree(old)
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def refuse_overwrite(out, resume):
    """A trainer's --out: a new run (no --resume) never silently replaces an earlier run's checkpoint."""
    if not resume and (os.path.exists(out) or os.path.exists(out.rstrip("/") + ".old")):
        raise SystemExit(f"--out {out}: a checkpoint is already there; continue it with --resume, "
                         "or choose another --out (or delete it)")


def check_optimizer_state(saved, optimizer, path):
    """--resume: the saved optimizer state must fit the optimizer built for the model (the same groups of
    the same sizes, each moment of its parameter's shape), or the run ends with the reason: torch would
    give a traceback, or keep a wrong shape until the first step; starting afresh would be another run."""
    why = None
    try:
        had = [len(g["params"]) for g in saved["param_groups"]]
        has = [len(g["params"]) for g in optimizer.param_groups]
        if had != has:
            why = (f"{len(had)} parameter groups of {had} tensors, where this model's optimizer has "
                   f"{len(has)} of {has}")
        ids = [i for g in saved["param_groups"] for i in g["params"]]
        for i, param in zip(ids, [p for g in optimizer.param_groups for p in g["params"]]):
            for name, moment in saved["state"].get(i, {}).items():
                if getattr(moment, "shape", ()) and moment.shape != param.shape and not why:   # step: ()
                    why = f"parameter {i}'s {name} is {list(moment.shape)}, the parameter {list(param.shape)}"
    except (KeyError, TypeError, AttributeError) as e:   # not the shape of an optimizer's state_dict at all
        why = f"not an optimizer state ({type(e).__name__}: {e})"
    if why:
        raise SystemExit(f"--resume: {path}: the optimizer state does not fit this model ({why}); resume the "
                         "model and settings that wrote it, or start a new --out")


def open_log(path, step):
    """A run's JSONL log (records with a "step") opened for appending, its folder made and the records after
    `step` dropped: a resumed run logs again the steps after its last save, a new run (0) starts empty."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    keep = []
    if step and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    if json.loads(line).get("step", 0) <= step:
                        keep.append(line if line.endswith("\n") else line + "\n")
                except (json.JSONDecodeError, AttributeError):
                    continue   # a line torn by the kill that ended the last run
    write_atomic(path, "".join(keep))
    return open(path, "a", encoding="utf-8")


def recover_dir(out):
    """Undo a publish_dir cut short by a kill: `out` missing but `out.old` there -> put it back."""
    old = out.rstrip("/") + ".old"
    if not os.path.isdir(out) and os.path.isdir(old):
        os.replace(old, out)
        print(f"{out}: restored from {old} (a save was interrupted)", file=sys.stderr)


def images_arg(processor, images):
    """One image per sample, as a transformers processor wants them: Idefics3/SmolVLM processors take
    a list of images per sample, Qwen-VL's a flat list (the one processor quirk every stage meets)."""
    name = type(processor).__name__
    return [[im] for im in images] if "Idefics3" in name or "SmolVLM" in name else list(images)


# ----------------------------------------------------------------------------------------------
# 8. An OpenAI-compatible /chat/completions client, stdlib only (no SDK to install): evaluate.py's api
#    policy and annotate.py's api drafter send metrics.py's prompts through it.

class ApiError(RuntimeError):
    """The endpoint did not give a usable reply after every retry. `status` is the last HTTP code, if any."""

    def __init__(self, msg, status=None):
        super().__init__(msg)
        self.status = status
        # an outage (the run's error, not the policy's): no answer, a timeout, 5xx, 429, a refused key or
        # model, a redirect, a body not the API's; any other 4xx refuses only this request (too long, ...)
        self.outage = not (status and 400 <= status < 500) or status in (401, 403, 404, 408, 429)


ERROR_BYTES = 16_384   # how much of an error body is read; its first 200 characters go into the message
KEY_PIECE = 8   # an echoed run of this many characters of the key (or more) is redacted too


def redact(text, key, limit=None):
    """Text that came from the endpoint, safe to print or store: every run of characters that is a piece of
    the key at least KEY_PIECE long (the whole key, or the part an endpoint echoed) replaced by ***, and then,
    with `limit`, squeezed onto one line and cut to `limit` characters. The one place the client makes
    endpoint text safe (replies, error bodies, exception messages), and redaction comes first: a cut made
    before it could leave a piece of the key that no longer matches."""
    if key:
        n = min(KEY_PIECE, len(key))
        pieces = {key[i:i + n] for i in range(len(key) - n + 1)}
        hit = bytearray(len(text))   # each character inside some n-long piece of the key
        for i in range(len(text) - n + 1):
            if text[i:i + n] in pieces:
                hit[i:i + n] = b"\1" * n
        for m in reversed(list(re.finditer(rb"\x01+", hit))):
            text = text[:m.start()] + "***" + text[m.end():]
    return " ".join(text.split())[:limit] if limit else text


def _refused_redirect(e, url):
    """The one-line error for a 3xx: where it pointed (no query: it may carry a token) and what to do."""
    import urllib.parse
    where = urllib.parse.urlsplit(urllib.parse.urljoin(url, e.headers.get("Location") or ""))
    where = where._replace(query="", fragment="").geturl()
    hint = f" ({where.removesuffix('/chat/completions')})" if where.endswith("/chat/completions") else ""
    return (f"the endpoint answered {e.code} -> {where}; redirects are not followed (the key would go with "
            f"them): use the final URL as --api-base{hint}")


def chat_completion(base, model, messages, key=None, timeout=60.0, retries=3, backoff=1.0, max_tokens=200,
                    extra=None):
    """POST the messages; returns the reply text. Timeouts, connection errors, 429 and 5xx are retried
    with exponential backoff; other 4xx are not (they will not get better). The key goes only into the
    Authorization header of a request to `base`: a redirect is refused, not followed (urllib would send the
    header on to wherever it points), and every text from the endpoint -- the reply included -- goes
    through `redact` before it is returned or raised. `extra` is merged into the body (a None value drops
    the key: reasoning models refuse max_tokens and temperature)."""
    import http.client
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None   # urllib then raises the 3xx as an HTTPError, answered below

    opener = urllib.request.build_opener(NoRedirect)
    key = key.strip() if key else None   # a key read from a file ends in a newline, which no header can carry
    if key and ("\n" in key or "\r" in key):   # http.client would refuse it with the key in the message
        raise ApiError(f"{base}: the API key holds a line break; a header cannot carry it")
    url = base.rstrip("/") + "/chat/completions"
    body = {"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens, **(extra or {})}
    body = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    last, status = None, None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            with opener.open(urllib.request.Request(url, data=body, headers=headers), timeout=timeout) as r:
                reply = json.loads(r.read())
            content = reply["choices"][0]["message"]["content"]
            if isinstance(content, list):   # some servers answer with content parts
                content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            if not isinstance(content or "", str):
                raise TypeError("content is not text")
            return redact(content or "", key)   # a reply that echoes the request goes into stored files
        except urllib.error.HTTPError as e:
            status = e.code
            if 300 <= e.code < 400:
                raise ApiError(redact(f"{base}: {_refused_redirect(e, url)}", key), status) from None
            raw = e.read(ERROR_BYTES) if e.fp else b""
            detail = raw.decode("utf-8", "replace")
            if key and len(raw) == ERROR_BYTES:   # the read is a cut too: a piece of the key may end the text
                detail = detail[:-len(key)]
            last = f"HTTP {e.code}" + (": " + redact(detail, key, 200) if detail.strip() else "")
            if e.code < 500 and e.code != 429:
                break
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError) as e:
            # http.client puts a status line it could not read into the message, whatever the line holds
            last = redact(f"{type(e).__name__}: {getattr(e, 'reason', e)}", key, 200)
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError) as e:
            last = f"malformed reply ({type(e).__name__})"
    raise ApiError(redact(f"{base}: {last} after {attempt + 1} attempt(s)", key), status)


def preflight(who, base, model, key, key_env, timeout=60.0, extra=None):
    """One tiny request before any work: a missing or refused key (named by its variable), a wrong model or
    nothing at `base` ends the run with one line; transient errors (5xx, 429, a timeout) only warn."""
    try:
        chat_completion(base, model, [{"role": "user", "content": "Reply with OK."}], key, timeout=timeout,
                        retries=0, max_tokens=1, extra=extra)
    except ApiError as e:
        if e.status in (401, 403):
            hint = f"${key_env} is not set" if not key else f"the key in ${key_env} was refused"
            raise SystemExit(f"{who}: the endpoint needs an API key: {hint} ({e})") from None
        if e.status is not None and e.status < 500 and e.status != 429:
            raise SystemExit(
                f"{who}: the endpoint refused the request (wrong --api-model or --api-base?): {e}") from None
        if e.status is None and "refused" in str(e).lower():
            raise SystemExit(f"{who}: nothing answers at --api-base: {e}") from None
        print(f"{who}: warning: preflight request failed ({e}); going on, failed steps will be retried")


def data_url(img):
    """A PIL image as a PNG data URL."""
    import base64
    import io
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def openai_messages(messages):
    """metrics.build_messages' chat (transformers' format, a PIL image in it) -> OpenAI's format:
    the image as a data URL part, a text-only system message as a plain string (what every server accepts)."""
    out = []
    for m in messages:
        parts = []
        for c in m["content"]:
            if c["type"] == "image":
                parts.append({"type": "image_url", "image_url": {"url": data_url(c["image"])}})
            else:
                parts.append({"type": "text", "text": c["text"]})
        text_only = all(p["type"] == "text" for p in parts)
        out.append(
            {"role": m["role"], "content": "\n".join(p["text"] for p in parts) if text_only else parts})
    return out


# ----------------------------------------------------------------------------------------------
# A small command line for datasets:
#   python metrics.py check DATASET             validate every line and image, print counts (exit 2 if broken)
#   python metrics.py som DATASET OUT [--n N]   Set-of-Mark images of N steps spread over the dataset
#   python metrics.py merge --out DIR SRC...    join the shards of a collection or evaluation (merge_datasets)
#   python metrics.py export --out DIR SRC...   Parquet shards + a dataset card for the Hugging Face Hub

def _main(argv=None):
    p = argparse.ArgumentParser(description="inspect, draw, merge or export MAG datasets")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate every line and screenshot, print counts")
    c.add_argument("dataset")
    c = sub.add_parser("som", help="draw Set-of-Mark images of steps spread over the dataset")
    c.add_argument("dataset")
    c.add_argument("out", help="folder for the images")
    c.add_argument("--n", type=int, default=10, help="steps to draw")
    c = sub.add_parser("merge", help="join dataset or evaluation-run folders (shards) into a new folder")
    c.add_argument("sources", nargs="+", help="the folders to join (e.g. the --out of each --shard)")
    c.add_argument("--out", required=True, help="the new folder (must not exist)")
    c = sub.add_parser("export", help="write dataset folders as Parquet + a dataset card (needs `datasets`)")
    c.add_argument("sources", nargs="+", help="the dataset folders (e.g. a benchmark's train, val and test)")
    c.add_argument("--out", required=True, help="the new folder (must not exist)")
    a = p.parse_args(argv)
    if a.command in ("merge", "export"):
        try:
            print((merge_datasets if a.command == "merge" else export_dataset)(a.out, a.sources))
        except DatasetError as e:
            fail(e)
        return
    eps = load_dataset_or_exit(a.dataset, check_images=True)
    if a.command == "check":
        steps = sum(len(e["steps"]) for e in eps)
        ok = sum(e["success"] for e in eps)
        print(f"{a.dataset}: {len(eps)} episodes, {steps} steps, {ok} successful, "
              f"{sum(1 for e in eps if e.get('error'))} with errors")
        return
    os.makedirs(a.out, exist_ok=True)
    steps = list(iter_steps(eps))
    picks = sorted({round(i * (len(steps) - 1) / max(1, a.n - 1)) for i in range(min(a.n, len(steps)))})
    for ep, k in (steps[i] for i in picks):  # spread evenly over the dataset
        path = os.path.join(a.out, f"{ep['id']}.{k}.png")
        step_image(ep, k, "som").save(path)
        print(path, format_action(ep["steps"][k]["action"], "som", ep["viewport"]))


if __name__ == "__main__":
    _main()
