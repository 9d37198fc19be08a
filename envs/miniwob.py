"""envs/miniwob.py -- MiniWoB++: the `miniwob` package's HTML tasks served by a static HTTP server
on 127.0.0.1, a seeded episode per (task, seed) (Math.seedrandom), the page's own reward (its WOB_*
globals), and scripted experts for 14 tasks (each reads the instruction and the DOM and yields
Moves; the episode loop resumes it after the previous move has run and the page has settled).
"""
import functools
import http.server
import os
import re
import threading

from envs import JS_NORM, MONTHS, Environment, Move, js_fn, reveal, where

VIEWPORT = (160, 210)          # CSS px: the task area of every MiniWoB++ page
SCALE = 3                      # device scale factor: a legible 480x630 screenshot
EPISODE_MAX_MS = 2**31 - 1     # MiniWoB's own 10 s clock would end slow episodes; >= 2^31 overflows setTimeout


def serve_directory(root):
    """A quiet threaded static HTTP server on 127.0.0.1 (a free port); returns (server, base_url)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=root))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class MiniWoB(Environment):
    suite = "miniwob"
    viewport, scale = VIEWPORT, SCALE
    reuse_page = True   # the next episode of the same task starts in the loaded page (False: load it every time)

    def __init__(self):
        import miniwob
        self.root = os.path.join(os.path.dirname(miniwob.__file__), "html")
        self.server, self.base = serve_directory(self.root)
        self.origins = [self.base]

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def url(self, task):
        return f"{self.base}/miniwob/{task}.html"

    def public_url(self, url):
        """URLs are stored with the server's port replaced by a placeholder (WebArena style), so a
        dataset does not depend on which free port a run happened to get."""
        return url.replace(self.base, "__MINIWOB__")

    def has_task(self, task):
        return os.path.exists(os.path.join(self.root, "miniwob", f"{task}.html"))

    def all_tasks(self):
        """The tasks with an expert: the suite has ~125, most of them not written for here."""
        return sorted(t for t in EXPERTS if self.has_task(t))

    def expert(self, task):
        return EXPERTS.get(task)   # looked up per call: tests swap experts in

    async def reset(self, page, task, seed):
        """Start a seeded episode; returns (instruction, fields). A page already showing the task starts
        its next problem in place (MiniWoB's own core.startEpisodeReal: a reload costs ~150 ms of CPU,
        and the screenshots are the same bytes as after one, tests/test_collect.py); else it is loaded.

        NL tasks return {utterance, fields} from getUtterance; the fields are the task's own
        parse of the instruction and are kept in the episode's meta (they are not shown to models).
        """
        if not self.reuse_page or page.url != self.url(task):
            await page.goto(self.url(task), wait_until="load")
        # the page's scripts are synchronous: after "load", core and genProblem exist. The first render
        # of a fresh browser can paint with a fallback font (seen on the date field): wait for fonts.
        # Int seeds go in as JS numbers: seedrandom hashes "3" and 3 differently.
        return await page.evaluate("""async (seed) => {
            if (window.__mag) window.__mag.leaving = false;
            await document.fonts.ready;
            core.EPISODE_MAX_TIME = EPISODE_MAX_MS;
            if (window.jQuery) jQuery.fx.off = true;
            Math.seedrandom(seed);
            core.startEpisodeReal();
            const u = core.getUtterance();
            return typeof u === 'string' ? [u, null] : [u.utterance, u.fields || null];
        }""".replace("EPISODE_MAX_MS", str(EPISODE_MAX_MS)), seed)

    async def status(self, page):
        """(done, reward, success) from the page's own globals; success = raw reward > 0."""
        done, raw = await page.evaluate("[WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]")
        return bool(done), float(raw), bool(done and raw > 0)

    # evaluate(): the default. An episode that ended before the page said done (stop() or the step
    # limit) has failed.


# ----------------------------------------------------------------------------------------------
# The experts.

async def index_of(page, css, js_pred, arg=None):
    """Index (in querySelectorAll(css) order) of the first element for which js_pred(el, arg) is true, or -1."""
    return await page.evaluate(
        f"([css, arg]) => {{ {JS_NORM} const pred = {js_pred};"
        " return Array.from(document.querySelectorAll(css)).findIndex(e => pred(e, arg)); }", [css, arg])


def quoted(instruction):
    return re.findall(r'"([^"]*)"', instruction)


async def solve_click_button(page, instruction):
    """Click the button whose text is quoted in the instruction (all such buttons are correct)."""
    yield Move("click", css="#area button", text=quoted(instruction)[0],
               why="to press the button the task asks for")


async def solve_click_link(page, instruction):
    """Click the span.alink whose text is quoted (all links with that text are correct)."""
    yield Move("click", css="#area span.alink", text=quoted(instruction)[0],
               why="to follow the link the task names")


async def solve_enter_text(page, instruction):
    """Type the quoted text into #tt and press Submit."""
    yield Move("type", css="#tt", value=quoted(instruction)[0], why="to enter the requested text")
    yield Move("click", css="#subbtn", why="to submit the text")


async def solve_login_user(page, instruction):
    """Type username and password (quoted, in that order) and press Login."""
    user, pw = quoted(instruction)[:2]
    yield Move("type", css="#username", value=user, why=f"to log in as {user}")
    yield Move("type", css="#password", value=pw, why=f"to log in as {user}")
    yield Move("click", css="#subbtn", why=f"to log in as {user}")


async def solve_click_checkboxes(page, instruction):
    """Tick the checkbox of each label listed in 'Select a, b and click Submit.' (or 'nothing'), then Submit."""
    listed = re.match(r"Select (.*) and click Submit\.", instruction).group(1)
    wanted = set() if listed == "nothing" else set(listed.split(", "))
    labels = await page.evaluate("() => Array.from(document.querySelectorAll('#boxes label'))"
                                 ".map(l => l.textContent.trim())")
    for i, name in enumerate(labels):
        if name in wanted:
            yield Move("click", css=f"#ch{i}", why=f"to tick {name}")
    yield Move("click", css="#subbtn", why="to submit the selection")


async def solve_choose_list(page, instruction):
    """Select the named option in the <select>, then Submit."""
    item = re.match(r"Select (.*) from the list and click Submit\.", instruction).group(1)
    yield Move("select", css="#options", value=item, why=f"to choose {item}")
    yield Move("click", css="#area button", why="to submit the choice")


async def solve_click_tab_2(page, instruction):
    """Find which tab panel holds a link with the quoted text, open that tab if hidden, click the link."""
    word = quoted(instruction)[0]
    tab = await page.evaluate(js_fn("w", """
        const panels = Array.from(document.querySelectorAll('#area > div[id^=tabs-]'));
        const vis = panels.findIndex(p => p.style.display !== 'none' && p.querySelector('span.alink') &&
            Array.from(p.querySelectorAll('span.alink')).some(s => norm(s.textContent) === w));
        if (vis >= 0) return panels[vis].id;
        return panels.find(p => Array.from(p.querySelectorAll('span.alink')).some(s => norm(s.textContent) === w)).id;
    """), word)
    if not await page.evaluate("(id) => document.getElementById(id).offsetParent !== null", tab):
        yield Move("click", css="#area ul li a", text="Tab #" + tab.split("-")[1],
                   why="to show the tab that holds the link")
    yield Move("click", css=f"#{tab} span.alink", text=word, why="to follow the link the task names")


async def solve_use_autocomplete(page, instruction):
    """Type the required prefix, then click a suggestion that also has the required suffix
    (if it is not visible, type the full item so that it becomes the first suggestion)."""
    q = quoted(instruction)
    start, end = q[0], (q[1] if len(q) > 1 else "")
    yield Move("type", css="#tags", value=start, why=f"to list the suggestions starting with {start}")
    items = await page.evaluate("() => Array.from(document.querySelectorAll('ul.ui-autocomplete li.ui-menu-item'))"
                                ".map(d => [d.textContent.replace(/\\s+/g, ' ').trim(),"
                                " d.getBoundingClientRect().bottom])")
    k = next(i for i, (t, _) in enumerate(items) if t.startswith(start) and t.endswith(end))
    item = items[k][0]
    if items[k][1] > 209:
        yield Move("type", css="#tags", value=item, why=f"to bring {item} to the top of the suggestions")
        k = 0
    yield Move("click", css="ul.ui-autocomplete li.ui-menu-item", nth=k, why=f"to pick {item}")
    yield Move("click", css="#subbtn", why="to submit the choice")


async def solve_enter_date(page, instruction):
    """<input type=date>: a centre click focuses the *year* segment, so type the year there,
    Shift+Tab twice to the month segment and press the month/day digits (segments auto-advance)."""
    mm, dd, yyyy = re.search(r"(\d\d)/(\d\d)/(\d{4})", instruction).groups()
    yield Move("type", css="#tt", value=yyyy, why="to enter the year")
    yield Move("press", value="Shift+Tab", why="to move back to the day")
    yield Move("press", value="Shift+Tab", why="to move back to the month")
    for i, ch in enumerate(mm + dd):
        yield Move("press", value=ch, why="to enter the month" if i < 2 else "to enter the day")
    yield Move("click", css="#subbtn", why="to submit the date")


async def solve_navigate_tree(page, instruction):
    """Expand collapsed ancestor folders (click their span.folder) top-down until an item with the
    quoted name is visible, then click it: a folder via its span.folder, a file via its <li>."""
    name = quoted(instruction)[0]
    for _ in range(10):
        plan = await page.evaluate(js_fn("name", """
            const spans = Array.from(document.querySelectorAll('#tree span'));
            const hits = spans.filter(s => norm(s.textContent) === name);
            const shown = hits.filter(s => s.offsetParent !== null);
            const folders = Array.from(document.querySelectorAll('#tree span.folder'));
            if (shown.length) {
                const s = shown[0];
                if (s.classList.contains('folder'))
                    return ['span', folders.filter(f => norm(f.textContent) === name).indexOf(s)];
                const lis = Array.from(document.querySelectorAll('#tree li')).filter(l => norm(l.textContent) === name);
                return ['li', lis.indexOf(s.parentElement)];
            }
            // outermost collapsed ancestor of the first hit
            let top = null;
            for (let li = hits[0].parentElement.parentElement.closest('li'); li; li = li.parentElement.closest('li'))
                if (li.querySelector(':scope > ul').style.display === 'none') top = li;
            const f = top.querySelector(':scope > span.folder');
            const t = norm(f.textContent);
            return ['expand', folders.filter(x => norm(x.textContent) === t).indexOf(f), t];
        """), name)
        kind, k = plan[0], plan[1]
        css, text = ("#tree li", name) if kind == "li" else ("#tree span.folder", name if kind == "span" else plan[2])
        yield reveal(page, css, text, k)
        yield Move("click", css=css, text=text, nth=k,
                   why=f"to open the {text} folder" if kind == "expand" else f"to select {name}")
        if kind != "expand":
            return


async def solve_search_engine(page, instruction):
    """Search for the quoted name, go to page (n-1)//3+1 of the results, click result (n-1)%3 there."""
    term = quoted(instruction)[0]
    n = int(re.search(r"click the (\d+)(?:st|nd|rd|th) search result", instruction).group(1)) - 1
    yield Move("type", css="#search-text", value=term, why=f"to search for {term}")
    yield Move("click", css="#search", why="to run the search")
    if n // 3:
        yield Move("click", css="#pagination a", text=str(n // 3 + 1),
                   why=f"to go to the page of result {n + 1}")
    yield Move("click", css="#page-content a.search-title", nth=n % 3, why=f"to open result number {n + 1}")


_SOCIAL_MENU = {"Share via DM": "share", "Copy link to Tweet": "copy", "Embed Tweet": "embed",
                "Mute": "menu-user", "Block": "block-user", "Report": "report"}
_SOCIAL_WHY = {   # the purpose of each action's click, {} the user
    "Reply": "to reply to {}'s post", "Retweet": "to retweet {}'s post", "Like": "to like {}'s post",
    "Share via DM": "to share {}'s post by direct message",
    "Copy link to Tweet": "to copy the link to {}'s post", "Embed Tweet": "to embed {}'s post",
    "Mute": "to mute {}", "Block": "to block {}", "Report": "to report {}"}


async def solve_social_media(page, instruction):
    """Find the first post by the user; click reply/retweet/like directly, or open its 'more' menu
    and click the menu entry. Scrolls the #area list (wheel) to bring targets into view.
    Icons are CSS `content:url()` images swapped on :hover; while the hover image loads the icon
    collapses, so a plain click (whose own mouse move triggers the swap) misses: hover first, then
    click once the next observation shows the hovered icon."""
    user, action = re.search(r"For the user (\S+), click on the \"(.*)\" button", instruction).groups()
    k = await index_of(page, "#area .media", "(e, u) => e.querySelector('.username').textContent === u", user)
    if action in ("Reply", "Retweet", "Like"):
        css = f"#area .{action.lower()}"
    else:
        yield reveal(page, "#area .more", None, k)
        yield Move("hover", css="#area .more", nth=k, why=f"to show the menu icon of {user}'s post")
        yield Move("click", css="#area .more", nth=k, why=f"to open the menu of {user}'s post")
        css = f"#area ul li.{_SOCIAL_MENU[action]}"
    yield reveal(page, css, None, k)
    if action in ("Reply", "Retweet", "Like"):
        yield Move("hover", css=css, nth=k, why=f"to show the {action.lower()} icon of {user}'s post")
    yield Move("click", css=css, nth=k, why=_SOCIAL_WHY[action].format(user))


_FORWARD_TEMPLATES = [
    'Find the email by NAME and forward that email to DEST.', 'Locate the email by NAME. Forward that email to DEST.',
    'Look for the email from NAME and forward to DEST.', 'Forward to DEST the email from NAME.',
    'Send DEST the email you got from NAME.', 'Go to the email by NAME. Send it to DEST.',
    'Send to DEST the email you got from NAME.', 'Forward the email from NAME to DEST.',
    'Send DEST the email from NAME.', 'Please find the message by NAME, then send it to DEST.',
    'Please forward the information from NAME to DEST.', 'DEST wants the email you got from NAME.',
    'DEST wants the email NAME sent to you.', 'The mail by NAME should be forwarded to DEST.',
    'Please forward to DEST the email by NAME.', 'Give DEST the message you received from NAME,',
    'Forward the mail by NAME to DEST.', 'Go to the message from NAME and send it to DEST.',
    'DEST is waiting for the email by NAME.', 'NAME wants his or her message to be sent to DEST.',
    'I want the mail by NAME to be sent to DEST.', 'Forward to DEST the email you got from NAME.',
    'Please forward the message from NAME to DEST.', 'Please find the mail by NAME. Forward it to DEST.',
    'Navigate to the message from NAME and send it to DEST.', 'Forward DEST the email from NAME.',
    'Forward DEST the message NAME sent you.', 'Send DEST the information NAME sent to you.',
    'Search for the mail NAME sent you and send it to DEST.', 'Get NAME email and then forward it to DEST please.']


async def solve_email_inbox_forward_nl(page, instruction):
    """Parse NAME/DEST with the task's NL templates (keeping parses where both are inbox senders),
    open NAME's email, click Forward, type DEST into the 'to' field, click send."""
    senders = await page.evaluate("() => Array.from(document.querySelectorAll('#main .email-sender'))"
                                  ".map(e => e.textContent)")
    parses = []
    for t in _FORWARD_TEMPLATES:
        rx = "^" + re.escape(t).replace("NAME", "(?P<name>.+)").replace("DEST", "(?P<dest>.+)") + "$"
        m = re.match(rx, instruction)
        if m:
            parses.append((m["name"] in senders and m["dest"] in senders, m["name"], m["dest"]))
    _, name, dest = max(parses, key=lambda p: p[0])
    yield reveal(page, "#main .email-thread", None, senders.index(name))
    yield Move("click", css="#main .email-thread", nth=senders.index(name),
               why=f"to open the email from {name}")
    yield Move("click", css="#email .email-forward", why="to forward the email")
    yield Move("type", css="#forward .forward-sender", value=dest, why=f"to address the email to {dest}")
    yield Move("click", css="#send-forward", why="to send the forwarded email")


async def _pick_airport(page, field, wanted, why):
    """Type `wanted` (city or airport code) into an autocomplete field and click a suggestion containing it
    (`why`: what picking it is for)."""
    yield Move("type", css=field, value=wanted, why=f"to look up {wanted}")
    menu = "ul.ui-autocomplete:not([style*='display: none']) li.ui-menu-item"
    items = await page.evaluate("(css) => Array.from(document.querySelectorAll(css))"
                                ".map(e => e.textContent.trim())", menu)
    k = next(i for i, t in enumerate(items) if f"({wanted})" in t or t.startswith(wanted + " ("))
    if await where(page, menu, None, k) != "ok":   # scrolled out of the 80px-high menu: narrow the search
        yield Move("type", css=field, value=items[k], why=f"to narrow the suggestions to {items[k]}")
        k = 0
    yield Move("click", css=menu, nth=k, why=why)


async def solve_book_flight(page, instruction):
    """Fill From/To via their autocomplete menus, open the jQuery-UI datepicker (opens on Dec 2016, the
    maxDate), click Prev until the target month shows, click the day, Search, then scroll the results
    and click 'Book flight' of the cheapest/shortest flight."""
    m = re.search(r"Book the (\w+) one-way flight from: (.+) to: (.+) on (\d\d)/(\d\d)/(\d{4})\.", instruction)
    goal, origin, dest, mm, dd, yyyy = m.groups()
    yield _pick_airport(page, "#flight-from", origin, why=f"to fly from {origin}")
    yield _pick_airport(page, "#flight-to", dest, why=f"to fly to {dest}")
    yield Move("click", css="#datepicker", why="to open the calendar")
    target = f"{MONTHS[int(mm) - 1]} {yyyy}"
    for _ in range(24):
        shown = await page.evaluate("() => document.querySelector('#ui-datepicker-div .ui-datepicker-title')"
                                    ".textContent"
                                    ".replace(/\\s+/g, ' ').trim()")
        if shown == target:
            break
        later = (int(shown.split()[1]), MONTHS.index(shown.split()[0])) > (int(yyyy), int(mm) - 1)
        yield Move("click", css="#ui-datepicker-div a.ui-datepicker-" + ("prev" if later else "next"),
                   why=f"to get to {target}")
    yield Move("click", css="#ui-datepicker-div td[data-handler=selectDay] a", text=str(int(dd)),
               why="to pick the departure date")
    yield Move("click", css="#search", why="to search for flights")
    key = "price" if goal == "cheapest" else "duration"
    vals = await page.evaluate(f"() => Array.from(document.querySelectorAll('#results .flight')).map("
                               f"f => +f.querySelector('[data-{key}]').getAttribute('data-{key}'))")
    k = vals.index(min(vals))
    yield reveal(page, "#results .flight-price", None, k)
    yield Move("click", css="#results .flight-price", nth=k, why=f"to book the {goal} flight")


EXPERTS = {
    "click-button": solve_click_button,
    "click-link": solve_click_link,
    "enter-text": solve_enter_text,
    "login-user": solve_login_user,
    "click-checkboxes": solve_click_checkboxes,
    "choose-list": solve_choose_list,
    "click-tab-2": solve_click_tab_2,
    "use-autocomplete": solve_use_autocomplete,
    "enter-date": solve_enter_date,
    "navigate-tree": solve_navigate_tree,
    "search-engine": solve_search_engine,
    "social-media": solve_social_media,
    "email-inbox-forward-nl": solve_email_inbox_forward_nl,
    "book-flight": solve_book_flight,
}
