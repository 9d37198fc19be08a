"""envs/webarena.py -- WebArena-format task files, run against servers the user runs elsewhere
(WebArena's Docker sites, or any site), and the WebArena evaluators, which the back office's tasks use too.

A task is WebArena's config object: task_id, intent, start_url with site placeholders (__SHOPPING__,
__GITLAB__, ...), eval.eval_types among string_match / url_match / program_html. `--sites
shopping=http://host:7770` maps __SHOPPING__; navigation stays on the mapped origins. The evaluators
follow web-arena-x/webarena's evaluation_harness/evaluators.py: answers and page contents are compared
after stripping, unquoting and lowercasing; url_match compares the path (GOLD in PRED: the reference's
path is contained in the final one; EXACT: equal) and requires each reference query value to be
present. Left out, with a clear error at load time: fuzzy_match (an LLM judge), program_html locators
and URLs that call WebArena's Python helpers ("func:..."), several start tabs (" |AND| "), localStorage
in a storage_state file (its cookies are loaded).
"""
import html
import json
import os
import re
import urllib.parse

from envs import Environment

VIEWPORT = (1280, 720)   # WebArena's own default viewport
EVAL_TYPES = {"string_match", "url_match", "program_html"}
PLACEHOLDER_RX = re.compile(r"__([A-Z][A-Z0-9_]*?)__")


def parse_sites(specs):
    """['shopping=http://127.0.0.1:7770', 'a=..,b=..'] -> {"__SHOPPING__": "http://127.0.0.1:7770", ...}."""
    sites = {}
    for spec in (s for arg in specs or [] for s in arg.split(",") if s.strip()):
        name, sep, url = spec.partition("=")
        parts = urllib.parse.urlsplit(url.strip())
        if not sep or not name.strip() or parts.scheme not in ("http", "https") or not parts.netloc:
            raise SystemExit(f"--sites {spec!r}: expected NAME=http(s)://host[:port][/path]")
        sites[f"__{name.strip().upper()}__"] = url.strip().rstrip("/")
    return sites


def origin(url):
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def clean_answer(s):
    """WebArena's normalisation of answers and references: strip, drop one pair of quotes, lowercase."""
    s = str(s).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s.lower()


def must_include(ref, got, tokenize=False):
    """ref in got after cleaning; a lone one-character reference ("4") must be a whole token, so "14"
    does not contain it (WebArena tokenizes with nltk's word_tokenize; a regex word split stands in
    for it here, so no nltk dependency)."""
    ref, got = clean_answer(ref), clean_answer(got)
    if tokenize and len(ref) == 1:
        return ref in re.findall(r"\w+(?:[.'-]\w+)*|[^\w\s]", got)
    return ref in got


def url_match(got, refs, rule="GOLD in PRED"):
    """Any of the ` |OR| `-separated reference URLs: its path by the rule (GOLD in PRED: contained in the
    final URL's; EXACT: equal), and every reference query value present in the final URL's query."""
    got_parts = urllib.parse.urlsplit(got.strip().rstrip("/"))
    got_query = urllib.parse.parse_qs(got_parts.query)
    for ref in refs.split(" |OR| "):
        ref_parts = urllib.parse.urlsplit(ref.strip().rstrip("/"))
        ref_base, got_base = ref_parts.netloc + ref_parts.path, got_parts.netloc + got_parts.path
        path_ok = ref_base == got_base if rule == "EXACT" else ref_base in got_base
        ref_query = urllib.parse.parse_qs(ref_parts.query)
        query_ok = all(set(v) <= set(got_query.get(k, [])) for k, v in ref_query.items())
        if path_ok and query_ok:
            return True
    return False


def string_match(refs, answer):
    """The stop() answer against reference_answers (exact_match and/or must_include); no answer fails."""
    got, ok = answer or "", True
    if "exact_match" in refs:
        ok &= clean_answer(refs["exact_match"]) == clean_answer(got)
    if "must_include" in refs:
        items = refs["must_include"]
        ok &= all(must_include(r, got, tokenize=len(items) == 1) for r in items)
    return bool(ok) and answer is not None


async def page_content(page, target):
    """The text a program_html target checks: its locator's value on its page (html-unescaped)."""
    if target["url"] != "last":
        await page.goto(target["url"], wait_until="load")
    locator = target.get("locator") or ""
    if not locator.strip():
        content = await page.content()   # WebArena: an empty locator means the whole page's HTML
    else:
        from playwright.async_api import Error as PlaywrightError
        try:
            content = await page.evaluate(f"() => {locator}")
        except PlaywrightError:   # the element is not on this page (querySelector gave null): nothing found
            content = ""
    return html.unescape("" if content is None else str(content))


async def program_html(page, targets):
    """Every target's required contents (exact_match, or each must_include with ` |OR| ` alternatives)."""
    ok = True
    for target in targets:
        content = clean_answer(await page_content(page, target))
        req = target["required_contents"]
        if "exact_match" in req:
            ok &= clean_answer(req["exact_match"]) == content
        for item in req.get("must_include", []):
            ok &= any(clean_answer(alt) in content for alt in item.split(" |OR| "))
    return bool(ok)


async def evaluate_config(ev, page, answer):
    """Every eval type of one task's `eval` (placeholders already filled) -> list of (type, passed)."""
    results = []
    for kind in ev["eval_types"]:
        if kind == "string_match":
            results.append((kind, string_match(ev["reference_answers"], answer)))
        elif kind == "url_match":
            results.append((kind, url_match(page.url, ev["reference_url"], ev.get("url_note") or "GOLD in PRED")))
        else:
            results.append((kind, await program_html(page, ev["program_html"])))
    return results


def fill_sites(x, sites, where):
    """Replace the site placeholders in every string of x; an unmapped one is an error naming where."""
    if isinstance(x, dict):
        return {k: fill_sites(v, sites, f"{where}.{k}") for k, v in x.items()}
    if isinstance(x, list):
        return [fill_sites(v, sites, f"{where}[{i}]") for i, v in enumerate(x)]
    if not isinstance(x, str):
        return x
    for name in PLACEHOLDER_RX.findall(x):
        key = f"__{name}__"
        if key not in sites:
            raise SystemExit(f"{where}: site placeholder {key} has no mapping: pass --sites {name.lower()}=URL "
                             f"(mapped: {', '.join(sorted(sites)) or 'none'})")
        x = x.replace(key, sites[key])
    return x


def validate_task(t, where):
    """The config fields this suite reads, each checked; an unsupported feature is named."""
    def need(cond, msg):
        if not cond:
            raise SystemExit(f"{where}: {msg}")
    need(isinstance(t, dict), "a task must be a JSON object")
    for field, typ in (("task_id", (int, str)), ("intent", str), ("start_url", str), ("eval", dict)):
        need(isinstance(t.get(field), typ), f"missing or invalid field {field!r}")
    need(" |AND| " not in t["start_url"], "several start tabs (' |AND| ' in start_url) are not supported")
    ev = t["eval"]
    types = ev.get("eval_types")
    need(isinstance(types, list) and types, "eval.eval_types must be a non-empty list")
    need(set(types) <= EVAL_TYPES, f"unknown eval type(s) {sorted(set(types) - EVAL_TYPES)}; "
         f"supported: {sorted(EVAL_TYPES)}")
    if "string_match" in types:
        refs = ev.get("reference_answers")
        need(isinstance(refs, dict) and refs, "string_match needs eval.reference_answers")
        need("fuzzy_match" not in refs, "reference_answers.fuzzy_match needs WebArena's LLM judge: not supported "
             "(rewrite it as exact_match or must_include)")
        unknown = sorted(set(refs) - {"exact_match", "must_include"})
        need(not unknown, f"unknown reference_answers key(s) {unknown}")
        need(isinstance(refs.get("must_include", []), list), "reference_answers.must_include must be a list")
    if "url_match" in types:
        need(isinstance(ev.get("reference_url"), str) and ev["reference_url"], "url_match needs eval.reference_url")
        need((ev.get("url_note") or "GOLD in PRED") in ("GOLD in PRED", "EXACT"),
             f"url_note {ev.get('url_note')!r}: supported are 'GOLD in PRED' and 'EXACT'")
    if "program_html" in types:
        targets = ev.get("program_html")
        need(isinstance(targets, list) and targets, "program_html needs a non-empty eval.program_html list")
        for i, target in enumerate(targets):
            need(isinstance(target, dict) and isinstance(target.get("url"), str),
                 f"program_html[{i}] needs a url ('last' or a URL)")
            need(not target["url"].startswith("func:") and not (target.get("locator") or "").startswith("func:"),
                 f"program_html[{i}]: 'func:' helpers call WebArena's Python code: not supported")
            need(not target.get("prep_actions"), f"program_html[{i}]: prep_actions are not supported")
            req = target.get("required_contents")
            need(isinstance(req, dict) and req and set(req) <= {"exact_match", "must_include"},
                 f"program_html[{i}].required_contents needs exact_match and/or must_include")


def load_tasks(path, sites):
    """task_id -> task (placeholders filled, checked), from a file holding a list or one object."""
    if not path:
        raise SystemExit("--suite webarena needs --task-file (WebArena config JSON: a list of tasks or one task)")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise SystemExit(f"--task-file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"--task-file {path}: not valid JSON: {e}") from None
    tasks = {}
    for i, t in enumerate(data if isinstance(data, list) else [data]):
        named = isinstance(t, dict) and "task_id" in t
        where = f"{path}: task #{i}" + (f" (task_id {t.get('task_id')})" if named else "")
        validate_task(t, where)
        name = str(t["task_id"])
        if name in tasks:
            raise SystemExit(f"{where}: task_id {name} appears twice")
        t = fill_sites(t, sites, where)
        urls = [t["start_url"]] + [p["url"] for p in t["eval"].get("program_html", []) if p["url"] != "last"]
        outside = [u for u in urls if origin(u) not in {origin(s) for s in sites.values()}]
        if outside:
            raise SystemExit(f"{where}: {outside[0]} is on none of the --sites origins "
                             "(navigation is allowed only there)")
        if t.get("require_login") or t.get("storage_state"):
            t["storage_state"] = resolve_storage_state(t, os.path.dirname(os.path.abspath(path)), where)
        tasks[name] = t
    return tasks


def resolve_storage_state(t, base, where):
    """The cookies a logged-in task starts with: WebArena's storage_state file (auto_login.py writes them)."""
    state = t.get("storage_state")
    if not state:
        raise SystemExit(f"{where}: require_login is set but there is no storage_state file to log in with")
    path = state if os.path.isabs(state) else os.path.join(base, state)
    if not os.path.exists(path):
        raise SystemExit(f"{where}: storage_state {state!r} not found (looked at {path}); "
                         "make it with WebArena's browser_env/auto_login.py against your servers")
    with open(path) as f:
        return json.load(f).get("cookies", [])


class WebArena(Environment):
    """The tasks of one file on the --sites servers. No experts: random, human and model policies."""
    suite = "webarena"
    viewport, scale = VIEWPORT, 1

    def __init__(self, task_file, site_specs):
        self.sites = parse_sites(site_specs)
        if not self.sites:
            raise SystemExit("--suite webarena needs --sites NAME=URL for each site its tasks use "
                             "(e.g. shopping=http://host:7770)")
        self.tasks = load_tasks(task_file, self.sites)
        self.origins = sorted({origin(u) for u in self.sites.values()})

    def url(self, task):
        return self.tasks[task]["start_url"]

    def public_url(self, url):
        """Each site's address back to its placeholder, the longest first (one may prefix another)."""
        for key, base in sorted(self.sites.items(), key=lambda kv: -len(kv[1])):
            url = url.replace(base, key)
        return url

    def has_task(self, task):
        return task in self.tasks

    def all_tasks(self):
        return list(self.tasks)   # the file's order

    async def reset(self, page, task, seed):
        """No cookies but the task's storage_state ones, then the start page. The seed changes nothing:
        the sites' data is whatever the user's servers hold (WebArena resets them with its own scripts)."""
        t = self.tasks[task]
        await page.context.clear_cookies()
        if t.get("storage_state"):
            await page.context.add_cookies(t["storage_state"])
        await page.goto(t["start_url"], wait_until="load")
        return t["intent"], None

    async def evaluate(self, page, task, params, answer):
        passed = await evaluate_config(self.tasks[task]["eval"], page, answer)
        ok = all(p for _, p in passed)
        return float(ok), ok
