"""collect.py --suite webarena: WebArena-format task files run against a site served elsewhere -- here a
tiny local site this module starts (http.server on 127.0.0.1: a home page, a form, its result page)."""
import asyncio
import http.server
import json
import threading
import urllib.parse

import pytest

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
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


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
# Loading: every bad input is named, with where it is.

SHOP = ["shop=http://127.0.0.1:1"]


@pytest.mark.parametrize("data, sites, message", [
    ("[{", SHOP, "not valid JSON"),
    ([{**GREET, "intent": None}], SHOP, "task #0 (task_id 1): missing or invalid field 'intent'"),
    ([GREET, GREET], SHOP, "task_id 1 appears twice"),
    ([task(3, "x", start="__GITLAB__/explore", eval_types=["url_match"], reference_url="__GITLAB__/")],
     SHOP, "task #0 (task_id 3).start_url: site placeholder __GITLAB__ has no mapping: pass --sites gitlab=URL"),
    ([task(4, "x", eval_types=["string_match"], reference_answers={"fuzzy_match": ["a"]})],
     SHOP, "fuzzy_match needs WebArena's LLM judge"),
    ([task(5, "x", eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('X')",
         "required_contents": {"exact_match": "a"}}])],
     SHOP, "program_html[0]: 'func:' helpers"),
    ([task(6, "x", start="http://10.0.0.9/", eval_types=["url_match"], reference_url="__SHOP__/")],
     SHOP, "http://10.0.0.9/ is on none of the --sites origins"),
    ([task(7, "x", start="__SHOP__/ |AND| __SHOP__/about", eval_types=["url_match"], reference_url="__SHOP__/")],
     SHOP, "several start tabs"),
    ([{**task(8, "x", eval_types=["url_match"], reference_url="__SHOP__/"), "require_login": True}],
     SHOP, "require_login is set but there is no storage_state"),
    ([{**task(9, "x", eval_types=["url_match"], reference_url="__SHOP__/"),
       "storage_state": "./.auth/shop_state.json"}],
     SHOP, "storage_state './.auth/shop_state.json' not found"),
    ([task(10, "x", eval_types=["html_match"])], SHOP, "unknown eval type(s) ['html_match']"),
    ([GREET], ["shop:http://127.0.0.1:1"], "--sites 'shop:http://127.0.0.1:1': expected NAME=http(s)://"),
    ([GREET], [], "needs --sites NAME=URL"),
])
def test_bad_task_files_are_named(tmp_path, data, sites, message):
    with pytest.raises(SystemExit) as e:
        webarena.WebArena(write(tmp_path, data), sites)
    assert message in str(e.value), str(e.value)


def test_load_fills_placeholders_and_names_tasks(tmp_path):
    env = webarena.WebArena(write(tmp_path, GREET), ["shop=http://127.0.0.1:7770/"])   # one object, not a list
    assert env.all_tasks() == ["1"] and env.origins == ["http://127.0.0.1:7770"]
    assert env.url("1") == "http://127.0.0.1:7770/"
    assert env.tasks["1"]["eval"]["reference_url"] == "http://127.0.0.1:7770/result?name=Ada"
    assert env.public_url("http://127.0.0.1:7770/form?x=1") == "__SHOP__/form?x=1"
    state = tmp_path / "state.json"   # a storage_state file relative to the task file: its cookies are loaded
    cookie = {"name": "sid", "value": "1", "domain": "127.0.0.1", "path": "/"}
    state.write_text(json.dumps({"cookies": [cookie], "origins": []}))
    env = webarena.WebArena(write(tmp_path, {**GREET, "require_login": True, "storage_state": "state.json"}),
                            ["shop=http://127.0.0.1:7770"])
    assert env.tasks["1"]["storage_state"][0]["name"] == "sid"


def test_expert_policy_is_refused(tmp_path, site):
    with pytest.raises(SystemExit, match="WebArena-format tasks have no experts"):
        collect.main(["--suite", "webarena", "--task-file", write(tmp_path, [GREET]), "--sites", f"shop={site}",
                      "--out", str(tmp_path / "out"), "--no-progress"])


# ---------------------------------------------------------------------------------------------
# The evaluators on real pages (WebArena's semantics: stripped, unquoted, lowercased).

def test_string_match_semantics():
    check = lambda refs, answer: asyncio.run(webarena.evaluate_config(
        {"eval_types": ["string_match"], "reference_answers": refs},
        None, answer))[0][1]
    assert check({"exact_match": "1999"}, " '1999' ") and not check({"exact_match": "1999"}, "in 1999")
    assert check({"exact_match": "Ada Lovelace"}, '"ada lovelace"')
    assert check({"must_include": ["Lyon", "Porto"]}, "Porto, then Lyon")
    assert not check({"must_include": ["Lyon", "Oslo"]}, "Lyon")
    # one lone word must be a whole token (WebArena tokenizes); several references are plain substrings
    assert not check({"must_include": ["4"]}, "It took 14 days") and check({"must_include": ["4"]}, "4 days")
    assert check({"must_include": ["4", "day"]}, "14 days")
    assert not check({"exact_match": "N/A"}, None)   # no answer (stopped by the step limit) fails


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
                                   "exact, prefix only": False, "locator": True, "locator misses": False,
                                   "other page, whole html": True, "all targets": False}


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


def test_collect_runs_webarena_tasks(tmp_path, site, monkeypatch):
    wrong = {**GREET, "task_id": 3, "intent": "Send the contact form with the name Ada (a scripted mistake: Bob)."}
    task_file = write(tmp_path, [GREET, ANSWER, wrong])
    monkeypatch.setattr(collect, "make_policy", scripted)
    summary = collect.main(["--suite", "webarena", "--task-file", task_file, "--sites", f"shop={site}",
                            "--policy", "random", "--episodes", "1", "--out", str(tmp_path / "scripted"),
                            "--no-progress"])
    assert summary["errors"] == 0
    assert {t: v["success"] for t, v in summary["by_task"].items()} == {"1": 1.0, "2": 1.0, "3": 0.0}
    eps = {e["task"]: e for e in metrics.load_dataset(tmp_path / "scripted", check_images=True)}
    assert eps["1"]["start_url"] == "__SHOP__/" and eps["1"]["viewport"] == [1280, 720]
    assert eps["1"]["instruction"] == GREET["intent"]
    assert [s["url"] for s in eps["1"]["steps"]][:3] == ["__SHOP__/", "__SHOP__/", "__SHOP__/form"]
    assert eps["1"]["meta"]["blocked"] == ["http://example.com/"]
    assert eps["2"]["steps"][-1]["action"]["value"] == "1999"

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
