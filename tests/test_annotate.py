"""annotate.py: template and API drafts on a real expert dataset, verify, paraphrase, split."""
import json
import os
import re
import shutil

import pytest
from conftest import FakeAPI, make_toy_dataset

import annotate
import collect
import metrics

KEY = "sk-test-secret-4242"


@pytest.fixture(scope="module")
def expert_data(tmp_path_factory):
    """Every expert task, two unseen seeds each, collected once for the module."""
    out = tmp_path_factory.mktemp("experts") / "data"
    collect.main(["--tasks", "all", "--episodes", "2", "--seed", "300", "--workers", "2", "--out", str(out),
                  "--no-progress"])
    return out


@pytest.fixture
def data(expert_data, tmp_path):
    """A private copy to write into."""
    dst = tmp_path / "data"
    shutil.copytree(expert_data, dst)
    return str(dst)


def skeleton(guide):
    """A guide with its names and values blanked: what is left is the sentence's shape."""
    return re.sub(r'\*\*[^*]*\*\*|"[^"]*"', "_", guide)


def test_template_drafts_name_their_target_and_vary(data, capsys):
    annotate.main(["draft", data])
    eps = metrics.load_dataset(data)
    steps = [(ep, s) for ep in eps for s in ep["steps"]]
    assert steps and all(s["guide_status"] == "draft" and s["guide_meta"]["drafter"] == "template" for _, s in steps)
    named = 0
    for ep, s in steps:
        el = metrics.gold_element(s)
        op = s["action"]["op"]
        nameable = op not in metrics.ELEMENT_OPS or (el and el["text"]) or op in ("type", "select")
        if nameable:   # a target with a label (or a value, or no target at all) is always named and grounded
            assert metrics.guide_grounding(s["guide"], s) == 1, (ep["id"], s["step"], s["guide"])
            named += 1
        assert s["guide"][0].isupper() and s["guide"].endswith(".") and "  " not in s["guide"]
    assert named / len(steps) > 0.9   # only label-less icons (social-media, email) cannot be named
    for ep in eps:                    # consecutive steps never share a sentence shape
        for a, b in zip(ep["steps"], ep["steps"][1:]):
            assert skeleton(a["guide"]) != skeleton(b["guide"]), (ep["id"], a["guide"], b["guide"])
    assert len({skeleton(s["guide"]) for _, s in steps}) >= 15
    annotate.main(["draft", data])    # resumable and idempotent: nothing new, nothing changed
    assert "0 new drafts" in capsys.readouterr().out
    assert metrics.load_dataset(data) == eps


def test_draft_after_a_crash_mid_append_sets_the_torn_line_aside(toy_data, tmp_path, capsys):
    """A run killed while appending to drafts.jsonl leaves a torn last line; the rerun moves it to
    drafts.jsonl.torn before appending (it used to glue its first draft onto it, and every later command
    then failed on a bad line in the middle of the file)."""
    data = str(tmp_path / "d")
    shutil.copytree(toy_data, data)
    eps = metrics.load_dataset(data)
    for s in eps[0]["steps"]:
        s.update(guide=None, guide_status=None)
    metrics.write_dataset(data, eps[:1])
    log = os.path.join(data, "drafts.jsonl")
    with open(log, "w") as f:
        f.write('{"episode": "%s", "step": 0, "gui' % eps[0]["id"])
    annotate.main(["draft", data])
    assert "torn last line" in capsys.readouterr().err
    assert open(log + ".torn").read().startswith('{"episode"')
    annotate.main(["verify", data, "--accept-drafts"])   # drafts.jsonl reads whole again
    steps = metrics.load_dataset(data)[0]["steps"]
    assert all(s["guide"] and s["guide_status"] == "auto" for s in steps)


def test_template_drafts_are_deterministic(expert_data, tmp_path):
    guides = []
    for name in ("a", "b"):
        shutil.copytree(expert_data, tmp_path / name)
        annotate.main(["draft", str(tmp_path / name)])
        guides.append([s["guide"] for ep in metrics.load_dataset(tmp_path / name) for s in ep["steps"]])
    assert guides[0] == guides[1]


def test_verify_marks_auto_never_verified(data):
    with pytest.raises(SystemExit, match="--accept-drafts"):
        annotate.main(["verify", data])
    annotate.main(["draft", data])
    annotate.main(["verify", data, "--accept-drafts"])
    statuses = {s["guide_status"] for ep in metrics.load_dataset(data) for s in ep["steps"]}
    assert statuses == {"auto"}


def test_paraphrase_renames_the_target(data):
    annotate.main(["draft", data])
    annotate.main(["paraphrase", data])
    for ep in metrics.load_dataset(data):
        for s in ep["steps"]:
            para = s["guide_alt"]["paraphrase"]
            assert para and not annotate.leaks_label(para, s), (s["guide"], para)
            if s["action"]["op"] in ("type", "select"):
                assert s["action"]["value"] in para      # the instruction is the same, only the name changed


def test_split_is_stable_and_whole_episodes(data, tmp_path):
    annotate.main(["split", data, "--val", "0.2", "--test", "0.3", "--test-tasks", "book-flight"])
    first = {ep["id"]: ep["split"] for ep in metrics.load_dataset(data)}
    annotate.main(["split", data, "--val", "0.2", "--test", "0.3", "--test-tasks", "book-flight"])
    assert {ep["id"]: ep["split"] for ep in metrics.load_dataset(data)} == first
    assert set(first.values()) <= {"train", "val", "test"}
    assert all(first[i] == "test" for i in first if ".book-flight." in i)
    assert {"train", "test"} <= set(first.values())
    with pytest.raises(SystemExit, match="no episodes of nope"):
        annotate.main(["split", data, "--test-tasks", "nope"])
    # the hash, not the file order, decides: a large synthetic id set lands near the asked shares
    ids = [f"s.t.{i}" for i in range(5000)]
    shares = [sum(annotate.assign_split(i, "t", 0.1, 0.2, set()) == s for i in ids) / 5000 for s in ("val", "test")]
    assert abs(shares[0] - 0.1) < 0.02 and abs(shares[1] - 0.2) < 0.02


def test_api_drafter_checks_replies_and_falls_back(expert_data, tmp_path, monkeypatch, capsys):
    """An unusable reply, or a request the endpoint refuses, falls back to the template per step; an endpoint
    that fails after its retries stops the run with one line, and that step is not done: a rerun drafts it."""
    data = tmp_path / "d"
    os.makedirs(data)
    keep = [ep for ep in metrics.load_dataset(expert_data) if ep["task"] == "login-user"][:1]
    metrics.write_dataset(str(data), keep)
    shutil.copytree(os.path.join(expert_data, "img", keep[0]["id"]), data / "img" / keep[0]["id"])
    steps = keep[0]["steps"]   # type username, type password, click Login
    user = steps[0]["action"]["value"]
    api = FakeAPI(["OK",                                                    # the endpoint check
                   f'Guide: "Type {user} into the **Username** field."',   # good, after cleaning
                   "lol ok",                                               # names nothing -> template
                   500, 500, "hang", "badjson"])                           # server errors, a timeout, junk: down
    monkeypatch.setenv("MAG_TEST_KEY", "sk-secret-123")
    argv = ["draft", str(data), "--drafter", "api", "--api-model", "fake-vlm", "--api-key-env", "MAG_TEST_KEY",
            "--api-timeout", "0.5", "--api-retries", "3", "--api-backoff", "0.05"]
    try:
        with pytest.raises(SystemExit) as e:
            annotate.main([*argv, "--api-base", api.base])
    finally:
        api.close()
    out = capsys.readouterr().out
    assert str(e.value).startswith(f"annotate draft: stopped, the endpoint failed ({api.base}: malformed reply")
    assert "after 4 attempt(s)); what was done is kept: run the same command again for the rest" in str(e.value)
    assert "draft: 2 new drafts (1 fell back to the template), 2 merged" in out
    got = metrics.load_dataset(data)[0]["steps"]
    assert got[0]["guide"] == f"Type {user} into the **Username** field."
    assert got[0]["guide_meta"]["drafter"] == "api:fake-vlm"
    assert got[1]["guide_meta"]["drafter"] == "template" and "does not name" in got[1]["guide_meta"]["fallback"]
    assert got[2]["guide"] is None   # not drafted: the endpoint failed, not the reply
    # the request: the key only in the Authorization header, the screenshot as a data URL, temperature 0
    first = api.requests[1]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-secret-123"
    content = first["body"]["messages"][1]["content"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,") and first["body"]["temperature"] == 0
    assert len(api.requests) == 7   # the check + 1 + 1 + (500, 500, hang, badjson: four tries of the last step)
    # the endpoint is back: the rerun drafts the step that was not done, and only that one
    api = FakeAPI(["OK", 400])   # this request refused (too long, say): the template, recorded as a fallback
    try:
        annotate.main([*argv, "--api-base", api.base])
    finally:
        api.close()
    out += capsys.readouterr().out
    assert "draft: 1 new drafts (1 fell back to the template), 1 merged" in out and len(api.requests) == 2
    got = metrics.load_dataset(data)[0]["steps"]
    assert got[2]["guide_meta"]["drafter"] == "template" and "HTTP 400" in got[2]["guide_meta"]["fallback"]
    assert all(metrics.guide_grounding(s["guide"], s) for s in got)
    records = open(data / "drafts.jsonl").read()
    assert len(records.splitlines()) == 3 and "sk-secret-123" not in records and "sk-secret-123" not in out


def unguided_toy(path):
    """A toy dataset whose steps have no guide yet (so a drafter has work), and the bytes of its episodes.jsonl."""
    d = make_toy_dataset(str(path), n_episodes=2)
    eps = metrics.load_dataset(d)
    for _, step in ((ep, s) for ep in eps for s in ep["steps"]):
        step.update(guide=None, guide_status=None, guide_alt=None)
    metrics.write_dataset(d, eps)
    return d, open(os.path.join(d, "episodes.jsonl"), "rb").read()


def test_api_drafter_checks_the_endpoint_first(tmp_path, monkeypatch):
    """A missing or refused key (named by its variable), an unknown model, no server, no --api-model: one line
    and a non-zero exit before any draft (it fell back to the template on every step, exit 0, and a rerun with
    the right settings then had nothing left to draft); nothing is written."""
    d, before = unguided_toy(tmp_path / "toy")
    argv = ["draft", d, "--drafter", "api", "--api-key-env", "MAG_TEST_KEY", "--api-retries", "0"]
    unknown = (404, '{"error": {"message": "The model `nope` does not exist"}}', {})
    api = FakeAPI([unknown], key=KEY)
    monkeypatch.delenv("MAG_TEST_KEY", raising=False)
    cases = [([], "--drafter api needs --api-model (the model name the endpoint serves)"),
             (["--api-model", "m"], r"annotate: the endpoint needs an API key: $MAG_TEST_KEY is not set (")]
    try:
        for extra, message in cases:
            with pytest.raises(SystemExit) as e:
                annotate.main([*argv, "--api-base", api.base, *extra])
            assert str(e.value).startswith(message), str(e.value)
        monkeypatch.setenv("MAG_TEST_KEY", "sk-wrong-key")
        with pytest.raises(SystemExit) as e:
            annotate.main([*argv, "--api-base", api.base, "--api-model", "m"])
        assert str(e.value).startswith("annotate: the endpoint needs an API key: the key in $MAG_TEST_KEY was "
                                       "refused (") and "sk-wrong-key" not in str(e.value)
        monkeypatch.setenv("MAG_TEST_KEY", KEY)
        with pytest.raises(SystemExit) as e:
            annotate.main([*argv, "--api-base", api.base, "--api-model", "nope"])
        assert str(e.value).startswith("annotate: the endpoint refused the request (wrong --api-model or "
                                       "--api-base?): ") and "HTTP 404" in str(e.value) and "nope" in str(e.value)
    finally:
        api.close()
    with pytest.raises(SystemExit) as e:   # the server is gone now
        annotate.main([*argv, "--api-base", api.base, "--api-model", "m"])
    assert str(e.value).startswith(f"annotate: nothing answers at --api-base: {api.base}: ")
    assert "Connection refused" in str(e.value) and "\n" not in str(e.value)
    assert open(os.path.join(d, "episodes.jsonl"), "rb").read() == before
    assert not os.path.exists(os.path.join(d, "drafts.jsonl"))


def test_export_and_audit_merge_two_annotators(data):
    annotate.main(["draft", data])
    ep = metrics.load_dataset(data)[0]
    ep_id, drafts = ep["id"], [s["guide"] for s in ep["steps"]]
    assert len(drafts) >= 1
    rec = lambda seq, who, k, decision, final=None, reason=None, **kw: {  # noqa: E731
        "episode": ep_id, "step": k, "decision": decision, "final": final, "draft": drafts[k], "reason": reason,
        "annotator": who, "time": f"2026-11-30T00:00:{seq:02d}Z", "seq": seq, **kw}
    records = [rec(1, "ada", 0, "accept", drafts[0]),
               rec(2, "ada", 0, "edit", "Click it now."),                 # ...then changed her mind
               rec(3, "ada", 0, "undo", undoes=2),                       # ...and took it back: accept stands
               rec(4, "bob", 0, "accept", drafts[0]),                    # agrees with ada on step 0
               rec(5, "ada", 0, "flag_target"),
               rec(6, "bob", 0, "reject", reason="wrong verb"),          # bob's latest: disagrees now
               rec(7, "bob", 0, "undo", undoes=6)]                       # ...no, he agrees after all
    for r in records:
        metrics.append_jsonl(os.path.join(data, "review.jsonl"), r)
    state = annotate.review_state(data, records, "ada")
    assert state[(ep_id, 0)]["decision"] == "accept" and state[(ep_id, 0)]["flagged"]
    annotate.main(["export", data])
    step = metrics.load_dataset(data)[0]["steps"][0]
    assert step["guide_status"] == "verified" and step["guide"] == drafts[0]
    assert step["guide_meta"]["annotator"] == "bob" and step["guide_meta"]["target_flagged"] is True
    others = [s["guide_status"] for e in metrics.load_dataset(data) for s in e["steps"]][1:]
    assert set(others) == {"draft"}                                      # nobody reviewed them
    report = annotate.main(["audit", data])
    assert report["doubly_reviewed"] == 1 and report["agreement"] == 1.0
    assert report["status"]["verified"] == 1 and report["target_flagged"] == [f"{ep_id}:0"]
    assert report["annotators"] == {"ada": 1, "bob": 1} and report["edit_distance_chars"] is None
    assert json.load(open(os.path.join(data, "audit.json")))["grounding_rate"] == report["grounding_rate"]
    # an edit counts its characters; a reject its reason
    metrics.append_jsonl(os.path.join(data, "review.jsonl"), rec(8, "bob", 0, "edit", drafts[0] + "!"))
    metrics.append_jsonl(os.path.join(data, "review.jsonl"), rec(9, "ada", 0, "reject", reason="too vague"))
    annotate.main(["export", data])
    report = annotate.main(["audit", data])
    assert report["edit_distance_chars"]["max"] == 1 and report["rejected_reasons"] == {"too vague": 1}
    assert report["agreement"] == 0.0 and metrics.load_dataset(data)[0]["steps"][0]["guide_status"] == "rejected"


def test_edit_distance():
    assert annotate.edit_distance("kitten", "sitting") == 3 and annotate.edit_distance("", "abc") == 3


def test_api_paraphrase_must_not_leak_the_label(expert_data, tmp_path, capsys):
    data = tmp_path / "d"
    os.makedirs(data)
    keep = [ep for ep in metrics.load_dataset(expert_data) if ep["task"] == "login-user"][:1]
    metrics.write_dataset(str(data), keep)
    annotate.main(["draft", str(data)])
    api = FakeAPI(["OK",                                                # the endpoint check
                   "Type it into the first text box at the top.",      # renamed: kept
                   "Enter the password in the Password field.",        # still says the label: template instead
                   500])                                               # the endpoint fails: stop, step not done
    argv = ["paraphrase", str(data), "--drafter", "api", "--api-model", "fake", "--api-retries", "0",
            "--api-backoff", "0"]
    try:
        with pytest.raises(SystemExit, match=r"^annotate paraphrase: stopped, the endpoint failed \(.*HTTP 500"):
            annotate.main([*argv, "--api-base", api.base])
    finally:
        api.close()
    alts = [s["guide_alt"] for s in metrics.load_dataset(data)[0]["steps"]]
    assert [(a or {}).get("paraphrase_by") for a in alts] == ["api:fake", "template", None]
    api = FakeAPI(["OK", 400])   # the rerun does the step left; a request refused (400): template instead
    try:
        annotate.main([*argv, "--api-base", api.base])
    finally:
        api.close()
    assert "paraphrase: 1 written (1 fell back to the template)" in capsys.readouterr().out
    alts = [s["guide_alt"] for s in metrics.load_dataset(data)[0]["steps"]]
    assert [a["paraphrase_by"] for a in alts] == ["api:fake", "template", "template"]
    assert alts[0]["paraphrase"] == "Type it into the first text box at the top."
    steps = metrics.load_dataset(data)[0]["steps"]
    assert all(not annotate.leaks_label(a["paraphrase"], s) for a, s in zip(alts, steps))


def one_step_episode(el, action, purpose=None, others=(), more_steps=()):
    """An episode of the given steps (one by default) on a 1280x800 screen; `el` has mark 1."""
    elements = [{"mark": 1, "tag": "button", "role": "button", "bbox": [600, 100, 680, 130], **el}, *others]
    step = {"step": 0, "url": "http://x/", "screenshot": "img/x/0.png", "elements": elements,
            "action": {"mark": 1, "point": [640, 115], "value": None, **action}, "guide": None,
            "guide_status": None, "guide_alt": None, **({"purpose": purpose} if purpose else {})}
    steps = [step] + [dict(s, step=k) for k, s in enumerate(more_steps, 1)]
    return {"id": "app.task.1", "viewport": [1280, 800], "steps": steps}


def test_template_guide_names_where_and_why():
    """A DAP guide: verb, the target by its name in bold (never the value a select shows), where it is when
    the page says (its row, its section, a landmark), why; one sentence of at most GUIDE_WORDS words."""
    owner = {"tag": "select", "role": "combobox", "text": "Owner", "value": "Quinn Tanaka", "section": "Details"}
    g, _ = metrics.template_guide(one_step_episode(owner, {"op": "select", "value": "Vera Ito"},
                                                    "to hand the ticket to Vera Ito"), 0)
    assert "**Owner** list" in g and '"Vera Ito"' in g and 'in the "Details" section' in g and "Quinn" not in g
    assert g.endswith(" to hand the ticket to Vera Ito.") and annotate.guide_problems(g, {
        "action": {"op": "select", "mark": 1}, "elements": [dict(owner, mark=1)]}) == []
    edit = {"tag": "a", "role": "link", "text": "Edit", "row": "Order #1043", "section": "Orders"}
    g, _ = metrics.template_guide(one_step_episode(edit, {"op": "click"}, "to change its status"), 0)
    assert re.fullmatch(r'\w+ \*\*Edit\*\* on the "Order #1043" row to change its status\.', g), g
    side = {"tag": "a", "role": "link", "text": "Settings", "section": "sidebar"}
    g, _ = metrics.template_guide(one_step_episode(side, {"op": "click"}, "to open the settings"), 0)
    assert "**Settings** in the sidebar to open the settings." in g
    # a popup with no title of its own (observe.js calls its section "dialog") is no quoted section name
    pick = {"tag": "div", "role": "option", "text": "Cancelled", "section": "dialog"}
    g, _ = metrics.template_guide(one_step_episode(pick, {"op": "click"}, "to filter by skips"), 0)
    assert "**Cancelled** option in the dialog to filter by skips." in g and '"dialog"' not in g
    save = {"tag": "button", "role": "button", "text": "Save", "section": "Labeling Interface *"}
    g, _ = metrics.template_guide(one_step_episode(save, {"op": "click"}, "to save the config"), 0)
    assert 'in the "Labeling Interface" section' in g   # a required field's mark is no part of its name
    # a name shared with another target and no place on the page: the screen position tells them apart
    twin = {"mark": 2, "tag": "button", "role": "button", "text": "Save", "bbox": [0, 700, 60, 730]}
    g, _ = metrics.template_guide(one_step_episode({"text": "Save"}, {"op": "click"}, "to save", [twin]), 0)
    assert "the **Save** button at the top" in g
    # a long text to type is quoted by its first words; the sentence stays within the limit, its why kept
    long = {"tag": "textarea", "role": "textbox", "text": "Comment", "section": "Reply to the customer now"}
    text = "Thanks for the report, we have replaced the broken part and tested the device twice over the weekend"
    g, _ = metrics.template_guide(one_step_episode(long, {"op": "type", "value": text}, "to answer the customer"), 0)
    assert len(g.split()) <= metrics.GUIDE_WORDS and '"Thanks for the report, we have ..."' in g
    assert g.endswith("to answer the customer.") and "**Comment**" in g
    # a scroll says which target it brings into view (the next step's)
    later = one_step_episode({"text": "Save"}, {"op": "click"}, "to save")["steps"][0]
    ep = one_step_episode({"text": "x"}, {"op": "scroll", "mark": None, "point": None, "value": "down"},
                          more_steps=[later])
    assert metrics.template_guide(ep, 0)[0].endswith("to bring the **Save** button into view.")


def test_lint_catches_each_kind_of_bad_guide(tmp_path):
    """Wrong names (a placeholder, a bare number, a select's current value, a position alone while the target
    has a name) fail the command; one sentence, the word limit and the purpose are counted."""
    qty = {"tag": "input", "role": "spinbutton", "text": "Quantity", "value": "1"}
    owner = {"tag": "select", "role": "combobox", "text": "Owner", "value": "Quinn Tanaka"}
    lock = {"tag": "button", "role": "switch", "text": "Lock"}

    def problems(guide, el, op="click"):
        return annotate.guide_problems(guide, {"action": {"op": op, "mark": 1}, "elements": [dict(el, mark=1)]})
    assert problems("Click the **---------** field to pick a status.", {"tag": "select", "text": ""}) == \
        ["placeholder"]
    assert problems('Fill in the **1** field with "2" to buy two.', qty, "type") == ["number"]
    assert problems('Select "Vera Ito" in the **Quinn Tanaka** list to reassign it.', owner, "select") == \
        ["current value"]
    # a combobox widget named by the value it shows (a select2 box, a React combobox): flagged as well,
    # by role, or by widget in observations before v1.2 (select2's box as a read-only span textbox)
    combo = {"tag": "span", "role": "combobox", "text": "Being processed", "value": "Being processed"}
    assert problems("Click the **Being processed** list to show the statuses.", combo) == ["current value"]
    old_box = {"tag": "span", "role": "textbox", "text": "Being processed"}
    assert problems("Click into the **Being processed** field to show the statuses.", old_box) == ["current value"]
    named = {"tag": "span", "role": "combobox", "text": "Status", "value": "Being processed"}
    assert problems("Click the **Status** list to show the statuses.", named) == []
    assert problems("Click the **Owner** list to see who may own it.", dict(owner, value="")) == []
    assert problems("Press the element in the middle on the right to stop edits.", lock) == ["position only"]
    assert problems("Click **Lock**. Then wait for the page to lock.", lock) == ["not one sentence"]
    assert problems("Click **Lock** " + "and then wait " * 8 + "to lock it.", lock) == ["too long"]
    assert problems("Click **Lock**.", lock) == ["no purpose"]
    assert problems("Switch to **Lock**.", lock) == ["no purpose"]       # a target after "to" is not a why
    assert problems("Click **Lock** at the top right to lock the page.", lock) == []
    assert problems('Choose "2" from the **Quantity** field to buy two.', qty, "select") == []
    # the command: counts per suite in lint.json, and a non-zero exit on a wrong name
    d = make_toy_dataset(str(tmp_path / "toy"))
    eps = metrics.load_dataset(d)
    eps[0]["steps"][0]["guide"] = "Click the button in the middle on the left to go on."
    metrics.write_dataset(d, eps)
    with pytest.raises(SystemExit, match="1 guides name their target wrongly"):
        annotate.main(["lint", d])
    report = json.load(open(os.path.join(d, "lint.json")))["toy"]
    assert report["position only"] == 1 and report["element_steps"] == 16 and report["no purpose"] == 15
    assert report["examples"]["position only"][0].startswith("toy.buttons.0:0  Click the button")
    eps[0]["steps"][0]["guide"] = "Click the **Save** button to go on."
    metrics.write_dataset(d, eps)
    assert annotate.main(["lint", d])["toy"]["position only"] == 0
    assert annotate.main(["audit", d])["lint"]["toy"]["purpose_rate"] == round(1 / 16, 4)
