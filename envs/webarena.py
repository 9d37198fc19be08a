"""envs/webarena.py -- WebArena-format task files, run against servers the user runs elsewhere
(WebArena's Docker sites, or any site), and the WebArena evaluators, which the back office's tasks use too.

A task is WebArena's config object: task_id, intent, start_url with site placeholders (__SHOPPING__,
__GITLAB__, ...), eval.eval_types among string_match / url_match / program_html. `--sites
shopping=http://host:7770` maps __SHOPPING__; navigation stays on the mapped origins. Each task of a
file is accepted or refused on its own, with its reason; a run skips the refused ones (one summary
line), and `--check` prints the table of runnable / refused tasks by reason without a browser:

    python -m envs.webarena --check --task-file test.raw.json --sites shopping=http://host:7770,...
    python collect.py --suite webarena --check --task-file test.raw.json --sites ...   (the same)

The evaluators follow web-arena-x/webarena's evaluation_harness/evaluators.py, case by case (the tests
hold the cases): answers are cleaned (stripped, one pair of quotes dropped, lowercased) when read AND
again inside exact_match / must_include; a one-character must_include reference must be a whole word
token; url_match takes the path of any ` |OR| ` alternative and the query keys of all of them together.
A login is WebArena's storage_state file, resolved from the working directory (or --auth-dir) and
loaded by Playwright (cookies and localStorage). The program_html "func:" helpers that need only a URL or
the page run (reddit_get_post_url, gitlab_get_project_memeber_role). fuzzy_match asks an LLM judge (any
OpenAI-compatible endpoint: --judge-api-base, --judge-model, the key from $OPENAI_API_KEY or --judge-key-env);
without one those tasks are refused, except fuzzy_match "N/A", where an exact "N/A" passes without asking
(WebArena tries it first; another answer, which WebArena's judge may accept, fails: a lower bound). The
shopping helpers (shopping_get_latest_order_url, the latest review's author and rating) read the store's
admin REST API with --shopping-admin USER:PASSWORD; without it their tasks are refused. A target's
prep_actions run before its locator, as in WebArena. Several start tabs (" |AND| ") open as tabs, the first
focused; the suite allows tabs (`tabs`): new_tab(), tab_focus(K), close_tab() join its grammar, and each step
records the open tabs, which the prompt lists.

WebArena-Verified's task files (webarena-verified.json, the hard subset's file) load the same way, told apart
per task by their fields (start_urls, a list of evaluators); the login follows from `sites` (the file WebArena's
auto_login.py writes for them). The answer is a JSON object in stop(); each episode's network is recorded as a
HAR file; the package `webarena-verified` itself judges both, in its own venv (`make verified`), called as a
subprocess (envs/verified_judge.py), handed only the tasks the loader accepted; a task that is one of the package's
own (the hard subset's file holds them with other expected answers) is judged as the package's full dataset holds
it. Refused: a task the package cannot read, and every Verified task while the judge's venv is missing; `--check`
also names the tasks the package cannot judge (699, 700, 811 in 1.2.3). A finished run (its episodes whose judging
errored too) is judged again without a browser:

    python -m envs.webarena score --task-file webarena-verified.json --run data/verified
"""
import argparse
import ast
import asyncio
import collections
import functools
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

import metrics
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


# ----------------------------------------------------------------------------------------------
# The evaluators: WebArena's semantics, including its quirks (an agent scored here scores the same there).

def clean_answer(s):
    """WebArena's clean_answer: strip, drop one pair of matching quotes (a lone '"' is such a pair: it
    cleans to ""), lowercase. Not stripped again after unquoting: WebArena cleans an answer twice."""
    s = str(s).strip()
    if s[:1] in ("'", '"') and s.endswith(s[:1]):
        s = s[1:-1]
    return s.lower()


# nltk.word_tokenize (Punkt sentences, then the Treebank rules) as far as a one-character reference can
# tell: nltk is not a dependency and its Punkt data would be a download. Kept whole as nltk keeps them:
# 6/5, x=6, -6, +6, 6.5; "," and ":" split off unless a digit follows (6,000 and 6:30 stay whole);
# brackets, quotes, ;@#$%&?!* and "--" split off; a period splits off at the end and before a space
# (a sentence end) unless it follows a number or a single letter (Punkt's ordinal and initial rule);
# 's 'm 'd n't split off. Residual difference: Punkt's abbreviation list ("dr. x" keeps "dr.").
TOKEN_RULES = [
    (re.compile(r'(^|(?<=[\s(\[{<]))"'), " `` "), (re.compile(r'"'), " '' "),
    (re.compile(r"[:,](?!\d)"), r" \g<0> "),
    (re.compile(r"\.{2,}|--|[;@#$%&?!*\[\](){}<>]"), r" \g<0> "),
    (re.compile(r"(?<=[^.])\.(?=[\])}>']*\s*$)"), " . "),   # the text's last period
    (re.compile(r"(?<![.\s\d])(?<!(?<!\S)[^\W\d])\.(?=[\])}>']*\s)"), " . "),   # a sentence's last
    (re.compile(r"(?<=\w)('[smd]|n't)(?=\s|$)"), r" \g<1> "),
]


def word_tokens(text):
    for rx, repl in TOKEN_RULES:
        text = rx.sub(repl, text)
    return text.split()


def exact_match(ref, pred):
    return clean_answer(ref) == clean_answer(pred)


def must_include(ref, pred, tokenize=False):
    """ref in pred after cleaning both; with tokenize, a one-character reference ("4") must be a whole
    word token, so "14" and "6/5" do not contain it (WebArena: nltk's word_tokenize, see word_tokens)."""
    ref, pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(ref) == 1:
        return ref in word_tokens(pred)
    return ref in pred


def string_match(refs, answer, intent=None, note=None, judge=None):
    """The stop() answer against reference_answers, WebArena's way: the kinds in the file's order, the score
    their product. exact_match; must_include (a one-character reference is a token when it is the only one);
    fuzzy_match "N/A": an exact "N/A" first, and if the score so far is not 1 it is REPLACED by the judge's
    verdict on whether the answer's reason is the task's (`note`, eval.string_note; without a judge: failed);
    fuzzy_match [refs]: the judge must call the answer correct for each (load refuses these without one).
    No answer at all fails."""
    if answer is None:
        return False
    pred, ok = clean_answer(answer), True   # WebArena cleans the answer as it reads it, then again per check
    for kind, value in refs.items():
        if kind == "exact_match":
            ok &= exact_match(value, pred)
        elif kind == "must_include":
            ok &= all(must_include(r, pred, tokenize=len(value) == 1) for r in value)
        elif value == "N/A":
            ok &= exact_match("N/A", pred)
            if not ok:
                ok = bool(judge) and judge.unachievable(intent, note, pred)
        else:   # the judge is asked only while the score can still be 1 (WebArena asks anyway: the same product)
            ok = ok and all(judge.fuzzy(intent, r, pred) for r in value)
    return bool(ok)


def url_parts(url):
    """netloc+path and the query of a URL, stripped of whitespace and trailing slashes."""
    parts = urllib.parse.urlsplit(url.strip().rstrip("/"))
    return parts.netloc + parts.path, urllib.parse.parse_qs(parts.query)


def url_match(got, refs, rule="GOLD in PRED"):
    """WebArena's url_match: the path of ANY ` |OR| ` alternative (GOLD in PRED: contained in the final URL's
    path; EXACT, an extension: equal), and the query keys of ALL alternatives together, each with one of
    the values the alternatives give it."""
    got_base, got_query = url_parts(got)
    ref_bases, ref_query = [], collections.defaultdict(set)
    for ref in refs.split(" |OR| "):
        base, query = url_parts(ref)
        ref_bases.append(base)
        for k, values in query.items():
            ref_query[k].update(values)
    path_ok = any(b == got_base if rule == "EXACT" else b in got_base for b in ref_bases)
    return path_ok and all(set(values) & set(got_query.get(k, [])) for k, values in ref_query.items())


async def page_content(page, target, store=None):
    """The text a program_html target checks: its locator's value on its page, as WebArena reads it
    (str() of the value, so a null is "None"; a failing locator is ""; html-unescaped). A `func:` url or
    locator calls one of the helpers below (URL_HELPERS, LOCATOR_HELPERS); `__last_url__` is the page's
    URL when the target is checked, `__page__` the page. A helper of the Store reads the store's REST API
    (blocking: in a thread)."""
    url = target["url"]
    call = parse_func(url)
    if call:
        name, args = call
        args = [a.replace("__last_url__", page.url) for a in args]
        url = await asyncio.to_thread(URL_HELPERS[name], store, *args) if name in STORE_HELPERS else \
            URL_HELPERS[name](*args)
    if url != "last":
        await page.goto(url, wait_until="load")
    locator = target.get("locator") or ""
    call = parse_func(locator)
    if call:
        name, args = call
        content = await asyncio.to_thread(LOCATOR_HELPERS[name], store, *args) if name in STORE_HELPERS else \
            await LOCATOR_HELPERS[name](*(page if a is PAGE else a for a in args))
    elif not locator.strip():
        content = await page.content()   # WebArena: an empty locator means the whole page's HTML
    else:
        from playwright.async_api import Error as PlaywrightError
        try:   # WebArena's prep_actions first (a click that unfolds a section); the first to fail ends them
            for action in target.get("prep_actions") or []:
                await page.evaluate(f"() => {action}")
        except PlaywrightError:
            pass
        try:
            content = await page.evaluate(f"() => {locator}")
            content = "None" if content is None else str(content)
        except PlaywrightError:   # the element is not on this page (a property of null): nothing found
            content = ""
    return html.unescape(content)


async def program_html(page, targets, store=None):
    """Every target's required contents: exact_match, else each must_include (` |OR| ` alternatives)."""
    ok = True
    for target in targets:
        content, req = await page_content(page, target, store), target["required_contents"]
        if "exact_match" in req:   # WebArena reads must_include only when there is no exact_match
            ok &= exact_match(req["exact_match"], content)
        else:
            ok &= all(any(must_include(alt, content) for alt in item.split(" |OR| ")) for item in req["must_include"])
    return bool(ok)


async def evaluate_config(ev, page, answer, intent=None, judge=None, store=None):
    """Every eval type of one task's `eval` (placeholders already filled) -> list of (type, passed). `intent`
    and `judge` are for fuzzy_match (the judge's calls block: they run in a thread); `store`, a Store, for the
    shopping helpers."""
    results = []
    for kind in ev["eval_types"]:
        if kind == "string_match":
            args = ev["reference_answers"], answer, intent, ev.get("string_note"), judge
            results.append((kind, await asyncio.to_thread(string_match, *args) if judge else string_match(*args)))
        elif kind == "url_match":
            results.append((kind, url_match(page.url, ev["reference_url"], ev.get("url_note") or "GOLD in PRED")))
        else:
            results.append((kind, await program_html(page, ev["program_html"], store)))
    return results


# ----------------------------------------------------------------------------------------------
# The LLM judge of fuzzy_match: WebArena's llm_fuzzy_match and llm_ua_match, re-implemented from their
# semantics (the prompts are this project's wording of the same request), sent to any OpenAI-compatible
# endpoint through metrics.chat_completion (retries with backoff, redirects refused, the key redacted).

FUZZY_PROMPT = """Grade a student's answer to a question against the reference answer. The student may phrase it \
differently; what counts is whether it means the same as the reference.
The string 'N/A' here is a special value meaning 'not achievable'.
question: {question}
reference answer: {reference}
student answer: {pred}
End your judgement with one of: correct, incorrect, partially correct."""

UA_PROMPT = """task: {question}
actual unachievable reason: {reference}
reported unachievable reason: {pred}
The task above cannot be done, for the actual reason given. Someone tried it, failed, and reported the reason \
above. Does the reported reason agree with the actual one, even if only implicitly? If it does, answer 'same'; \
otherwise answer 'different'."""


def fuzzy_verdict(reply):
    """WebArena's reading of a fuzzy_match reply, lowercased: "partially correct" or "incorrect" anywhere fails
    (checked first: both contain "correct"), else "correct" passes; None: the reply holds no verdict."""
    reply = reply.lower()
    if "partially correct" in reply or "incorrect" in reply:
        return False
    return True if "correct" in reply else None


def ua_verdict(reply):
    """The unachievable-reason reply: "different" anywhere fails, else "same" passes; None: no verdict."""
    reply = reply.lower()
    if "different" in reply:
        return False
    return True if "same" in reply else None


class JudgeError(RuntimeError):
    """The judge gave no verdict: the episode is recorded with this error, not scored."""


class Judge:
    """--judge-api-base, --judge-model, the key from --judge-key-env. WebArena used gpt-4-1106-preview at
    temperature 0 with 768 tokens; a reply without a verdict is asked again, `retries` times, then an error."""

    def __init__(self, base, model, key=None, timeout=60.0, retries=3, backoff=1.0):
        self.base, self.model, self.key = base, model, key
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        # the longest one verdict can take: every ask with every transport retry and its backoff
        self.worst_s = (retries + 1) * (timeout * (retries + 1) + backoff * 2 ** retries)

    def ask(self, template, read, **fields):
        messages = [{"role": "system", "content": "You are a helpful assistant"},
                    {"role": "user", "content": template.format(**fields)}]
        for _ in range(self.retries + 1):
            reply = metrics.chat_completion(self.base, self.model, messages, self.key, self.timeout, self.retries,
                                            self.backoff, max_tokens=768)
            verdict = read(reply)
            if verdict is not None:
                return verdict
        raise JudgeError(f"the judge ({self.model} at {self.base}) gave no verdict in {self.retries + 1} replies; "
                         f"the last: {metrics.redact(reply, self.key, 200)!r}")

    def fuzzy(self, question, reference, pred):
        return self.ask(FUZZY_PROMPT, fuzzy_verdict, question=question, reference=reference, pred=pred)

    def unachievable(self, question, reason, pred):
        return self.ask(UA_PROMPT, ua_verdict, question=question, reference=reason, pred=pred)


def judge_calls(t):
    """How many verdicts a task's string_match may ask the judge for."""
    fuzzy = (t["eval"].get("reference_answers") or {}).get("fuzzy_match")
    return 0 if fuzzy is None else 1 if fuzzy == "N/A" else len(fuzzy)


def store_calls(t):
    """How many Store helpers a task's program_html calls."""
    return sum(func_name(target.get(k)) in STORE_HELPERS for target in t["eval"].get("program_html") or []
               for k in ("url", "locator"))


# ----------------------------------------------------------------------------------------------
# The `func:` helpers of WebArena's evaluation_harness/helper_functions.py, re-implemented from their
# semantics: those that need only a URL or the page, and the shopping ones, which read the store's
# admin REST API (a Store: --shopping-admin USER:PASSWORD; without it their tasks are refused).

PAGE = object()   # the `__page__` argument


def reddit_get_post_url(url):
    """A Postmill URL -> its post's canonical URL: scheme://host/f/<forum>/<id>/ (the slug, a comment's path,
    the query and fragment dropped). Any URL whose path is not /f/<forum>/<id>... comes back unchanged,
    as in WebArena: fewer than three path segments, or a first one other than "f" (so a site mapped under
    a path prefix never matches). WebArena's quirk kept: /f/<forum>/ (an empty id) gives /f/<forum>//."""
    parts = urllib.parse.urlparse(url)
    segments = parts.path.split("/")
    if len(segments) < 4 or segments[1] != "f":
        return url
    return f"{parts.scheme}://{parts.netloc}/f/{segments[2]}/{segments[3]}/"


MEMBER_ROLE_JS = """account => {
    const names = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
    const role = document.querySelectorAll("td.col-max-role span")[names.findIndex(e => e.outerText === "@" + account)];
    return role ? role.outerText : "";
}"""


async def gitlab_get_project_memeber_role(page, account):   # WebArena's spelling: the task files call it so
    """The role shown for @account on a GitLab project's members page: the index of the first account cell
    whose text is exactly "@account", then the text of the page's role span at that index (WebArena pairs
    the two lists by position); "" when the account is not listed or the page has no such table."""
    from playwright.async_api import Error as PlaywrightError
    try:
        return await page.evaluate(MEMBER_ROLE_JS, account)
    except PlaywrightError:
        return ""


class StoreError(RuntimeError):
    """The store's REST API did not answer as WebArena's helper expects: the episode's error, not a score."""


class Store:
    """The store's Magento 2 REST API with an admin account, as WebArena's shopping helpers read it: a fresh
    admin token per helper call (POST /rest/default/V1/integration/admin/token), then one GET. The base is
    the --sites shopping URL; WebArena's Docker store's account is admin / admin1234. Redirects are refused,
    not followed (the password or the token would go with them), and the password is in no error."""

    def __init__(self, base, user, password, timeout=30.0):
        self.base, self.user, self.password, self.timeout = base.rstrip("/"), user, password, timeout

    def call(self, method, path, body=None, token=None, query=None):
        import urllib.error
        import urllib.request

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args):
                return None   # urllib then raises the 3xx as an HTTPError
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        data = json.dumps(body).encode() if body is not None else None
        try:
            with urllib.request.build_opener(NoRedirect).open(
                    urllib.request.Request(url, data, headers, method=method), timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            detail = metrics.redact(e.read(2000).decode("utf-8", "replace"), self.password, 200)
            raise StoreError(f"{method} {self.base}{path}: HTTP {e.code} {detail}".rstrip()) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise StoreError(f"{method} {self.base}{path}: {getattr(e, 'reason', e)}") from None

    def token(self):
        token = self.call("POST", "/rest/default/V1/integration/admin/token",
                          {"username": self.user, "password": self.password})
        if not isinstance(token, str):
            raise StoreError(f"POST {self.base}/rest/default/V1/integration/admin/token: no token in the reply")
        return token

    def latest_order_url(self):
        """shopping_get_latest_order_url(): the newest order (created_at, descending, one) -> the storefront's
        page of it, /sales/order/view/order_id/<int(increment_id)>/ (WebArena uses the increment id there)."""
        reply = self.call("GET", "/rest/V1/orders", token=self.token(), query={
            "searchCriteria[sortOrders][0][field]": "created_at", "searchCriteria[sortOrders][0][direction]": "DESC",
            "searchCriteria[pageSize]": "1"})
        try:
            return f"{self.base}/sales/order/view/order_id/{int(reply['items'][0]['increment_id'])}/"
        except (TypeError, KeyError, IndexError, ValueError):
            raise StoreError(f"GET {self.base}/rest/V1/orders: no order with a numeric increment_id in the reply") \
                from None

    def reviews(self, sku):
        reply = self.call("GET", f"/rest/V1/products/{urllib.parse.quote(sku, safe='')}/reviews", token=self.token())
        if not isinstance(reply, list):
            raise StoreError(f"GET {self.base}/rest/V1/products/{sku}/reviews: not a list of reviews")
        return reply

    def latest_review_author(self, sku):
        """shopping_get_sku_latest_review_author(sku): the nickname of the LAST review the API lists ("" if none)."""
        reviews = self.reviews(sku)
        return str(reviews[-1]["nickname"]) if reviews else ""

    def latest_review_rating(self, sku):
        """shopping_get_sku_latest_review_rating(sku): the last review's first rating's percent, as text ("" if
        no review); WebArena requires the first review's first rating to be the one named "Rating"."""
        reviews = self.reviews(sku)
        if not reviews:
            return ""
        try:
            if reviews[0]["ratings"][0]["rating_name"] != "Rating":
                raise StoreError(f"{sku}: the first review's first rating is not the one named 'Rating'")
            return str(reviews[-1]["ratings"][0]["percent"])
        except (TypeError, KeyError, IndexError):
            raise StoreError(f"GET {self.base}/rest/V1/products/{sku}/reviews: a review without ratings") from None


URL_HELPERS = {"reddit_get_post_url": reddit_get_post_url,   # -> a URL, in a program_html target's url
               "shopping_get_latest_order_url": Store.latest_order_url}
LOCATOR_HELPERS = {"gitlab_get_project_memeber_role": gitlab_get_project_memeber_role,   # -> the text checked
                   "shopping_get_sku_latest_review_author": Store.latest_review_author,
                   "shopping_get_sku_latest_review_rating": Store.latest_review_rating}
STORE_HELPERS = {"shopping_get_latest_order_url", "shopping_get_sku_latest_review_author",
                 "shopping_get_sku_latest_review_rating"}   # called with the Store first, in a thread
SIGNATURES = {"reddit_get_post_url": (str,), "gitlab_get_project_memeber_role": (PAGE, str),
              "shopping_get_latest_order_url": (), "shopping_get_sku_latest_review_author": (str,),
              "shopping_get_sku_latest_review_rating": (str,)}


def parse_func(s):
    """'func:name(args)' -> (name, args): each argument a string, or PAGE for `__page__`; None when s is not
    a func: call. A call this suite cannot make (unknown helper, other arguments) raises Refused."""
    name = func_name(s)
    if not name:
        return None
    try:
        call = ast.parse(s.split("func:", 1)[1].strip(), mode="eval").body
    except SyntaxError:
        call = None
    ok = isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords
    args = [PAGE if isinstance(a, ast.Name) and a.id == "__page__" else
            a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
            for a in (call.args if ok else [])]
    need(ok, f"'func:{name}' is not a call this suite can read: {s.strip()!r}")
    need(name in SIGNATURES, f"'func:{name}' calls WebArena's Python code: not supported")
    need(tuple(PAGE if a is PAGE else type(a) for a in args) == SIGNATURES[name],
         f"'func:{name}' takes " + ", ".join("__page__" if a is PAGE else "a string" for a in SIGNATURES[name]))
    return name, args


# ----------------------------------------------------------------------------------------------
# Loading: every task accepted or refused on its own, with the reason.

class Refused(Exception):
    """A task this suite cannot run; the message is the reason, the same for every task it applies to."""


def need(cond, reason):
    if not cond:
        raise Refused(reason)


def fill_sites(x, sites, where=None):
    """Replace the site placeholders in every string of x; an unmapped one refuses the task (the reason
    starts with `where` when a caller names its config: the back office's tasks)."""
    if isinstance(x, dict):
        return {k: fill_sites(v, sites, where) for k, v in x.items()}
    if isinstance(x, list):
        return [fill_sites(v, sites, where) for v in x]
    if not isinstance(x, str):
        return x
    for name in PLACEHOLDER_RX.findall(x):
        key = f"__{name}__"
        need(key in sites, (f"{where}: " if where else "") + f"site placeholder {key} has no mapping: "
             f"pass --sites {name.lower()}=URL")
        x = x.replace(key, sites[key])
    return x


def func_name(s):
    m = re.match(r"\s*func:\s*(\w+)", s or "")
    return m and m.group(1)


def validate_task(t, judge=None, store=None):
    """The config fields this suite reads, each checked; an unsupported feature is named."""
    need(isinstance(t, dict), "a task must be a JSON object")
    for field, typ in (("task_id", (int, str)), ("intent", str), ("start_url", str), ("eval", dict)):
        need(isinstance(t.get(field), typ), f"missing or invalid field {field!r}")
    ev = t["eval"]
    types = ev.get("eval_types")
    need(isinstance(types, list) and types, "eval.eval_types must be a non-empty list")
    need(set(types) <= EVAL_TYPES, f"unknown eval type(s) {sorted(set(types) - EVAL_TYPES)}; "
         f"supported: {sorted(EVAL_TYPES)}")
    if "string_match" in types:
        refs = ev.get("reference_answers")
        need(isinstance(refs, dict) and refs, "string_match needs eval.reference_answers")
        fuzzy = refs.get("fuzzy_match", "N/A")
        need(fuzzy == "N/A" or isinstance(fuzzy, list) and fuzzy and all(isinstance(r, str) for r in fuzzy),
             "reference_answers.fuzzy_match must be \"N/A\" or a non-empty list of strings")
        need(fuzzy == "N/A" or judge, "reference_answers.fuzzy_match needs WebArena's LLM judge (not configured: "
             "--judge-api-base, --judge-model)")
        need(fuzzy != "N/A" or "fuzzy_match" not in refs or not judge or isinstance(ev.get("string_note"), str),
             "fuzzy_match \"N/A\" needs eval.string_note (the reason the judge compares an answer's with)")
        unknown = sorted(set(refs) - {"exact_match", "must_include", "fuzzy_match"})
        need(not unknown, f"unknown reference_answers key(s) {unknown}")
        need(isinstance(refs.get("must_include", []), list), "reference_answers.must_include must be a list")
    if "url_match" in types:
        need(isinstance(ev.get("reference_url"), str) and ev["reference_url"], "url_match needs eval.reference_url")
        need(not func_name(ev["reference_url"]), f"'func:{func_name(ev['reference_url'])}' in reference_url "
             "calls WebArena's Python code: not supported")
        need((ev.get("url_note") or "GOLD in PRED") in ("GOLD in PRED", "EXACT"),
             f"url_note {ev.get('url_note')!r}: supported are 'GOLD in PRED' and 'EXACT'")
    if "program_html" in types:
        targets = ev.get("program_html")
        need(isinstance(targets, list) and targets, "program_html needs a non-empty eval.program_html list")
        for target in targets:
            need(isinstance(target, dict) and isinstance(target.get("url"), str),
                 "program_html: a target needs a url ('last' or a URL)")
            for where, helpers in (("url", URL_HELPERS), ("locator", LOCATOR_HELPERS)):
                try:
                    call = parse_func(target.get(where))
                except Refused as e:
                    raise Refused(f"program_html: {e}") from None
                need(not call or call[0] in helpers, f"program_html: 'func:{call and call[0]}' is not a {where} helper")
                need(not call or call[0] not in STORE_HELPERS or store, f"program_html: 'func:{call and call[0]}' "
                     "reads the store's admin REST API: pass --shopping-admin USER:PASSWORD")
            prep = target.get("prep_actions") or []
            need(isinstance(prep, list) and all(isinstance(a, str) for a in prep),
                 "program_html: prep_actions must be a list of JavaScript expressions")
            req = target.get("required_contents")
            need(isinstance(req, dict) and req and set(req) <= {"exact_match", "must_include"},
                 "program_html: required_contents needs exact_match and/or must_include")


def resolve_storage_state(t, auth_dir):
    """The login a task starts with: WebArena's storage_state file (auto_login.py writes it), relative to
    the working directory like WebArena (or to --auth-dir); None: the task runs without login."""
    state = t.get("storage_state")
    if not state:   # require_login with no file (WebArena's map and wikipedia tasks): no login needed
        return None
    path = state if os.path.isabs(state) else os.path.join(auth_dir or os.getcwd(), state)
    need(os.path.exists(path), f"storage_state {state!r} not found (looked at {os.path.abspath(path)}); make it "
         "with WebArena's browser_env/auto_login.py against your servers, or pass --auth-dir")
    read_login(os.path.abspath(path))
    return os.path.abspath(path)


@functools.lru_cache(maxsize=None)
def read_login(path):
    """A storage_state file's cookies (Playwright's format, {"cookies": [...], "origins": [...]}); Refused when it is
    not one: an empty or broken file passes for a login until every episode fails with 'Error reading storage
    state'."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        raise Refused(f"login file {path} is not a storage_state JSON ({e}): make it again with auto_login.py") \
            from None
    need(isinstance(state, dict) and isinstance(state.get("cookies", []), list),
         f"login file {path} is not a storage_state (an object with a list of cookies)")
    return tuple(c.get("domain", "").lstrip(".") for c in state.get("cookies", []) if isinstance(c, dict))


def login_warnings(tasks, sites):
    """The logins that hold no cookie for a site they are for (a task then starts logged out), one line each."""
    missing = {}
    for t in tasks.values():
        if not t.get("storage_state"):
            continue
        named = [(s, sites.get(f"__{s.upper()}__", "")) for s in t["sites"] if s in LOGIN_SITES] \
            if t.get("verified") else [(origin(t["start_url"]), t["start_url"])]
        for site, url in named:
            host = urllib.parse.urlsplit(url).hostname or ""
            domains = read_login(t["storage_state"])
            if not any(host == d or host.endswith("." + d) for d in domains):
                missing[(t["storage_state"], site)] = host
    return [f"{path} holds no cookie for {site} ({host}): its tasks start logged out; make it again with "
            "WebArena's auto_login.py" for (path, site), host in missing.items()]


def load_tasks(path, sites, auth_dir=None, judge=None, store=None):
    """(task_id -> task with placeholders filled, task_id -> reason it is refused), from a file holding a
    list of tasks or one task, in WebArena's format or WebArena-Verified's (told apart per task by its
    fields); `judge`, `store`: a Judge, a Store (fuzzy_match, the shopping helpers can run)."""
    tasks, refused = {}, {}
    for i, t in enumerate(read_task_file(path)):
        name = str(t["task_id"]) if isinstance(t, dict) and isinstance(t.get("task_id"), (int, str)) else f"#{i}"
        try:
            need(name not in tasks and name not in refused, "task_id appears more than once (the first is kept)")
            tasks[name] = load_task(t, sites, auth_dir, judge, store)
        except Refused as e:
            refused.setdefault(name, str(e))
    return tasks, refused


def read_task_file(path):
    """The tasks of a task file (a list of tasks or one task); a missing or broken file ends the run, one line."""
    if not path:
        raise SystemExit("--suite webarena needs --task-file (WebArena config JSON: a list of tasks or one task)")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise SystemExit(f"--task-file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"--task-file {path}: not valid JSON: {e}") from None
    return data if isinstance(data, list) else [data]


def load_task(t, sites, auth_dir, judge, store):
    """One task of either format, checked, its placeholders filled and its login found (Refused if not)."""
    if is_verified(t):
        validate_verified(t)
        t = verified_task(t, sites, auth_dir)
        urls = t["start_urls"]
    else:
        validate_task(t, judge, store)
        t = fill_sites(t, sites)
        t["start_urls"] = t["start_url"].split(" |AND| ")   # several start tabs, as WebArena opens them
        t["start_url"] = t["start_urls"][0]
        urls = t["start_urls"] + [p["url"] for p in t["eval"].get("program_html", [])
                                  if p["url"] != "last" and not func_name(p["url"])]
        t["storage_state"] = resolve_storage_state(t, auth_dir)
    own = {origin(s) for s in sites.values()}
    outside = [u for u in urls if origin(u) not in own]
    need(not outside, f"{outside[0] if outside else ''} is on none of the --sites origins")
    return t


# ----------------------------------------------------------------------------------------------
# WebArena-Verified (ServiceNow/webarena-verified, the PyPI package `webarena-verified`): its task files, its
# logins, its answer, and its judge -- the package itself, run in a venv of its own (`make verified` builds
# .venv-verified: it pins pydantic and python-dateutil older than .venv's) as a subprocess, JSON in and out
# (envs/verified_judge.py). Its format: `start_urls` a list, `sites`, `eval` a list of evaluator objects
# (AgentResponseEvaluator on every task: the agent's JSON answer; NetworkEventEvaluator on most: the recorded
# network trace, a HAR file), no storage_state: the login follows from `sites`.

VERIFIED_SITES = ("gitlab", "map", "reddit", "shopping", "shopping_admin", "wikipedia", "homepage")
LOGIN_SITES = ("gitlab", "reddit", "shopping", "shopping_admin")   # auto_login.py's; map and wikipedia need none
VERIFIED_EVALUATORS = ("AgentResponseEvaluator", "NetworkEventEvaluator")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JUDGE_PYTHON = os.path.join(ROOT, ".venv-verified", "bin", "python")
JUDGE_SCRIPT = os.path.join(ROOT, "envs", "verified_judge.py")
JUDGE_INSTALL = "make verified (WebArena-Verified's evaluator package, in .venv-verified)"
JUDGE_S = 120.0   # one verdict: the judge's start (~1 s), the task file, a HAR of a long episode
# The answer's shape, as WebArena-Verified's own prompt asks for it, told with the task (its instruction).
ANSWER_HELP = (
    'When done, answer with stop() holding one JSON object: stop({"task_type": "RETRIEVE|MUTATE|NAVIGATE", '
    '"status": "SUCCESS|NOT_FOUND_ERROR|ACTION_NOT_ALLOWED_ERROR|PERMISSION_DENIED_ERROR|DATA_VALIDATION_ERROR|'
    'UNKNOWN_ERROR", "retrieved_data": [...] for RETRIEVE else null, "error_details": null or "why"}).')


def is_verified(t):
    """A task in WebArena-Verified's format: a list of start URLs or of evaluators (the original: one of each)."""
    return isinstance(t, dict) and ("start_urls" in t or isinstance(t.get("eval"), list))


def validate_verified(t):
    """The fields of a Verified task this suite reads, each checked; a missing judge named."""
    for field, typ in (("task_id", int), ("intent", str), ("start_urls", list), ("sites", list), ("eval", list)):
        need(isinstance(t.get(field), typ), f"missing or invalid field {field!r}")
    need(t["start_urls"] and all(isinstance(u, str) for u in t["start_urls"]),
         "start_urls must be a non-empty list of URLs")
    need(t["sites"] and all(s in VERIFIED_SITES for s in t["sites"]),
         f"sites must be a non-empty list of WebArena-Verified's sites ({', '.join(VERIFIED_SITES)})")
    kinds = {e.get("evaluator") if isinstance(e, dict) else None for e in t["eval"]}
    need(t["eval"] and kinds <= set(VERIFIED_EVALUATORS),
         f"eval must list WebArena-Verified's evaluators ({', '.join(VERIFIED_EVALUATORS)})")
    need(os.path.exists(JUDGE_PYTHON), f"WebArena-Verified's judge is not installed: {JUDGE_INSTALL}")


def verified_task(t, sites, auth_dir):
    """A checked Verified task as this suite runs it: its start pages filled, every site it names mapped
    (the judge renders its URLs), its login file found; `verified`: the task as the file holds it, which is what
    the package reads."""
    for site in t["sites"]:
        fill_sites(f"__{site.upper()}__", sites)
    starts = fill_sites(t["start_urls"], sites)
    return {**t, "start_url": starts[0], "start_urls": starts, "storage_state": login_file(t["sites"], auth_dir),
            "verified": t}


def login_file(sites, auth_dir):
    """The storage_state WebArena's browser_env/auto_login.py writes for a task's sites: the ones that need a
    login, sorted and joined with "." (gitlab.reddit_state.json), in --auth-dir's .auth/ (auto_login's folder,
    where the original format's "./.auth/..." paths point) or in --auth-dir itself; None: no login needed."""
    names = sorted(s for s in sites if s in LOGIN_SITES)
    if not names:
        return None
    name = ".".join(names) + "_state.json"
    base = os.path.abspath(auth_dir or os.getcwd())
    found = [p for p in (os.path.join(base, ".auth", name), os.path.join(base, name)) if os.path.exists(p)]
    need(found, f"login file {name} not found in {base}/.auth or {base}; make it with WebArena's "
         "browser_env/auto_login.py against your servers, or pass --auth-dir")
    read_login(found[0])
    return found[0]


def judge_sites(sites):
    """The --sites the package knows (its config's environments), by placeholder."""
    return {k: url for k, url in sites.items() if k.strip("_").lower() in VERIFIED_SITES}


def run_judge(tasks, sites, episodes=None, timeout=JUDGE_S):
    """WebArena-Verified's verdicts on episodes ({"task_id", "answer", "trace": a HAR path or None}) of `tasks` (the
    Verified tasks as their file holds them: only the ones the loader accepted, so a malformed one is refused
    alone): the package's evaluate_task, through envs/verified_judge.py in the judge's venv -> one result per
    episode ({"task_id", "status", "score", "error", "evaluators"}). episodes=None: the package's check of the
    tasks -> {"refused": {id: reason}, "cannot_judge": {id: reason}}. A judge that cannot answer raises JudgeError."""
    request = {"tasks": tasks, "sites": judge_sites(sites)}
    request.update({"check": True} if episodes is None else {"episodes": episodes})
    if not os.path.exists(JUDGE_PYTHON):
        raise JudgeError(f"WebArena-Verified's judge is not installed: {JUDGE_INSTALL}")
    try:
        proc = subprocess.run([JUDGE_PYTHON, JUDGE_SCRIPT], input=json.dumps(request), capture_output=True,
                              text=True, timeout=timeout * max(1, len(episodes or tasks)))
    except subprocess.TimeoutExpired:
        raise JudgeError(f"WebArena-Verified's judge gave no verdict in {timeout:.0f} s an episode") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise JudgeError(f"WebArena-Verified's judge failed (exit {proc.returncode}): {last[:300]}")
    reply = json.loads(proc.stdout)
    return reply["results"] if episodes is not None else reply


def final_answer(steps):
    """The answer an episode's steps give: the last stop()'s value; at the step limit WebArena's early-stop text,
    the answer WebArena scores then (a last stop() with value None is an unparseable reply)."""
    last = steps[-1]["action"] if steps else None
    stopped = last and last["op"] == "stop" and last["value"] is not None
    return last["value"] if stopped else f"Early stop: Reach max steps {len(steps)}"


def package_check(tasks, refused, sites):
    """The package's own reading of the accepted Verified tasks, before any browser work: a task it cannot read
    moves to `refused` with its reason; -> {task: the package's error on the task's own expected answer} (a task
    it cannot judge: every episode of it would end as a judge error)."""
    mine = {name: t["verified"] for name, t in tasks.items() if t.get("verified")}
    if not mine:
        return {}
    try:
        reply = run_judge(list(mine.values()), sites)
    except JudgeError as e:
        raise SystemExit(f"--task-file: {e}") from None
    for task_id, reason in reply["refused"].items():
        name = str(task_id)
        tasks.pop(name, None)
        refused[name] = f"WebArena-Verified's package cannot read it: {reason}"
    return {str(task_id): reason for task_id, reason in reply["cannot_judge"].items()}


def refusal_counts(refused):
    return collections.Counter(refused.values()).most_common()


def id_ranges(names):
    """Task ids, compactly: ["3", "4", "5", "12", "#7"] -> "3-5, 12, #7" (numbers sorted, runs joined)."""
    numbers = sorted(int(n) for n in names if n.isdigit())
    parts, start = [], None
    for k, n in enumerate(numbers):
        start = n if start is None else start
        if k + 1 == len(numbers) or numbers[k + 1] != n + 1:
            parts.append(str(n) if n == start else f"{start}-{n}")
            start = None
    return ", ".join(parts + [n for n in names if not n.isdigit()])


# The defect of webarena-verified 1.2.3 that --check explains: an expected post_data value that is a one-item
# list reads as a list of alternatives, which its NormalizedType requires to hold 2+ items (tasks 699, 700, 811).
UPSTREAM_NOTE = ("an upstream defect of the package: an expected value that is a one-item list is read as "
                 "alternatives, which need 2+ items; tasks 699, 700, 811 of webarena-verified 1.2.3")


def check_table(path, tasks, refused, cannot_judge=None, warnings=()):
    """--check: how many tasks of the file run, every reason the others are refused with its count and the task ids,
    then the warnings: tasks the package cannot judge (each with the package's message), logins with no cookie."""
    lines = [f"{path}: {len(tasks) + len(refused)} tasks, {len(tasks)} runnable, {len(refused)} refused"]
    for reason, n in refusal_counts(refused):
        lines += [f"{n:6d}  {reason}", f"        tasks {id_ranges([k for k, r in refused.items() if r == reason])}"]
    if cannot_judge:
        lines.append(f"warning: WebArena-Verified's package cannot judge {len(cannot_judge)} runnable task(s) (each "
                     "episode ends as a judge error):")
        lines += [f"  task {name}: {reason}" for name, reason in cannot_judge.items()]
        if any("Alternatives require 2+ items" in reason for reason in cannot_judge.values()):
            lines.append(f"  ({UPSTREAM_NOTE})")
    lines += [f"warning: {w}" for w in warnings]
    return "\n".join(lines)


class WebArena(Environment):
    """The runnable tasks of one file on the --sites servers. No experts: random, human and model policies."""
    suite = "webarena"
    viewport, scale = VIEWPORT, 1
    tabs = True   # WebArena's tasks may start in several tabs; its agents have tab actions

    def __init__(self, task_file, site_specs, auth_dir=None, check=False, judge=None, shopping_admin=None):
        self.sites = parse_sites(site_specs)
        if not self.sites:
            raise SystemExit("--suite webarena needs --sites NAME=URL for each site its tasks use "
                             "(e.g. shopping=http://host:7770)")
        self.judge, self.store = judge, None
        if shopping_admin:
            user, _, password = shopping_admin.partition(":")
            if not user or not password:
                raise SystemExit("--shopping-admin: expected USER:PASSWORD (the store's admin account)")
            if "__SHOPPING__" not in self.sites:
                raise SystemExit("--shopping-admin needs --sites shopping=URL (the store whose REST API it reads)")
            self.store = Store(self.sites["__SHOPPING__"], user, password)
        self.task_file = task_file
        self.tasks, self.refused = load_tasks(task_file, self.sites, auth_dir, judge, self.store)
        self.cannot_judge = package_check(self.tasks, self.refused, self.sites)
        # the evaluation's time beyond the action timeout: the judge's verdicts, the store's requests (two a call)
        self.judge_s = max(self.evaluation_s(t) for t in self.tasks.values()) if self.tasks else 0.0
        if check:   # the table, no browser: the whole run is this answer
            print(check_table(task_file, self.tasks, self.refused, self.cannot_judge,
                              login_warnings(self.tasks, self.sites)))
            raise SystemExit(0)
        if not self.tasks:
            raise SystemExit(f"{task_file}: no runnable task; " + "; ".join(
                f"{n} refused: {reason}" for reason, n in refusal_counts(self.refused)))
        if self.cannot_judge:
            print(f"webarena: WebArena-Verified's package cannot judge task(s) {id_ranges(list(self.cannot_judge))}: "
                  "their episodes end as judge errors (--check says why)")
        if self.refused:
            print(f"webarena: {len(self.refused)} of {len(self.tasks) + len(self.refused)} tasks refused, skipped ("
                  + "; ".join(f"{n}: {reason}" for reason, n in refusal_counts(self.refused)) + "); --check lists them")
        self.origins = sorted({origin(u) for u in self.sites.values()})
        # WebArena-Verified judges the network trace: each browser context records a HAR file here
        self.har_dir = tempfile.mkdtemp(prefix="mag-har-") if any(t.get("verified") for t in self.tasks.values()) \
            else None
        self.hars = 0

    def evaluation_s(self, t):
        """The longest a task's evaluation may take beyond the action timeout."""
        if t.get("verified"):
            return JUDGE_S
        return ((self.judge.worst_s * judge_calls(t) if self.judge else 0) +
                (self.store.timeout * 2 * store_calls(t) if self.store else 0))

    def url(self, task):
        return self.tasks[task]["start_url"]

    def public_url(self, url):
        """Each site's address back to its placeholder, the longest first (one may prefix another)."""
        for key, base in sorted(self.sites.items(), key=lambda kv: -len(kv[1])):
            url = url.replace(base, key)
        return url

    def has_task(self, task):
        if task in self.refused:   # asked for by name: say why, not "unknown task"
            raise SystemExit(f"webarena task {task} is refused: {self.refused[task]}")
        return task in self.tasks

    def all_tasks(self):
        return list(self.tasks)   # the file's order

    async def reset(self, page, task, seed):
        """The task's storage_state (Playwright's loader: cookies and localStorage; none: everything cleared),
        then the start page. The seed changes nothing: the sites' data is whatever the user's servers hold
        (WebArena resets them with its own scripts)."""
        t = self.tasks[task]
        if t.get("verified") and page.url != "about:blank":   # a used context: its HAR holds another episode
            from playwright.async_api import Error as PlaywrightError
            await page.context.close()
            raise PlaywrightError("a WebArena-Verified episode needs a fresh browser context (its HAR is judged)")
        for tab in page.context.pages:   # the tabs an earlier episode left in this context
            if tab is not page:
                await tab.close()
        await page.context.set_storage_state(t["storage_state"] or {"cookies": [], "origins": []})
        await page.goto(t["start_url"], wait_until="load")
        page.mag_home = t["start_url"]   # where new_tab() opens
        for url in t["start_urls"][1:]:   # every start URL its own tab, the first focused, as in WebArena
            tab = await page.context.new_page()
            await tab.goto(url, wait_until="load")
        await page.bring_to_front()
        return (f"{t['intent']}\n{ANSWER_HELP}" if t.get("verified") else t["intent"]), None

    async def evaluate(self, page, task, params, answer):
        t = self.tasks[task]
        if t.get("verified"):
            return await self.evaluate_verified(page, t, answer)
        passed = await evaluate_config(t["eval"], page, answer, t["intent"], self.judge, self.store)
        ok = all(p for _, p in passed)
        return float(ok), ok

    def har_path(self):
        """A fresh file for a new browser context's network trace (collect.new_page records it there), or None."""
        if not self.har_dir:
            return None
        self.hars += 1
        return os.path.join(self.har_dir, f"{self.hars}.har")

    async def evaluate_verified(self, page, t, answer):
        """The package's verdict on the answer and the trace. The context is closed first: Playwright writes the
        HAR then, after the last screenshot (the recording never waits on one); it is kept as network.har beside
        the episode's screenshots, with the package's result as verdict.json (`score` re-reads them)."""
        trace = None
        folder = getattr(page, "mag_episode_dir", None)
        await page.context.close()
        if getattr(page, "mag_har", None) and os.path.exists(page.mag_har):
            trace = os.path.join(folder, "network.har") if folder else page.mag_har
            shutil.move(page.mag_har, trace)
        episode = {"task_id": t["task_id"], "answer": answer, "trace": trace}
        result = (await asyncio.to_thread(run_judge, [t["verified"]], self.sites, [episode]))[0]
        if folder:   # the sites with it: `score` judges the run again from its folder alone
            record = {**result, "sites": judge_sites(self.sites)}
            metrics.write_atomic(os.path.join(folder, "verdict.json"), json.dumps(record, indent=1))
        if result["status"] == "error":
            raise JudgeError(f"WebArena-Verified's judge: {result['error']}")
        return float(result["score"]), result["score"] == 1.0

    def close(self):
        if self.har_dir:
            shutil.rmtree(self.har_dir, ignore_errors=True)


def add_args(p):
    """The suite's flags; collect.py and evaluate.py declare them through collect.add_suite_args."""
    p.add_argument("--task-file", default=None, help="webarena: a WebArena-format config JSON (a list of tasks or one)")
    p.add_argument("--sites", action="append", default=[],
                   help="webarena: NAME=URL maps the placeholder __NAME__ (repeat, or comma-separate)")
    p.add_argument("--auth-dir", default=None, help="webarena: where storage_state paths start (default: the cwd)")
    p.add_argument("--check", action="store_true", help="webarena: print runnable / refused tasks by reason, exit")
    p.add_argument("--judge-api-base", default=None, help="webarena: OpenAI-compatible endpoint of the fuzzy_match "
                   "judge (unset: those tasks are refused)")
    p.add_argument("--judge-model", default=None, help="webarena: the judge's model (WebArena: gpt-4-1106-preview)")
    p.add_argument("--judge-key-env", default="OPENAI_API_KEY",
                   help="webarena: environment variable holding the judge's key (unset: no key sent)")
    p.add_argument("--shopping-admin", default=None, metavar="USER:PASSWORD", help="webarena: the store's admin "
                   "account, for the helpers that read its REST API (WebArena's: admin:admin1234; unset: refused)")


def options(args):
    """WebArena(**options(args)): the parsed flags of add_args. The judge's key is read here, never printed."""
    if bool(args.judge_api_base) != bool(args.judge_model):
        raise SystemExit("--judge-api-base and --judge-model go together (the endpoint and the model it serves)")
    key = os.environ.get(args.judge_key_env) if args.judge_key_env else None
    judge = Judge(args.judge_api_base, args.judge_model, key or None) if args.judge_model else None
    return dict(task_file=args.task_file, site_specs=args.sites, auth_dir=args.auth_dir, check=args.check, judge=judge,
                shopping_admin=args.shopping_admin)


# ----------------------------------------------------------------------------------------------
# Re-scoring a run without a browser: WebArena-Verified judges what the run kept (the answer, the HAR).

def recorded_sites(run, episodes):
    """The sites each episode was judged with (its verdict.json), together."""
    sites = {}
    for ep in episodes:
        path = os.path.join(run, "img", ep["id"], "verdict.json")
        if os.path.exists(path):
            with open(path) as f:
                sites.update(json.load(f).get("sites") or {})
    return sites


def judged_here(ep):
    """An episode `score` judges: a finished one, or one whose judging errored (its answer and HAR are on disk)."""
    return not ep.get("error") or ep["error"].startswith(JudgeError.__name__)


def har_problem(path):
    """Why a HAR file cannot be judged (truncated, not JSON, not a HAR), or None when it reads as one."""
    try:
        with open(path) as f:
            har = json.load(f)
    except ValueError as e:
        return f"not JSON (truncated? {e})"
    entries = har.get("log", {}).get("entries") if isinstance(har, dict) else None
    return None if isinstance(entries, list) else "not a HAR file (no log.entries list)"


def score(task_file, run, site_specs=()):
    """Every episode of `run` whose task is a Verified task of `task_file` (finished, or its judging errored),
    judged again by the package from the run's folder (its answer, img/<id>/network.har) -> the rows, also written
    to <run>/verified_scores.json, each with its `reason`. The sites: --sites, else the run's (verdict.json)."""
    tasks = {str(t["task_id"]): t for t in read_task_file(task_file) if is_verified(t)}
    episodes = [ep for ep in metrics.load_dataset_or_exit(run)
                if ep["suite"] == "webarena" and ep["task"] in tasks and judged_here(ep)]
    if not episodes:
        raise SystemExit(f"score: {run} holds no episode of a WebArena-Verified task of {task_file}")
    sites = parse_sites(site_specs) or recorded_sites(run, episodes)
    if not sites:
        raise SystemExit(f"score: no verdict.json in {run} names the sites: pass --sites NAME=URL,...")
    rows, jobs = [], []
    for ep in episodes:
        trace = os.path.join(run, "img", ep["id"], "network.har")
        row = {"id": ep["id"], "task_id": int(ep["task"]), "recorded": ep["reward"]}
        problem = har_problem(trace) if os.path.exists(trace) else None
        if problem:   # the package would stop on it with a parser's trace: named here, the episode not judged
            rows.append({**row, "status": "error", "score": 0.0, "evaluators": [],
                         "reason": f"img/{ep['id']}/network.har is {problem}"})
            continue
        rows.append(row)
        jobs.append({"task_id": row["task_id"], "answer": final_answer(ep["steps"]),
                     "trace": trace if os.path.exists(trace) else None})
    needed = {str(j["task_id"]) for j in jobs}
    results = iter(run_judge([t for name, t in tasks.items() if name in needed], sites, jobs) if jobs else [])
    for row, job in zip([r for r in rows if "status" not in r], jobs):
        row.update(next(results))
        row["reason"] = row_reason(row, job["answer"])
    metrics.write_atomic(os.path.join(run, "verified_scores.json"), json.dumps(rows, indent=1))
    return rows


def row_reason(row, answer):
    """A judged episode's reason, one line: the package's error, or which evaluators failed and, for an answer that
    is not a JSON object, what it was."""
    if row["status"] == "error":
        return row.get("error") or "the package gave no reason"
    failed = [e["name"] for e in row["evaluators"] if e["status"] != "success"]
    reason = ", ".join(failed) + " failed" if failed else ""
    if row["status"] != "success" and metrics.json_answer(answer) is None:
        reason += f"; the answer is not a JSON object: {answer[:80]!r}"
    return reason.lstrip("; ")


def print_scores(rows):
    """One line per episode (its status, score and reason), then the totals; the errors are not failures."""
    for r in rows:
        same = "" if r["score"] == r["recorded"] else f"  (recorded {r['recorded']})"
        print(f"{r['id']}  {r['status']:8s} {r['score']:.0f}{same}  {r['reason']}".rstrip())
    errors = sum(r["status"] == "error" for r in rows)
    judged = [r for r in rows if r["status"] != "error"]
    succeeded = sum(r["score"] == 1.0 for r in judged)
    differ = sum(r["score"] != r["recorded"] for r in judged)
    print(f"score: {len(rows)} episodes, {succeeded} succeeded, {len(judged) - succeeded} failed, {errors} could not "
          f"be judged; {differ} differ from the run's own scores")
    return errors


def main(argv=None):
    """python -m envs.webarena --check ... | score --task-file F --run RUN [--sites NAME=URL,...]"""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["score"]:
        p = argparse.ArgumentParser(prog="python -m envs.webarena score", description="judge a run's "
                                    "WebArena-Verified episodes again, without a browser, with the package")
        p.add_argument("--task-file", required=True, help="the Verified task file the run used")
        p.add_argument("--run", required=True, help="the run's folder (episodes.jsonl, img/<id>/network.har)")
        p.add_argument("--sites", action="append", default=[], help="NAME=URL (default: the run's own)")
        args = p.parse_args(argv[1:])
        try:
            rows = score(args.task_file, args.run, args.sites)
        except JudgeError as e:
            raise SystemExit(f"score: {e}") from None
        if print_scores(rows):
            raise SystemExit(f"score: some episodes could not be judged (above; {args.run}/verified_scores.json)")
        return rows
    p = argparse.ArgumentParser(description="check a WebArena-format task file: runnable / refused tasks "
                                "(or: score --task-file F --run RUN, a Verified run judged again)")
    add_args(p)
    args = p.parse_args(argv)
    if not args.check or not args.task_file:
        p.error("this entry point checks: --check --task-file FILE --sites NAME=URL,... (or: score ...)")
    WebArena(**options(args))


if __name__ == "__main__":
    main()
