"""collect.py --suite webarena: WebArena-format task files run against a site served elsewhere -- here a
tiny local site this module starts (http.server on 127.0.0.1: a home page, a form, its result page)."""
import asyncio
import http.server
import json
import subprocess
import sys
import urllib.parse

import pytest
from conftest import serving

import collect
import envs
import metrics
from envs import webarena

PAGES = {
    "/": '<h1>Corner Shop</h1><a id="contact" href="/form">Contact us</a> <a href="/about">About</a> '
         '<a id="away" href="http://example.com/">Elsewhere</a>',
    "/form": '<form action="/result"><label>Name <input id="name" name="name"></label> '
             '<button id="send" type="submit">Send</button></form>',
    "/about": '<p id="about">Founded in 1999 &amp; still &quot;open&quot; on Sundays.</p>',
    # a Postmill post (its canonical URL) and one of its comments (a longer URL, another view)
    "/f/books/59421/": '<div class="submission__inner"><h1>Dune</h1><p>Reply: worth it</p></div>',
    "/f/books/59421/dune-review/comment/7": '<div class="comment">worth it</div>',
    # a GitLab project's members table: an account cell, then a role cell, per row
    "/byteblaze/dotfiles/-/project_members": '<table>' + "".join(
        f'<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@{who}</span></td>'
        f'<td class="col-max-role"><span>{role}</span></td></tr>'
        for who, role in (("byteblaze", "Owner"), ("yjlou", "Developer"), ("yjlou2", "Guest"))) + '</table>',
    # a Magento admin form whose section must be unfolded before its fields exist (WebArena's prep_actions)
    "/promo": '<div data-index="actions"><div class="admin__collapsible-title" onclick="this.parentNode.'
              'insertAdjacentHTML(\'beforeend\', \'<input name=simple_action value=by_percent>\')">Actions</div></div>',
    "/whoami": '<p id="who"></p><script>document.getElementById("who").textContent = '
               '(localStorage.getItem("user") || "none") + " / " + document.cookie</script>',
}


class Site(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/result":
            name = urllib.parse.parse_qs(url.query).get("name", [""])[0]
            body = f'<p id="greeting">Hello {name}!</p><a href="/">Home</a>'
        elif url.path in PAGES:
            body = PAGES[url.path]
        else:
            self.send_error(404)
            return
        data = f"<!doctype html><html><body>{body}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def site():
    with serving(Site) as base:
        yield base


def task(task_id, intent, start="__SHOP__/", **ev):
    return {"sites": ["shop"], "task_id": task_id, "require_login": False, "storage_state": None,
            "start_url": start, "geolocation": None, "intent_template": intent, "instantiation_dict": {},
            "intent": intent, "require_reset": False, "eval": ev}


GREET = task(1, "Send the contact form with the name Ada.",
             eval_types=["url_match", "program_html"], reference_url="__SHOP__/result?name=Ada",
             url_note="GOLD in PRED",
             program_html=[{"url": "last", "locator": "document.querySelector('#greeting').outerText",
                            "required_contents": {"must_include": ["hello ada |OR| hi ada"]}}])
ANSWER = task(2, "In which year was the shop founded?", start="__SHOP__/about",
              eval_types=["string_match"], reference_answers={"exact_match": "1999"})


def write(tmp_path, data, name="tasks.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


# ---------------------------------------------------------------------------------------------
# Loading: a bad file or bad --sites stops the run; a task this suite cannot run is refused on its own,
# with its reason, and the file's other tasks run.

SHOP = ["shop=http://127.0.0.1:1"]
URL_TASK = dict(eval_types=["url_match"], reference_url="__SHOP__/")


@pytest.mark.parametrize("data, sites, message", [
    ("[{", SHOP, "not valid JSON"),
    ([GREET], ["shop:http://127.0.0.1:1"], "--sites 'shop:http://127.0.0.1:1': expected NAME=http(s)://"),
    ([GREET], [], "needs --sites NAME=URL"),
    ([task(4, "x", eval_types=["string_match"], reference_answers={"fuzzy_match": ["a"]})],
     SHOP, "no runnable task; 1 refused: reference_answers.fuzzy_match needs WebArena's LLM judge"),
])
def test_bad_files_stop_the_run(tmp_path, data, sites, message):
    with pytest.raises(SystemExit) as e:
        webarena.WebArena(write(tmp_path, data), sites)
    assert message in str(e.value), str(e.value)


REFUSED = [   # (task, the reason it is refused)
    ({**GREET, "task_id": 14, "intent": None}, "missing or invalid field 'intent'"),
    (GREET, "task_id appears more than once (the first is kept)"),
    (task(3, "x", start="__GITLAB__/explore", **URL_TASK), "site placeholder __GITLAB__ has no mapping: "
     "pass --sites gitlab=URL"),
    (task(4, "x", eval_types=["string_match"], reference_answers={"fuzzy_match": ["a"]}),
     "reference_answers.fuzzy_match needs WebArena's LLM judge (not configured: --judge-api-base, "
     "--judge-model)"),
    (task(5, "x", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('X')",
         "required_contents": {"exact_match": "a"}}]),
     "program_html: 'func:shopping_get_sku_latest_review_author' reads the store's admin REST API: pass "
     "--shopping-admin USER:PASSWORD"),
    (task(6, "x", start="http://10.0.0.9/", **URL_TASK), "http://10.0.0.9/ is on none of the --sites origins"),
    (task(7, "x", start="__SHOP__/ |AND| http://10.0.0.9/", **URL_TASK),   # every start tab on the --sites
     "http://10.0.0.9/ is on none of the --sites origins"),
    ({**task(9, "x", **URL_TASK), "storage_state": "./.auth/shop_state.json"},
     "storage_state './.auth/shop_state.json' not found"),
    (task(10, "x", eval_types=["html_match"]), "unknown eval type(s) ['html_match']"),
    (task(11, "x", eval_types=["program_html"], program_html=[
        {"url": "func:shopping_get_latest_order_url()", "locator": "document.title",
         "required_contents": {"exact_match": "a"}}]),
     "program_html: 'func:shopping_get_latest_order_url' reads the store's admin REST API: pass --shopping-admin"),
    (task(15, "x", eval_types=["program_html"], program_html=[
        {"url": "func:reddit_get_post_url(__last_url__)", "locator": "document.title",
         "required_contents": {"exact_match": "a"}}]), "program_html: 'func:reddit_get_post_url' takes a string"),
    (task(16, "x", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:reddit_get_post_url('__last_url__')",
         "required_contents": {"exact_match": "a"}}]), "program_html: 'func:reddit_get_post_url' is not a locator"),
    (task(17, "x", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:gitlab_get_project_memeber_role(__page__, 'a'",
         "required_contents": {"exact_match": "a"}}]),
     "program_html: 'func:gitlab_get_project_memeber_role' is not a call this suite can read"),
    (task(18, "x", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:os_system('ls')", "required_contents": {"exact_match": "a"}}]),
     "program_html: 'func:os_system' calls WebArena's Python code: not supported"),
    (task(12, "x", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "document.title", "prep_actions": "document.x()",
         "required_contents": {"exact_match": "a"}}]), "program_html: prep_actions must be a list of JavaScript"),
    ([1, 2], "a task must be a JSON object"),
]


@pytest.mark.parametrize("bad, reason", REFUSED)
def test_each_task_is_refused_on_its_own(tmp_path, monkeypatch, bad, reason):
    monkeypatch.chdir(tmp_path)
    env = webarena.WebArena(write(tmp_path, [GREET, bad]), SHOP)
    assert env.all_tasks() == ["1"]
    name = str(bad["task_id"]) if isinstance(bad, dict) else "#1"
    assert list(env.refused) == [name] and reason in env.refused[name], env.refused
    if name != "1":   # asked for by name, a refused task says why
        with pytest.raises(SystemExit, match="is refused: "):
            env.has_task(name)


def test_tasks_without_login_and_fuzzy_na_run(tmp_path):
    """WebArena's map and wikipedia tasks: require_login with storage_state null open without login; a
    fuzzy_match of "N/A" is an exact "N/A" match (WebArena tries it first), so no judge is needed."""
    no_login = {**GREET, "require_login": True, "storage_state": None}
    na = task(2, "x", eval_types=["string_match"], reference_answers={"fuzzy_match": "N/A"})
    env = webarena.WebArena(write(tmp_path, [no_login, na]), SHOP)
    assert env.all_tasks() == ["1", "2"] and env.refused == {} and env.tasks["1"]["storage_state"] is None


def test_storage_state_is_found_like_webarena(tmp_path, monkeypatch):
    """Relative to the working directory (WebArena runs from its checkout), not to the task file; or --auth-dir."""
    (tmp_path / "cfg").mkdir()
    (tmp_path / "run" / ".auth").mkdir(parents=True)
    (tmp_path / "run" / ".auth" / "shop_state.json").write_text('{"cookies": [], "origins": []}')
    path = write(tmp_path / "cfg", [{**GREET, "require_login": True, "storage_state": "./.auth/shop_state.json"}])
    monkeypatch.chdir(tmp_path / "run")
    want = str(tmp_path / "run" / ".auth" / "shop_state.json")
    assert webarena.WebArena(path, SHOP).tasks["1"]["storage_state"] == want
    monkeypatch.chdir(tmp_path / "cfg")
    assert webarena.WebArena(path, SHOP, auth_dir=str(tmp_path / "run")).tasks["1"]["storage_state"] == want
    with pytest.raises(SystemExit, match="no runnable task; 1 refused: storage_state './.auth/shop_state.json' not "
                       f"found \\(looked at {tmp_path}/cfg/.auth/shop_state.json\\)"):
        webarena.WebArena(path, SHOP)


def test_check_prints_the_table_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, [GREET, ANSWER] + [bad for bad, _ in REFUSED[2:5]] + [{**REFUSED[3][0], "task_id": 13}])
    with pytest.raises(SystemExit) as e:
        collect.main(["--suite", "webarena", "--check", "--task-file", path, "--sites", SHOP[0], "--out", "x"])
    assert e.value.code == 0 and not (tmp_path / "x").exists()
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: 6 tasks, 2 runnable, 4 refused",
        "     2  reference_answers.fuzzy_match needs WebArena's LLM judge (not configured: --judge-api-base, "
        "--judge-model)",
        "        tasks 4, 13",
        "     1  site placeholder __GITLAB__ has no mapping: pass --sites gitlab=URL",
        "        tasks 3",
        "     1  program_html: 'func:shopping_get_sku_latest_review_author' reads the store's admin REST API: pass "
        "--shopping-admin USER:PASSWORD", "        tasks 5"]
    out = subprocess.run([sys.executable, "-m", "envs.webarena", "--check", "--task-file", path, "--sites", SHOP[0]],
                         capture_output=True, text=True, cwd=collect.__file__.rsplit("/", 1)[0])
    assert out.returncode == 0 and out.stdout.splitlines()[0] == f"{path}: 6 tasks, 2 runnable, 4 refused"
    import evaluate  # evaluate.py takes the same flags: the table, no run
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--suite", "webarena", "--check", "--task-file", path, "--sites", SHOP[0], "--out", "y"])
    assert e.value.code == 0 and not (tmp_path / "y" / "episodes.jsonl").exists()
    assert capsys.readouterr().out.splitlines()[0] == f"{path}: 6 tasks, 2 runnable, 4 refused"


def test_load_fills_placeholders_and_names_tasks(tmp_path):
    env = webarena.WebArena(write(tmp_path, GREET), ["shop=http://127.0.0.1:7770/"])   # one object, not a list
    assert env.all_tasks() == ["1"] and env.origins == ["http://127.0.0.1:7770"]
    assert env.url("1") == "http://127.0.0.1:7770/"
    assert env.tasks["1"]["eval"]["reference_url"] == "http://127.0.0.1:7770/result?name=Ada"
    assert env.public_url("http://127.0.0.1:7770/form?x=1") == "__SHOP__/form?x=1"


def test_expert_policy_is_refused(tmp_path, site):
    with pytest.raises(SystemExit, match="WebArena-format tasks have no experts"):
        collect.main(["--suite", "webarena", "--task-file", write(tmp_path, [GREET]), "--sites", f"shop={site}",
                      "--out", str(tmp_path / "out"), "--no-progress"])


def test_storage_state_loads_cookies_and_local_storage(tmp_path, site, monkeypatch):
    """A login is Playwright's storage_state: cookies AND localStorage; a task without one starts with neither."""
    from playwright.async_api import async_playwright
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".auth").mkdir()
    (tmp_path / ".auth" / "shop_state.json").write_text(json.dumps({
        "cookies": [{"name": "sid", "value": "7", "domain": "127.0.0.1", "path": "/", "expires": -1,
                     "httpOnly": False, "secure": False, "sameSite": "Lax"}],
        "origins": [{"origin": site, "localStorage": [{"name": "user", "value": "ada"}]}]}))
    login = {**task(1, "x", start="__SHOP__/whoami", **URL_TASK), "storage_state": "./.auth/shop_state.json"}
    no_login = {**task(2, "x", start="__SHOP__/whoami", **URL_TASK), "require_login": True}
    env = webarena.WebArena(write(tmp_path, [login, no_login]), [f"shop={site}"])

    async def main():
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
            page, seen = await browser.new_page(), []
            for name in ("1", "2", "1"):
                await env.reset(page, name, 0)
                seen.append(await page.inner_text("#who"))
            await browser.close()
            return seen

    assert asyncio.run(main()) == ["ada / sid=7", "none /", "ada / sid=7"]


# ---------------------------------------------------------------------------------------------
# The evaluators on real pages (WebArena's semantics: stripped, unquoted, lowercased).

STRING_MATCH = [   # (reference_answers, the stop() answer, WebArena's verdict)
    ({"exact_match": "1999"}, " '1999' ", True),
    ({"exact_match": "1999"}, "in 1999", False),
    ({"exact_match": "Ada Lovelace"}, '"ada lovelace"', True),
    # cleaned when read AND inside exact_match: the quotes and spaces of both layers go
    ({"exact_match": "Quest Lumaflex™ Band"}, '" Quest Lumaflex™ Band "', True),
    ({"exact_match": "Sprite"}, "\"'Sprite'\"", True),
    ({"exact_match": ""}, '"', True),   # a lone quote is a pair of quotes: it cleans to ""
    ({"exact_match": "x"}, '"x\'', False),   # unmatched quotes stay
    ({"must_include": ["Lyon", "Porto"]}, "Porto, then Lyon", True),
    ({"must_include": ["Lyon", "Oslo"]}, "Lyon", False),
    ({"must_include": ["sprite"]}, "\"' Sprite '\"", True),
    # a lone one-character reference must be a word token (nltk's word_tokenize); several are substrings
    ({"must_include": ["4"]}, "It took 14 days", False),
    ({"must_include": ["4"]}, "4 days", True),
    ({"must_include": ["4", "day"]}, "14 days", True),
    ({"must_include": ["6"]}, "6/5 stars.", False),
    ({"must_include": ["6"]}, "x=6", False),
    ({"must_include": ["6"]}, "6,000 orders", False),
    ({"must_include": ["6"]}, "it fell by -6", False),
    ({"must_include": ["6"]}, "at 6:30", False),
    ({"must_include": ["6"]}, "6, then 7", True),
    ({"must_include": ["6"]}, "The answer is 6.", True),
    ({"must_include": ["6"]}, "(6)", True),
    ({"must_include": ["6"]}, "about $6!", True),
    # fuzzy_match "N/A": the exact "N/A" match WebArena tries first (its judge is not configured here)
    ({"fuzzy_match": "N/A"}, " n/a ", True),
    ({"fuzzy_match": "N/A"}, "It cannot be done", False),
    ({"exact_match": "N/A"}, None, False),   # no answer at all fails (collect.judge gives the step limit's text)
]


@pytest.mark.parametrize("refs, answer, passed", STRING_MATCH)
def test_string_match_semantics(refs, answer, passed):
    got = asyncio.run(webarena.evaluate_config({"eval_types": ["string_match"], "reference_answers": refs},
                                               None, answer))
    assert got == [("string_match", passed)]


@pytest.mark.parametrize("text, tokens", [
    ("6/5 stars.", ["6/5", "stars", "."]), ("x=6 +6 -6 6.5", ["x=6", "+6", "-6", "6.5"]),
    ("6,000 at 6:30, a: b", ["6,000", "at", "6:30", ",", "a", ":", "b"]),
    ("stars. great 6. it", ["stars", ".", "great", "6.", "it"]),   # Punkt: no sentence end after a number
    ('it\'s "6" (or [7]); wait... x--y', ["it", "'s", "``", "6", "''", "(", "or", "[", "7", "]", ")", ";", "wait",
                                          "...", "x", "--", "y"]),
])
def test_word_tokens_split_like_nltk(text, tokens):
    assert webarena.word_tokens(text) == tokens


URL_MATCH = [   # (final URL, reference_url, url_note, WebArena's verdict)
    ("http://h/result?name=Ada&lang=en", "http://h/result?name=Ada", "GOLD in PRED", True),
    ("http://h/result?name=Ada", "http://h/result?name=Bob", "GOLD in PRED", False),
    ("http://h/a/b/c", "http://h/a/b", "GOLD in PRED", True),
    ("http://h/result/", "  http://h/result \n", "GOLD in PRED", True),   # whitespace around a URL
    ("http://h/result?q=1", "http://h/nowhere |OR| http://h/result", "GOLD in PRED", True),
    # |OR|: the query keys of all alternatives together; a key given twice accepts either value
    ("http://h/a?x=1", "http://h/a?x=1 |OR| http://h/b?y=2", "GOLD in PRED", False),
    ("http://h/a?x=1&y=2", "http://h/a?x=1 |OR| http://h/b?y=2", "GOLD in PRED", True),
    ("http://h/s?q=blue", "http://h/s?q=red&q=blue", "GOLD in PRED", True),
    ("http://h/s?q=blue", "http://h/s?q=red |OR| http://h/s?q=blue", "GOLD in PRED", True),
    ("http://h/result", "http://h/result/", "EXACT", True),
    ("http://h/result", "http://h/res", "EXACT", False),
]


@pytest.mark.parametrize("got, ref, note, passed", URL_MATCH)
def test_url_match_semantics(got, ref, note, passed):
    assert webarena.url_match(got, ref, note) is passed


def test_url_match_and_program_html_on_live_pages(site):
    from playwright.async_api import async_playwright

    async def main():
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
            page = await browser.new_page()
            await page.goto(site + "/result?name=Ada&lang=en")
            url = lambda ref, note="GOLD in PRED": webarena.evaluate_config(
                {"eval_types": ["url_match"], "reference_url": ref, "url_note": note}, page, None)
            html_ = lambda targets: webarena.evaluate_config({"eval_types": ["program_html"], "program_html": targets},
                                                             page, None)
            out = {
                "gold in pred": await url(site + "/result?name=Ada"),
                "query value differs": await url(site + "/result?name=Bob"),
                "or": await url(f"{site}/nowhere |OR| {site}/result"),
                "exact path": await url(site + "/result/", "EXACT"),
                "exact, prefix only": await url(site + "/res", "EXACT"),
                "locator": await html_([{"url": "last", "locator": "document.querySelector('#greeting').outerText",
                                         "required_contents": {"exact_match": "Hello Ada!"}}]),
                "locator null": await html_([{"url": "last", "locator": "document.querySelector('#none')",
                                              "required_contents": {"exact_match": "None"}}]),
                "locator misses": await html_([{"url": "last", "locator": "document.querySelector('#none').outerText",
                                                "required_contents": {"must_include": ["Ada"]}}]),
                # another page: visited by the evaluator; an empty locator is the whole HTML, unescaped
                "other page, whole html": await html_([
                    {"url": site + "/about", "locator": "",
                     "required_contents": {"must_include": ['still "open"', "1999 & still"]}}]),
                "all targets": await html_([
                    {"url": site + "/about", "locator": "", "required_contents": {"must_include": ["1999"]}},
                    {"url": site + "/", "locator": "document.title", "required_contents": {"must_include": ["x"]}}]),
            }
            await browser.close()
            return {k: v[0][1] for k, v in out.items()}

    assert asyncio.run(main()) == {"gold in pred": True, "query value differs": False, "or": True, "exact path": True,
                                   "exact, prefix only": False, "locator": True, "locator null": True,
                                   "locator misses": False,
                                   "other page, whole html": True, "all targets": False}


# ---------------------------------------------------------------------------------------------
# The func: helpers that need only a URL or the page (WebArena's helper_functions.py, by their semantics).

REDDIT_POST_URL = [   # (a URL, the post's canonical URL as WebArena's reddit_get_post_url gives it)
    ("http://h:9999/f/books/59421/dune-review", "http://h:9999/f/books/59421/"),
    ("https://h/f/books/59421/dune-review/comment/7?sort=new#c7", "https://h/f/books/59421/"),
    ("http://h/f/books/59421", "http://h/f/books/59421/"),
    ("http://h/f/books/59421/", "http://h/f/books/59421/"),
    ("http://h/f/books/", "http://h/f/books//"),   # WebArena's quirk: an empty post id is kept
    ("http://h/f/books", "http://h/f/books"),   # not a post: unchanged
    ("http://h/user/ada/comments", "http://h/user/ada/comments"),
    ("http://h/reddit/f/books/59421/x", "http://h/reddit/f/books/59421/x"),   # "f" must be the first segment
    ("http://h/", "http://h/"),
]


@pytest.mark.parametrize("url, post", REDDIT_POST_URL)
def test_reddit_get_post_url(url, post):
    assert webarena.reddit_get_post_url(url) == post


MEMBER_ROLES = [   # (account, the role WebArena's gitlab_get_project_memeber_role reads on the members page)
    ("byteblaze", "Owner"), ("yjlou", "Developer"), ("yjlou2", "Guest"),
    ("yjlo", ""),   # the account cell must be "@account" exactly
    ("nobody", ""),
]


def test_func_helpers_on_live_pages(site):
    """The locator helper read off a members table, on a page without one, and through program_html; a
    func: url: the last URL (a comment of a post) -> the post's page, whose locator the target then reads."""
    from playwright.async_api import async_playwright
    members = site + "/byteblaze/dotfiles/-/project_members"

    async def main():
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
            page = await browser.new_page()
            await page.goto(members)
            roles = {who: await webarena.gitlab_get_project_memeber_role(page, who) for who, _ in MEMBER_ROLES}
            await page.goto(site + "/about")
            roles["elsewhere"] = await webarena.gitlab_get_project_memeber_role(page, "byteblaze")
            html_ = lambda target: webarena.evaluate_config({"eval_types": ["program_html"],
                                                             "program_html": [target]}, page, None)
            role = lambda who, want: html_({"url": members, "required_contents": {"exact_match": want},
                                            "locator": f"func:gitlab_get_project_memeber_role(__page__, '{who}')"})
            post = {"url": "func:reddit_get_post_url('__last_url__')",
                    "locator": "document.querySelector('.submission__inner').outerText",
                    "required_contents": {"must_include": ["Dune", "worth it"]}}
            out = {"role": await role("yjlou", "Developer"), "wrong role": await role("yjlou", "Owner")}
            await page.goto(site + "/f/books/59421/dune-review/comment/7")
            out["post of a comment"] = await html_(post)
            seen = page.url
            await page.goto(site + "/about")
            out["not a post"] = await html_(post)   # the URL stays /about: no submission there
            await browser.close()
            return roles, {k: v[0][1] for k, v in out.items()}, seen

    roles, out, seen = asyncio.run(main())
    assert roles == {**dict(MEMBER_ROLES), "elsewhere": ""}
    assert out == {"role": True, "wrong role": False, "post of a comment": True, "not a post": False}
    assert seen == site + "/f/books/59421/"


def test_prep_actions_run_before_the_locator(site):
    """WebArena runs a target's prep_actions, then its locator; a failing prep action ends the others silently."""
    from playwright.async_api import async_playwright
    unfold = "document.querySelector('[data-index=\"actions\"]').querySelector('.admin__collapsible-title').click()"

    async def main():
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=collect.find_chromium(pw.chromium.executable_path))
            page, out = await browser.new_page(), []
            for prep in ([unfold], [], ["document.querySelector('#none').click()", unfold]):
                await page.goto(site + "/promo")
                target = {"url": "last", "locator": "document.querySelector('[name=\"simple_action\"]').value",
                          "prep_actions": prep, "required_contents": {"exact_match": "by_percent"}}
                out.append((await webarena.evaluate_config({"eval_types": ["program_html"], "program_html": [target]},
                                                           page, None))[0][1])
            await browser.close()
            return out

    assert asyncio.run(main()) == [True, False, False]


def test_tasks_with_url_and_page_helpers_are_runnable(tmp_path):
    """WebArena's reddit post-URL and GitLab member-role helpers load (the func: url is no site URL to check);
    the shopping helpers that read the store's admin API are refused without --shopping-admin."""
    reply = task(20, "Reply to the post", eval_types=["program_html"], program_html=[
        {"url": "func:reddit_get_post_url('__last_url__')",
         "locator": "document.querySelector('.submission__inner').outerText",
         "required_contents": {"must_include": ["worth it"]}}])
    role = task(21, "Add yjlou as a developer", eval_types=["program_html"], program_html=[
        {"url": "__SHOP__/byteblaze/dotfiles/-/project_members",
         "locator": "func:gitlab_get_project_memeber_role(__page__, 'yjlou')",
         "required_contents": {"must_include": ["Developer"]}}])
    rating = task(22, "Rate it", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:shopping_get_sku_latest_review_rating('B00J8RZL7I')",
         "required_contents": {"must_include": ["80"]}}])
    env = webarena.WebArena(write(tmp_path, [reply, role, rating]), SHOP)
    assert env.all_tasks() == ["20", "21"]
    assert env.tasks["20"]["eval"]["program_html"][0]["url"] == "func:reddit_get_post_url('__last_url__')"
    assert env.refused == {"22": "program_html: 'func:shopping_get_sku_latest_review_rating' reads the store's "
                                 "admin REST API: pass --shopping-admin USER:PASSWORD"}


# ---------------------------------------------------------------------------------------------
# The whole loop: collect.py runs the task file against the site.

async def moves(*ds):
    for d in ds:
        yield d


SCRIPTS = {   # what a person would do, as expert moves resolved to marks at run time
    "1": lambda: moves(envs.Move("click", css="#away"),   # off-site: blocked, the page stays
                       envs.Move("click", css="#contact"), envs.Move("type", css="#name", value="Ada"),
                       envs.Move("click", css="#send")),
    "2": lambda: moves(envs.Move("stop", value="1999")),
    "3": lambda: moves(envs.Move("click", css="#contact"), envs.Move("type", css="#name", value="Bob"),
                       envs.Move("click", css="#send")),
}


def scripted(name, env, task, seed):
    policy = collect.ExpertPolicy(task, None)
    policy.moves = SCRIPTS[task]()
    return policy


def test_collect_runs_webarena_tasks(tmp_path, site, monkeypatch, capsys):
    wrong = {**GREET, "task_id": 3, "intent": "Send the contact form with the name Ada (a scripted mistake: Bob)."}
    judged = task(4, "x", eval_types=["string_match"], reference_answers={"fuzzy_match": ["a"]})
    task_file = write(tmp_path, [GREET, ANSWER, judged, wrong])
    monkeypatch.setattr(collect, "make_policy", scripted)
    summary = collect.main(["--suite", "webarena", "--task-file", task_file, "--sites", f"shop={site}",
                            "--policy", "random", "--episodes", "1", "--out", str(tmp_path / "scripted"),
                            "--no-progress"])
    assert summary["errors"] == 0
    assert {t: v["success"] for t, v in summary["by_task"].items()} == {"1": 1.0, "2": 1.0, "3": 0.0}
    refused = [line for line in capsys.readouterr().out.splitlines() if "refused" in line]
    assert refused == ["webarena: 1 of 4 tasks refused, skipped (1: reference_answers.fuzzy_match needs WebArena's "
                       "LLM judge (not configured: --judge-api-base, --judge-model)); --check lists them"]
    eps = {e["task"]: e for e in metrics.load_dataset(tmp_path / "scripted", check_images=True)}
    assert eps["1"]["start_url"] == "__SHOP__/" and eps["1"]["viewport"] == [1280, 720]
    assert eps["1"]["instruction"] == GREET["intent"]
    assert [s["url"] for s in eps["1"]["steps"]][:3] == ["__SHOP__/", "__SHOP__/", "__SHOP__/form"]
    assert eps["1"]["meta"]["blocked"] == ["http://example.com/"]
    assert eps["2"]["steps"][-1]["action"]["value"] == "1999"
    import evaluate  # a recorded episode plays back against the same task file and sites, judged the same way
    for name in ("1", "2"):
        record = evaluate.main(["--playback", str(tmp_path / "scripted"), "--episode", eps[name]["id"],
                                "--task-file", task_file, "--sites", f"shop={site}"])
        assert record["success"] is record["recorded_success"] is True and not record["diverged"]

    monkeypatch.undo()   # the random policy: never the right form, never an answer
    summary = collect.main(["--suite", "webarena", "--task-file", task_file, "--sites", f"shop={site}",
                            "--policy", "random", "--tasks", "1,2", "--episodes", "1", "--max-steps", "8",
                            "--out", str(tmp_path / "random"), "--no-progress"])
    assert summary["episodes"] == 2 and summary["errors"] == 0 and summary["success_rate"] == 0


def test_evaluate_runs_webarena_tasks(tmp_path, site):
    """evaluate.py builds the suite from --task-file and --sites like collect.py does."""
    import evaluate
    res = evaluate.main(["--suite", "webarena", "--task-file", write(tmp_path, [GREET, ANSWER]),
                         "--sites", f"shop={site}", "--policy", "random", "--episodes", "1", "--max-steps", "4",
                         "--out", str(tmp_path / "eval"), "--no-progress"])
    assert res["episodes"] == 2 and res["errors"] == 0 and res["overall"]["success"]["micro"] == 0
