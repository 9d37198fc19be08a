"""envs/cms/experts.py -- the content-management suite's scripted experts: log in to Wagtail's admin (or read
the public site), then work through it like an editor who knows it. One expert per template
(tasks/cms.json groups its tasks by `template`); it gets the task's name for the variant's route and fields,
and reads the task's parameters back out of the instruction (envs.django_suite.parse_instruction). A step
that is itself a sequence of moves (log in, open a page's editor) is yielded whole: envs.flatten.

Wagtail's editor keeps a header at the top and the action bar at the bottom of the window, over the form:
a field scrolled under either has no mark, so every move here goes through `reach`, which scrolls until
the target's centre is the topmost thing on screen (envs.reach only brings it inside the window).

The "..." menu beside a page's title gets no marks: it is drawn outside an element that clips its content,
and the observation (assets/observe.js) clips every element by its scrolling ancestors. So the experts reach
a page's Move, Copy and Delete through its row's menu in the search results. The sidebar's fly-out menus
(Settings: Users, Sites, Redirects, ...) are opened as an editor does, from the sidebar: a fixed menu is
clipped only by the ancestors on its chain of containing blocks, not by the scrolling menu it sits in.

Every move says why it is made (`Move.why`, the step's `purpose`: "to publish the page"), written at the
step of the template that makes it; a shared step (a menu, a chooser) takes it from its caller where the
purpose is the caller's.
"""
import datetime
import re

from envs import JS_NORM, ExpertError, Move, django_suite

USER, PASSWORD = "admin", "admin-pass-2026"   # seeded by envs/cms (town/management/commands/seed.py)

FOOTER_MORE = "footer .w-dropdown__toggle"               # the arrow beside the action bar's main button
SAVE_DRAFT = "footer button.action-save"                 # "Save draft" (or "Replace current draft")
PUBLISH = "footer button[name=action-publish]"           # "Publish" ("Publish this version")
MENU_ITEM = ".w-dropdown__content a, .w-dropdown__content button"   # an item of a dropdown menu
SUBMIT = "main form [type=submit]"   # a form's submit button (the sidebar's search has one too)
MODAL = ".modal.in"   # a chooser's modal, once shown
WAIT_S = 5   # how long a target may take to appear (a script's widget, a modal) before its move fails


def parse_instruction(task, instruction):
    return django_suite.parse_instruction("cms", task, instruction)


# Where is the target: 'ok' when its centre is on screen and nothing lies over it, else which way to scroll;
# with the index of the element among the matches (nth, or when nth is null the first one laid out: menus
# and dialogs keep hidden copies of their items). 'stale' when it is there but the marks of the last
# observation do not hold it: the page changed after its screenshot (a chooser's level arriving late on a
# busy machine), and its move would go to a container's mark (the whole dialog).
JS_CLEAR = JS_NORM + """
  let els = Array.from(document.querySelectorAll(css));
  if (text !== null) els = els.filter(e => norm(e.textContent) === text);
  const k = nth !== null ? nth : Math.max(0, els.findIndex(e => e.getClientRects().length));
  const el = els[k];
  if (!el) return ['missing', k];
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height) return ['hidden', k];
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (y < 0) return ['up', k];
  if (y > innerHeight) return ['down', k];
  const hit = document.elementFromPoint(x, y);
  const label = hit && hit.tagName === 'LABEL' && hit.control === el;
  if (!(hit && (hit === el || el.contains(hit) || hit.contains(el) || label)))
    return [y > innerHeight / 2 ? 'down' : 'up', k];
  const mag = window.__mag;
  if (!mag || !mag.marks.length) return ['ok', k];
  const mark = mag.marks[(mag.markOf(el) || 0) - 1];   // what the harness will resolve the move to
  const small = m => {
    const b = m.getBoundingClientRect();
    return b.width * b.height < innerWidth * innerHeight / 4;
  };
  return [mark && (mark === el || el.contains(mark) || small(mark)) ? 'ok' : 'stale', k];
"""


async def reach(page, op, css, text=None, nth=None, value=None, scrolls=12, why=None):
    """The move on a target (made `why`), after the wheel scrolls that bring it out from under the editor's
    header and action bar (or from outside the window). A target not there or not laid out yet (a widget a
    script builds, a menu opening, a modal loading) is waited for, up to WAIT_S on a slow machine."""
    waits, looks = int(WAIT_S * 10), 2
    while True:
        where, k = await page.evaluate(f"([css, text, nth]) => {{ {JS_CLEAR} }}", [css, text, nth])
        if where in ("missing", "hidden") and waits > 0:
            waits -= 1
            await page.wait_for_timeout(100)
            continue
        if where == "stale" and looks > 0:   # a hover, harmless, makes the harness observe the page anew
            looks -= 1
            await page.wait_for_timeout(300)
            yield Move("hover", css=css, text=text, nth=k, why=why)   # on the way to the move: its purpose
            continue
        if where not in ("up", "down") or scrolls == 0:
            break
        scrolls -= 1
        yield Move("scroll", value=where)
    yield Move(op, css=css, text=text, nth=k, value=value, why=why)


async def navigate(page, css, text=None, why=None):
    """A click that opens another page, then the wait until that page has loaded: the expert reads it next,
    and the harness's settle gives up after 2 s on a busy machine, before a slow page is there."""
    before = page.url
    yield reach(page, "click", css, text=text, why=why)
    for _ in range(int(WAIT_S * 20)):
        if page.url != before:
            break
        await page.wait_for_timeout(50)
    await page.wait_for_load_state("load")


async def visible(page, css, what, tries=int(WAIT_S * 20)):
    """Wait until `css` matches a laid-out element (a dropdown, a modal, a side panel opening)."""
    for _ in range(tries):
        shown = await page.evaluate("(css) => [...document.querySelectorAll(css)]"
                                    ".some(e => e.getClientRects().length)", css)
        if shown:
            return
        await page.wait_for_timeout(50)
    raise ExpertError(f"{what} did not open ({css}) on {page.url}")


async def login(page):
    """Admin episodes start on the login form (/admin/ redirects there: episodes start logged out)."""
    yield Move("type", css="#id_username", value=USER, why="to sign in to the admin")
    yield Move("type", css="#id_password", value=PASSWORD, why="to sign in to the admin")
    yield Move("click", css="form.login-form button[type=submit]", why="to sign in to the admin")


async def find_page(page, title):
    """Log in, then the dashboard's "Search all pages" box with the page's title."""
    yield login(page)
    yield Move("type", css="#id_q", value=title, why=f"to find the page '{title}'")
    yield Move("press", value="Enter", why="to run the search")


async def open_editor(page, title):
    """Log in, search the page; the result with the page's title opens its editor."""
    yield find_page(page, title)
    yield reach(page, "click", "td.title a", text=title, why=f"to open the editor of '{title}'")


async def menu(page, toggle, item, opens, why):
    """Open a dropdown menu (its toggle's css; `opens`: why) and click the item with that text (`why`)."""
    yield reach(page, "click", toggle, why=opens)
    await visible(page, ".w-dropdown__content", "the dropdown menu")
    yield reach(page, "click", MENU_ITEM, text=item, why=why)


async def publish(page, why):
    yield menu(page, FOOTER_MORE, "Publish", "to open the menu with Publish", why)


async def save_draft(page, why):
    yield reach(page, "click", SAVE_DRAFT, why=why)


async def row_action(page, title, item, why):
    """Log in, search the page, then its row's "More options" menu in the results: Move, Copy, Delete, ...
    (`why`: what the item does)."""
    yield find_page(page, title)
    yield menu(page, f"td.title button[aria-label=\"More options for '{title}'\"]", item,
               f"to open the actions menu of '{title}'", why)


async def listing(page, section=None):
    """Log in, then the dashboard's page count: the listing of the home page's children; with a section,
    that section's own listing (the arrow at the end of its row)."""
    yield login(page)
    yield Move("click", css=".w-summary a[href^='/admin/pages/']", why="to list the site's pages")
    if section is not None:
        yield navigate(page, f"a[aria-label=\"Explore child pages of '{section}'\"]",
                       why=f"to list the pages under '{section}'")


async def choose_page(page, title, why, path=()):
    """In the page chooser's modal: explore down the pages of `path` (titles, from the level the chooser
    opens on: the current choice's parent, or the root), then choose the page (`why`)."""
    await visible(page, f"{MODAL} a.choose-page", "the page chooser")
    for parent in path:
        explore = f"{MODAL} a.navigate-pages[title=\"Explore subpages of '{parent}'\"]"
        yield reach(page, "click", explore, why=f"to show the pages under '{parent}'")
        await gone(page, explore, f"the level under {parent!r} in the page chooser")
    yield reach(page, "click", f"{MODAL} a.choose-page", text=title, why=why)


async def search_page(page, title, why):
    """In the page chooser's modal: its search box (results replace the listing as one types), then the
    result with the page's title (`why`)."""
    await visible(page, f"{MODAL} a.choose-page", "the page chooser")
    yield reach(page, "type", f"{MODAL} input[name=q]", value=title, why=f"to find the page '{title}'")
    await visible(page, f"{MODAL} a.choose-page[data-title=\"{title}\"]", f"{title!r} among the results")
    yield reach(page, "click", f"{MODAL} a.choose-page", text=title, why=why)


async def gone(page, css, what, tries=int(WAIT_S * 20)):
    """Wait until nothing matches `css` (a level of the chooser replaced by the next one)."""
    for _ in range(tries):
        if not await page.locator(css).count():
            return
        await page.wait_for_timeout(50)
    raise ExpertError(f"{what} did not open on {page.url}")


# ----------------------------------------------------------------------------------------------
# The experts, one per template.

async def solve_publish(page, instruction, task):
    """The page's editor, then Publish from the action bar's menu."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield publish(page, f"to publish '{p['title']}'")


FIELD = {"draft-intro": "#id_intro", "draft-title": "#id_title", "draft-location": "#id_location",
         "event-location": "#id_location", "article-intro": "#id_intro"}
VALUE = {"draft-intro": "new_intro", "draft-title": "new_title", "draft-location": "location",
         "event-location": "location", "article-intro": "new_intro"}
EDIT = {"draft-intro": "to enter the article's new intro", "draft-title": "to enter the page's new title",
        "draft-location": "to enter the event's new location",
        "event-location": "to enter the event's new location",
        "article-intro": "to enter the article's new intro"}   # why the field is typed in


async def solve_save_draft(page, instruction, task):
    """One field changed in the editor, then Save draft (the live page keeps its content)."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield reach(page, "type", FIELD[task], value=p[VALUE[task]], why=EDIT[task])
    yield save_draft(page, "to save the change as a draft only")


async def enter_date(page, css, date, what):
    """A date field (`what` it holds: "the event's date"): a click opens its calendar (on the month of the
    date already there, or today's), then the date typed as YYYY-MM-DD (typing's own click closes the
    calendar). Typing at once would race the calendar, which reads the field 100 ms after the click: half
    typed, it shows today's month; done, the date's."""
    yield reach(page, "click", css, why=f"to open the calendar for {what}")
    await visible(page, ".xdsoft_datetimepicker", "the calendar")
    yield reach(page, "type", css, value=date, why=f"to set {what} to {date}")


async def choose_snippet(page, field, name, why):
    """A snippet chooser field: its "Choose ..." button (or, when one is chosen, its "..." menu's "Choose
    another ..."), then the snippet's name in the modal (`why`)."""
    box = f"[data-contentpath={field}]"
    await visible(page, box, f"the {field} field")
    if await page.locator(f"{box} .chooser.blank").count():
        yield reach(page, "click", f"{box} .unchosen button[data-chooser-action-choose]",
                    why=f"to open the list of {field}s")
    else:
        yield reach(page, "click", f"{box} button[aria-label=Actions]",
                    why=f"to open the {field} field's menu")
        await visible(page, f"{box} .w-dropdown__content", "the chooser's menu")
        yield reach(page, "click", f"{box} .w-dropdown__content button[data-chooser-action-choose]",
                    why=f"to choose another {field}")
    await visible(page, f"{MODAL} a[data-chooser-modal-choice]", "the chooser")
    yield reach(page, "click", f"{MODAL} a[data-chooser-modal-choice]", text=name, why=why)


async def solve_edit_publish(page, instruction, task):
    """One field changed in the editor (a text, the date, the author from its chooser), then Publish."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    if task == "event-date":
        datetime.date.fromisoformat(p["new_date"])   # a malformed date is the task's bug, not the form's
        yield enter_date(page, "#id_start_date", p["new_date"], "the event's date")
    elif task == "article-author":
        yield choose_snippet(page, "author", p["author"], f"to make {p['author']} the article's author")
    else:
        yield reach(page, "type", FIELD[task], value=p[VALUE[task]], why=EDIT[task])
    yield publish(page, "to publish the change")


async def check(page, css, why, checked=True, text=None):
    """Click a checkbox (or its label, by text) when it is not as wanted (`why`)."""
    await visible(page, css, f"the box {css}")
    box = css if text is None else await page.evaluate(
        "([css, text]) => { const l = [...document.querySelectorAll(css)]"
        ".find(l => l.innerText.trim() === text); return l && l.control ? '#' + l.control.id : null; }",
        [css, text])
    if box is None:
        raise ExpertError(f"no box labelled {text!r} among {css} on {page.url}")
    if await page.is_checked(box) != checked:
        yield reach(page, "click", box, why=why)


async def solve_create_article(page, instruction, task):
    """News' listing, Add child page (articles are the only kind it takes), the form, then Publish or Save
    draft."""
    p = parse_instruction(task, instruction)
    yield listing(page, "News")
    yield Move("click", css="header a[aria-label='Add child page']", why="to start a new article in News")
    yield reach(page, "type", "#id_title", value=p["title"], why="to give the article its title")
    yield enter_date(page, "#id_date", p["date"], "the article's date")
    if "author" in p:
        yield choose_snippet(page, "author", p["author"], f"to make {p['author']} the article's author")
    if "intro" in p:
        yield reach(page, "type", "#id_intro", value=p["intro"], why="to write the article's intro")
    if "body" in p:   # Draftail: a contenteditable region, typed into like any text box
        yield reach(page, "type", "[data-contentpath=body] [contenteditable=true]", value=p["body"],
                    why="to write the article's text")
    if "category" in p:
        yield check(page, "[data-contentpath=categories] label", f"to file the article under {p['category']}",
                    text=p["category"])
    if "tag" in p:   # the tag box takes a tag when Enter is pressed
        yield reach(page, "type", "[data-contentpath=tags] .tagit-new input", value=p["tag"],
                    why=f"to tag the article '{p['tag']}'")
        yield Move("press", value="Enter", why="to add the tag")
    if task == "draft-article":
        yield save_draft(page, "to save the article as a draft")
    else:
        yield publish(page, "to publish the article")


async def solve_create_page(page, instruction, task):
    """Add child page in the section's listing (the home page's own listing for the top level, where the
    page type is chosen first), the form, Promote's "Show in menus" for a menu page, then Publish."""
    p = parse_instruction(task, instruction)
    section = {"create-event": "Events", "create-section-page": p.get("section")}.get(task)
    where = "at the top level" if section is None else f"under {section}"
    yield listing(page, section)
    yield Move("click", css="header a[aria-label='Add child page']", why=f"to add a new page {where}")
    if task == "create-menu-page":
        yield reach(page, "click", "main a", text="Standard page", why="to create a standard page")
    yield reach(page, "type", "#id_title", value=p["title"], why="to give the page its title")
    if task == "create-event":
        yield enter_date(page, "#id_start_date", p["date"], "the event's date")
        yield reach(page, "type", "#id_location", value=p["location"], why="to enter the event's location")
    yield reach(page, "type", "#id_intro", value=p["intro"], why="to write the page's intro")
    if task == "create-menu-page":
        yield reach(page, "click", "#tab-label-promote", why="to open the page's Promote settings")
        yield check(page, "#id_show_in_menus", "to show the page in the site's menus")
    yield publish(page, "to publish the new page")


async def solve_unpublish(page, instruction, task):
    """The editor's action bar menu: Unpublish, then its confirmation page."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield menu(page, FOOTER_MORE, "Unpublish", "to open the menu with Unpublish", "to unpublish the page")
    yield reach(page, "click", SUBMIT, text="Yes, unpublish it", why="to confirm taking the page offline")


async def solve_move(page, instruction, task):
    """The page's row menu in the search results: Move; on the move page, the parent chooser's "Choose
    another page", the new parent in the modal, then Confirm and, when Wagtail asks, its confirmation page's
    "Yes, move this page"."""
    p = parse_instruction(task, instruction)
    yield row_action(page, p["title"], "Move", "to move the page")
    yield menu(page, "main form button[aria-label=Actions]", "Choose another page",
               "to change the page's parent", "to open the page chooser")
    if task == "move-to-section":
        yield choose_page(page, p["new_section"], f"to move the page into {p['new_section']}")
    elif task == "move-to-top":
        home = await top_title(page)
        yield choose_page(page, home, f"to move the page directly under '{home}'")
    else:
        yield choose_page(page, p["new_parent"], f"to move the page under '{p['new_parent']}'",
                          path=[await section_of(page, p["title"])])
    yield navigate(page, SUBMIT, why="to confirm the new parent page")   # Confirm
    if page.url.rstrip("/").endswith("/confirm"):
        yield reach(page, "click", SUBMIT, why="to confirm the move")   # "Yes, move this page"


async def top_title(page):
    """The home page's title: the chooser lists it first on the level above the sections."""
    await visible(page, f"{MODAL} a.choose-page", "the page chooser")
    title = await page.evaluate(f"() => {{ const a = document.querySelector('{MODAL} a.choose-page');"
                                " return a && a.dataset.title; }")
    if not title:
        raise ExpertError(f"no page in the chooser on {page.url}")
    return title


async def section_of(page, title):
    """The section a page is in, as its move page's current-parent box shows it."""
    name = await page.evaluate("() => { const t = document.querySelector('.chooser__title');"
                               " return t && t.textContent.trim(); }")
    if not name:
        raise ExpertError(f"no current parent shown for {title!r} on {page.url}")
    return name


async def solve_copy(page, instruction, task):
    """The page's row menu in the search results: Copy; the copy form's new title and slug, "Publish copied
    page" as asked."""
    p = parse_instruction(task, instruction)
    yield row_action(page, p["title"], "Copy", "to copy the page")
    yield reach(page, "type", "#id_new_title", value=p["new_title"], why="to give the copy its title")
    yield reach(page, "type", "#id_new_slug", value=p["new_slug"], why="to give the copy its slug")
    live = task != "copy-page-draft"
    yield check(page, "#id_publish_copies", "to publish the copy" if live else "to keep the copy unpublished",
                live)
    yield reach(page, "click", SUBMIT, why="to create the copy")


async def solve_delete(page, instruction, task):
    """The page's row menu in the search results: Delete, then its confirmation page."""
    p = parse_instruction(task, instruction)
    yield row_action(page, p["title"], "Delete", "to delete the page")
    yield reach(page, "click", SUBMIT, why="to confirm the deletion")   # "Yes, delete it"


async def solve_revert(page, instruction, task):
    """The page's history (the clock icon in the editor's header): the "Draft saved" row of the editor's
    version, its "Review this version", then the revision's Publish this version / Replace current draft."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield navigate(page, "header a[aria-label=History]", why="to open the page's history")
    rows = await page.evaluate(js_rows("tbody tr", "td"))
    k = next((k for k, r in enumerate(rows) if r[0].startswith("Draft saved") and r[1] == p["editor"]), None)
    if k is None:
        raise ExpertError(f"no version saved by {p['editor']} in the history on {page.url}: {rows}")
    yield menu(page, f"tbody tr:nth-child({k + 1}) button[aria-label=Actions]", "Review this version",
               f"to open the actions of {p['editor']}'s version", f"to review {p['editor']}'s version")
    if task == "revert-publish":
        yield menu(page, FOOTER_MORE, "Publish this version", "to open the menu with Publish this version",
                   "to publish this version")
    else:
        yield save_draft(page, "to make this version the current draft")


def js_rows(row_css, cell_css):
    """A function listing the rows of a table as lists of their cells' normalised texts."""
    return (f"() => {{ {JS_NORM} return [...document.querySelectorAll('{row_css}')]"
            f".map(tr => [...tr.querySelectorAll('{cell_css}')].map(td => norm(td.innerText))); }}")


PROMOTE = {"set-slug": ("#id_slug", "new_slug", "to enter the page's new slug"),
           "set-seo-title": ("#id_seo_title", "seo_title", "to enter the page's search engine title"),
           "set-description": ("#id_search_description", "description",
                               "to enter the page's meta description")}


async def solve_promote(page, instruction, task):
    """The editor's Promote tab: the slug, the title tag, the meta description or "Show in menus"; Publish."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield reach(page, "click", "#tab-label-promote", why="to open the page's Promote settings")
    if task == "hide-from-menus":
        yield check(page, "#id_show_in_menus", "to stop showing the page in menus", False)
    else:
        css, name, why = PROMOTE[task]
        yield reach(page, "type", css, value=p[name], why=why)
    yield publish(page, "to publish the change")


async def snippets(page, model):
    """Log in, then Snippets in the sidebar and the model's listing ("Authors", "Categories")."""
    yield login(page)
    yield Move("click", css="#wagtail-sidebar a[href='/admin/snippets/']", why="to open the snippets")
    yield reach(page, "click", "main a", text=model, why=f"to list the {model.lower()}")


async def solve_snippet(page, instruction, task):
    """The snippet's listing: its Add button and form, or the snippet's row and its edit form; Save."""
    p = parse_instruction(task, instruction)
    model = "Authors" if task in ("add-author", "author-role") else "Categories"
    kind = "author" if model == "Authors" else "category"
    yield snippets(page, model)
    if task.startswith("add-"):
        yield reach(page, "click", "header a[href$='/add/']", why=f"to add a new {kind}")
        yield reach(page, "type", "#id_name", value=p["name"], why=f"to enter the new {kind}'s name")
        if task == "add-author":
            yield reach(page, "type", "#id_role", value=p["role"], why="to enter the author's role")
            yield reach(page, "type", "#id_email", value=p["email"], why="to enter the author's e-mail")
        else:
            yield reach(page, "type", "#id_slug", value=p["slug"], why="to enter the category's slug")
    else:
        yield reach(page, "click", "td.title a", text=p["name"], why=f"to edit the {kind} {p['name']}")
        if task == "author-role":
            yield reach(page, "type", "#id_role", value=p["role"], why="to enter the author's new role")
        else:
            yield reach(page, "type", "#id_name", value=p["new_name"], why="to enter the category's new name")
    yield reach(page, "click", "footer button[type=submit]", text="Save", why=f"to save the {kind}")


async def solve_moderation(page, instruction, task):
    """Submit: the editor's action bar menu. Approve / request changes: the dashboard's "Awaiting your
    review" row's menu (requesting changes asks for a comment in a dialog)."""
    p = parse_instruction(task, instruction)
    if task == "submit-moderation":
        yield open_editor(page, p["title"])
        yield menu(page, FOOTER_MORE, "Submit to Moderators approval", "to open the menu with Submit",
                   "to submit the draft for approval")
        return
    yield login(page)
    await visible(page, "#awaiting-review-section tbody tr", "the dashboard's review list")
    rows = await page.evaluate(js_rows("#awaiting-review-section tbody tr", "td"))
    k = next((k for k, r in enumerate(rows) if r and r[0] == p["title"]), None)
    if k is None:
        raise ExpertError(f"{p['title']!r} is not awaiting review on the dashboard: {rows}")
    toggle = f"#awaiting-review-section tbody tr:nth-child({k + 1}) button[aria-label=Actions]"
    opens = f"to open the review menu of '{p['title']}'"
    if task == "approve-page":
        yield menu(page, toggle, "Approve", opens, "to approve the changes")
        return
    yield menu(page, toggle, "Request changes", opens, "to send the page back to its editor")
    await visible(page, f"{MODAL} textarea", "the comment dialog")
    yield reach(page, "type", f"{MODAL} textarea", value=p["comment"],
                why="to write the comment for the editor")
    yield reach(page, "click", f"{MODAL} button[type=submit], {MODAL} input[type=submit]",
                why="to request the changes")


async def status_panel(page, why):
    """The editor's status side panel (the "i" in its header), opened once (`why`)."""
    if not await page.locator("[data-side-panel=status]:not([hidden])").count():
        yield reach(page, "click", "button[aria-label='Toggle status']", why=why)
        await visible(page, "[data-side-panel=status]", "the status panel")


async def solve_lock(page, instruction, task):
    """Lock: the status panel's Lock switch. Unlock: the Unlock button of the editor's "locked" banner."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    if task == "unlock-page":
        yield reach(page, "click", ".messages button", text="Unlock", why="to unlock the page")
        return
    yield status_panel(page, "to find the page's lock setting")
    yield reach(page, "click", "[data-side-panel=status] label.switch",   # the Lock switch
                why="to lock the page")


PRIVACY = {"password-protect": "Private, accessible with a shared password",
           "login-only": "Private, accessible to any logged-in users", "make-public": "Public"}
PRIVATE = {"password-protect": "to protect the page with a password",   # why that kind is chosen
           "login-only": "to show the page to logged-in users only", "make-public": "to make the page public"}


async def solve_privacy(page, instruction, task):
    """The status panel's "Change privacy": a dialog with the kinds of restriction (and the password)."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield status_panel(page, "to find the page's privacy setting")
    yield reach(page, "click", "[data-side-panel=status] button", text="Change privacy",
                why="to change who can see the page")
    await visible(page, "#set-privacy input[name=restriction_type]", "the privacy dialog")
    yield check(page, "#set-privacy label", PRIVATE[task], text=PRIVACY[task])
    if task == "password-protect":
        yield reach(page, "type", "#set-privacy #id_password", value=p["password"],
                    why="to set the page's password")
    yield reach(page, "click", "#set-privacy form [type=submit]", why="to save the page's privacy")


SETTINGS_MENU = "#wagtail-sidebar .sidebar-sub-menu-item--open .sidebar-panel--open"   # once opened


async def settings(page, item, why):
    """Log in, then the sidebar's Settings menu and one of its pages (Users, Sites, Collections, Redirects,
    ...; `why`). The menu is a panel that flies out beside the sidebar, laid out after the click."""
    yield login(page)
    yield reach(page, "click", "#wagtail-sidebar button[aria-haspopup=menu]", text="Settings",
                why="to open the admin's Settings menu")
    await visible(page, f"{SETTINGS_MENU} a", "the sidebar's Settings menu")
    yield navigate(page, f"{SETTINGS_MENU} a", text=item, why=why)


async def solve_redirect(page, instruction, task):
    """Settings > Redirects: the add form (a page from the chooser's search, or a URL; Permanent as asked),
    or the redirect's edit form with another page chosen."""
    p = parse_instruction(task, instruction)
    yield settings(page, "Redirects", "to open the site's redirects")
    if task == "retarget-redirect":
        yield reach(page, "click", "td.title a", text=p["old_path"],
                    why=f"to edit the redirect from {p['old_path']}")
        yield menu(page, "main form button[aria-label=Actions]", "Choose another page",
                   "to change the redirect's target page", "to open the page chooser")
        yield search_page(page, p["title"], f"to redirect to '{p['title']}' instead")
        yield reach(page, "click", SUBMIT, text="Save", why="to save the redirect")
        return
    yield reach(page, "click", "header a[href$='/add/']", why="to add a new redirect")
    yield reach(page, "type", "#id_old_path", value=p["old_path"], why="to enter the path to redirect from")
    permanent = task == "redirect-to-page"
    yield check(page, "#id_is_permanent", f"to make the redirect {'permanent' if permanent else 'temporary'}",
                permanent)
    if task == "redirect-to-page":
        yield reach(page, "click", "main button[data-chooser-action-choose]",
                    why="to choose the page to redirect to")
        yield search_page(page, p["title"], f"to redirect to '{p['title']}'")
    else:
        yield reach(page, "type", "#id_redirect_link", value=p["url"],
                    why="to enter the address to redirect to")
    yield reach(page, "click", SUBMIT, text="Create", why="to create the redirect")


USER_FIELDS = {"username": ("username", "to enter the new user's username"),   # field: (parameter, why)
               "email": ("email", "to enter the new user's e-mail"),
               "first_name": ("first", "to enter the new user's first name"),
               "last_name": ("last", "to enter the new user's last name")}


async def solve_users(page, instruction, task):
    """Settings > Users: the add form (account fields, then the role's group), or the user's edit form with
    one group or the Active box changed."""
    p = parse_instruction(task, instruction)
    yield settings(page, "Users", "to open the list of users")
    if task == "create-editor":
        yield reach(page, "click", "header a[href$='/new/']", why="to add a new user")
        for field, (key, why) in USER_FIELDS.items():
            yield reach(page, "type", f"#id_{field}", value=p[key], why=why)
        yield reach(page, "type", "#id_password1", value=p["password"], why="to set the new user's password")
        yield reach(page, "type", "#id_password2", value=p["password"], why="to confirm the password")
        yield reach(page, "click", "#tab-label-roles",   # the groups are on the form's Roles tab
                    why="to show the user's groups")
        yield check(page, "#tab-roles label", f"to put the user in the {p['group']} group", text=p["group"])
        yield reach(page, "click", SUBMIT, text="Create", why="to create the account")
        return
    yield reach(page, "click", "td.title a", text=p["name"], why=f"to edit {p['name']}'s account")
    if task == "make-moderator":
        yield reach(page, "click", "#tab-label-roles", why="to show the user's groups")
        yield check(page, "#tab-roles label", "to add the user to the Moderators group",
                    text="Moderators")
    else:
        yield check(page, "#id_is_active", "to deactivate the account", False)
    yield reach(page, "click", SUBMIT, text="Save", why="to save the account")


async def solve_settings(page, instruction, task):
    """Settings > Collections (a collection's edit form, or Add with its parent) or Sites (the site's
    form)."""
    p = parse_instruction(task, instruction)
    if task == "rename-site":
        yield settings(page, "Sites", "to open the site settings")
        yield reach(page, "click", "td.title a", why=f"to edit the site '{p['old_name']}'")
        yield reach(page, "type", "#id_site_name", value=p["site_name"], why="to enter the site's new name")
        save = "to save the site"
    else:
        yield settings(page, "Collections", "to open the list of collections")
        if task == "rename-collection":
            yield reach(page, "click", "td.title a", text=p["name"],
                        why=f"to edit the collection '{p['name']}'")
            yield reach(page, "type", "#id_name", value=p["new_name"],
                        why="to enter the collection's new name")
        else:
            yield reach(page, "click", "header a[href$='/add/']", why="to add a new collection")
            yield reach(page, "type", "#id_name", value=p["name"], why="to name the new collection")
            yield reach(page, "select", "#id_parent", value=await parent_label(page, p["parent"]),
                        why=f"to put it inside '{p['parent']}'")
        save = "to save the collection"
    yield reach(page, "click", SUBMIT, why=save)


async def parent_label(page, name):
    """The parent select's label of a collection (nested ones are indented with dashes)."""
    await visible(page, "#id_parent", "the parent select")
    labels = await page.evaluate("() => [...document.querySelectorAll('#id_parent option')]"
                                 ".map(o => o.textContent.trim())")
    label = next((o for o in labels if o.lstrip("- ").strip() == name), None)
    if label is None:
        raise ExpertError(f"no collection {name!r} among {labels}")
    return label


MONTHS = {"Jan.": 1, "Feb.": 2, "March": 3, "April": 4, "May": 5, "June": 6, "July": 7, "Aug.": 8,
          "Sept.": 9, "Oct.": 10, "Nov.": 11, "Dec.": 12}   # Django's "N j, Y" month names


async def solve_page_facts(page, instruction, task):
    """Facts the admin shows: the history's latest "Draft saved" row, the status panel's first publication
    (its exact date in the tooltip of "2 weeks ago"), a listing's page count, the editor's lock banner."""
    p = parse_instruction(task, instruction)
    if task == "count-children":
        yield listing(page, p["section"])   # its header counts the pages
        text = await page.evaluate("() => document.querySelector('main thead').innerText")
        m = re.search(r"of (\d+) pages?", text or "")
        if m is None:
            raise ExpertError(f"no page count in the listing on {page.url}: {text!r}")
        yield Move("stop", value=m[1])
        return
    yield open_editor(page, p["title"])
    if task == "who-locked":
        await visible(page, ".messages button", "the lock banner")   # its Unlock button
        banner = await page.evaluate("() => (document.querySelector('.messages') || {}).innerText")
        m = re.search(r"was locked by (.+?) on ", banner or "")
        if m is None:
            raise ExpertError(f"no lock banner on {page.url}: {banner!r}")
        yield Move("stop", value=m[1])
    elif task == "last-editor":
        yield navigate(page, "header a[aria-label=History]", why="to see who saved each version")
        rows = await page.evaluate(js_rows("tbody tr", "td"))
        row = next((r for r in rows if r[0].startswith("Draft saved")), None)
        if row is None:
            raise ExpertError(f"no saved version in the history on {page.url}")
        yield Move("stop", value=row[1])
    else:
        yield status_panel(page, "to see when the page was first published")
        date = "[data-side-panel=status] .w-human-readable-date"
        first = await page.evaluate("(css) => [...document.querySelectorAll(css)].pop()"
                                    ".dataset.wTooltipContentValue", date)
        yield Move("hover", css=date, nth=await page.locator(date).count() - 1,
                   why="to see the exact date of the first publication")
        yield Move("stop", value=iso_date(first))


def iso_date(text):
    """Django's "Feb. 11, 2026, 2:51 a.m." as 2026-02-11."""
    m = re.match(r"(\S+) (\d+), (\d{4})", text or "")
    if m is None or m[1] not in MONTHS:
        raise ExpertError(f"not a date: {text!r}")
    return datetime.date(int(m[3]), MONTHS[m[1]], int(m[2])).isoformat()


async def solve_open(page, instruction, task):
    """Navigation: a page's history (from its editor), an author's edit form (Snippets > Authors), a
    section's listing (from the home page's listing)."""
    p = parse_instruction(task, instruction)
    if task == "open-history":   # the answer is where the episode ends: each page waited for
        yield open_editor(page, p["title"])
        yield navigate(page, "header a[aria-label=History]", why="to open the page's history")
    elif task == "open-author":
        yield snippets(page, "Authors")
        yield navigate(page, "td.title a", text=p["name"], why=f"to open the author {p['name']} for editing")
    else:
        yield listing(page, p["section"])
    yield Move("stop", value="")


async def solve_public(page, instruction, task):
    """The reader's side: the menu, a listing (News pages through older articles), the page; a staff page
    asks to sign in first, a protected one for its password."""
    p = parse_instruction(task, instruction)
    if task == "public-author":
        yield navigate(page, "nav.menu a", text="News", why="to open the council's news")
        while not await page.locator("ul.listing a", has_text=p["title"]).count():
            if not await page.locator("nav.pager a", has_text="Older articles").count():
                raise ExpertError(f"no article {p['title']!r} in the news listing")
            yield navigate(page, "nav.pager a", text="Older articles",
                           why=f"to look for '{p['title']}' among older articles")
        yield navigate(page, "ul.listing a", text=p["title"], why="to open the article")
        author = await page.evaluate("() => (document.querySelector('article .author') || {}).textContent")
        yield Move("stop", value=author)
        return
    yield Move("click", css="nav.menu a", text=p["section"], why=f"to open the {p['section']} section")
    yield reach(page, "click", "ul.cards a", text=p["title"], why=f"to open the page '{p['title']}'")
    if task == "public-staff-page":
        yield reach(page, "type", "#id_username", value=p["username"], why=f"to sign in as {p['username']}")
        yield reach(page, "type", "#id_password", value=p["password"], why="to enter the password")
        yield navigate(page, "form.gate input[type=submit]", why="to sign in and see the page")
        yield Move("stop", value="")
        return
    yield reach(page, "type", "#id_password", value=p["password"], why="to enter the page's password")
    yield navigate(page, "form.gate input[type=submit]", why="to unlock the page")
    intro = await page.evaluate("() => (document.querySelector('main .intro') || {}).textContent")
    yield Move("stop", value=intro)


async def solve_classify(page, instruction, task):
    """The editor's tag box (a tag, then Enter) or a category's box; Publish."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    if task == "add-tag":
        yield reach(page, "type", "[data-contentpath=tags] .tagit-new input", value=p["tag"],
                    why=f"to tag the article '{p['tag']}'")
        yield Move("press", value="Enter", why="to add the tag")
    else:
        yield check(page, "[data-contentpath=categories] label", f"to file the article under {p['category']}",
                    text=p["category"])
    yield publish(page, "to publish the change")


EXPERTS = {   # template -> expert(page, instruction, task)
    "publish": solve_publish,
    "save-draft": solve_save_draft,
    "edit-publish": solve_edit_publish,
    "create-article": solve_create_article,
    "create-page": solve_create_page,
    "unpublish": solve_unpublish,
    "move": solve_move,
    "copy": solve_copy,
    "delete": solve_delete,
    "revert": solve_revert,
    "promote": solve_promote,
    "snippet": solve_snippet,
    "moderation": solve_moderation,
    "lock": solve_lock,
    "privacy": solve_privacy,
    "redirect": solve_redirect,
    "users": solve_users,
    "settings": solve_settings,
    "page-facts": solve_page_facts,
    "open": solve_open,
    "public": solve_public,
    "classify": solve_classify,
}
