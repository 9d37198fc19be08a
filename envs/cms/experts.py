"""envs/cms/experts.py -- the content-management suite's scripted experts: log in to Wagtail's admin (or read
the public site), then work through it like an editor who knows it. One expert per template
(tasks/cms.json groups its tasks by `template`); it gets the task's name for the variant's route and fields,
and reads the task's parameters back out of the instruction (envs.django_suite.parse_instruction). A step
that is itself a sequence of moves (log in, open a page's editor) is yielded whole: envs.flatten.

Wagtail's editor keeps a header at the top and the action bar at the bottom of the window, over the form:
a field scrolled under either has no mark, so every move here goes through `reach`, which scrolls until
the target's centre is the topmost thing on screen (envs.reach only brings it inside the window).

Two of Wagtail's menus get no marks: the "..." menu beside a page's title and the sidebar's fly-out
menus (Settings, Reports) are drawn outside an element that clips its content, and the observation
(assets/observe.js) clips every element by its scrolling ancestors. So the experts reach a page's Move,
Copy and Delete through its row's menu in the search results, and the Settings pages through the
dashboard's "Site administration" panel (town/wagtail_hooks.py).
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


async def reach(page, op, css, text=None, nth=None, value=None, scrolls=12):
    """The move on a target, after the wheel scrolls that bring it out from under the editor's header and
    action bar (or from outside the window). A target not there or not laid out yet (a widget a script
    builds, a menu opening, a modal loading) is waited for, up to WAIT_S on a slow machine."""
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
            yield Move("hover", css=css, text=text, nth=k)
            continue
        if where not in ("up", "down") or scrolls == 0:
            break
        scrolls -= 1
        yield Move("scroll", value=where)
    yield Move(op, css=css, text=text, nth=k, value=value)


async def navigate(page, css, text=None):
    """A click that opens another page, then the wait until that page has loaded: the expert reads it next,
    and the harness's settle gives up after 2 s on a busy machine, before a slow page is there."""
    before = page.url
    yield reach(page, "click", css, text=text)
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
    yield Move("type", css="#id_username", value=USER)
    yield Move("type", css="#id_password", value=PASSWORD)
    yield Move("click", css="form.login-form button[type=submit]")


async def open_editor(page, title):
    """Log in, then the dashboard's "Search all pages" box; the result with the page's title opens its
    editor."""
    yield login(page)
    yield Move("type", css="#id_q", value=title)
    yield Move("press", value="Enter")
    yield reach(page, "click", "td.title a", text=title)


async def menu(page, toggle, item):
    """Open a dropdown menu (its toggle's css) and click the item with that text."""
    yield reach(page, "click", toggle)
    await visible(page, ".w-dropdown__content", "the dropdown menu")
    yield reach(page, "click", MENU_ITEM, text=item)


async def publish(page):
    yield menu(page, FOOTER_MORE, "Publish")


async def save_draft(page):
    yield reach(page, "click", SAVE_DRAFT)


async def row_action(page, title, item):
    """Log in, search the page, then its row's "More options" menu in the results: Move, Copy, Delete, ..."""
    yield login(page)
    yield Move("type", css="#id_q", value=title)
    yield Move("press", value="Enter")
    yield menu(page, f"td.title button[aria-label=\"More options for '{title}'\"]", item)


async def listing(page, section=None):
    """Log in, then the dashboard's page count: the listing of the home page's children; with a section,
    that section's own listing (the arrow at the end of its row)."""
    yield login(page)
    yield Move("click", css=".w-summary a[href^='/admin/pages/']")
    if section is not None:
        yield navigate(page, f"a[aria-label=\"Explore child pages of '{section}'\"]")


async def choose_page(page, title, path=()):
    """In the page chooser's modal: explore down the pages of `path` (titles, from the level the chooser
    opens on: the current choice's parent, or the root), then choose the page."""
    await visible(page, f"{MODAL} a.choose-page", "the page chooser")
    for parent in path:
        explore = f"{MODAL} a.navigate-pages[title=\"Explore subpages of '{parent}'\"]"
        yield reach(page, "click", explore)
        await gone(page, explore, f"the level under {parent!r} in the page chooser")
    yield reach(page, "click", f"{MODAL} a.choose-page", text=title)


async def search_page(page, title):
    """In the page chooser's modal: its search box (results replace the listing as one types), then the
    result with the page's title."""
    await visible(page, f"{MODAL} a.choose-page", "the page chooser")
    yield reach(page, "type", f"{MODAL} input[name=q]", value=title)
    await visible(page, f"{MODAL} a.choose-page[data-title=\"{title}\"]", f"{title!r} among the results")
    yield reach(page, "click", f"{MODAL} a.choose-page", text=title)


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
    yield publish(page)


FIELD = {"draft-intro": "#id_intro", "draft-title": "#id_title", "draft-location": "#id_location",
         "event-location": "#id_location", "article-intro": "#id_intro"}
VALUE = {"draft-intro": "new_intro", "draft-title": "new_title", "draft-location": "location",
         "event-location": "location", "article-intro": "new_intro"}


async def solve_save_draft(page, instruction, task):
    """One field changed in the editor, then Save draft (the live page keeps its content)."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield reach(page, "type", FIELD[task], value=p[VALUE[task]])
    yield save_draft(page)


async def enter_date(page, css, date):
    """A date field: a click opens its calendar (on the month of the date already there, or today's), then
    the date typed as YYYY-MM-DD (typing's own click closes the calendar). Typing at once would race the
    calendar, which reads the field 100 ms after the click: half typed, it shows today's month; done, the
    date's."""
    yield reach(page, "click", css)
    await visible(page, ".xdsoft_datetimepicker", "the calendar")
    yield reach(page, "type", css, value=date)


async def choose_snippet(page, field, name):
    """A snippet chooser field: its "Choose ..." button (or, when one is chosen, its "..." menu's "Choose
    another ..."), then the snippet's name in the modal."""
    box = f"[data-contentpath={field}]"
    await visible(page, box, f"the {field} field")
    if await page.locator(f"{box} .chooser.blank").count():
        yield reach(page, "click", f"{box} .unchosen button[data-chooser-action-choose]")
    else:
        yield reach(page, "click", f"{box} button[aria-label=Actions]")
        await visible(page, f"{box} .w-dropdown__content", "the chooser's menu")
        yield reach(page, "click", f"{box} .w-dropdown__content button[data-chooser-action-choose]")
    await visible(page, f"{MODAL} a[data-chooser-modal-choice]", "the chooser")
    yield reach(page, "click", f"{MODAL} a[data-chooser-modal-choice]", text=name)


async def solve_edit_publish(page, instruction, task):
    """One field changed in the editor (a text, the date, the author from its chooser), then Publish."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    if task == "event-date":
        datetime.date.fromisoformat(p["new_date"])   # a malformed date is the task's bug, not the form's
        yield enter_date(page, "#id_start_date", p["new_date"])
    elif task == "article-author":
        yield choose_snippet(page, "author", p["author"])
    else:
        yield reach(page, "type", FIELD[task], value=p[VALUE[task]])
    yield publish(page)


async def check(page, css, checked=True, text=None):
    """Click a checkbox (or its label, by text) when it is not as wanted."""
    await visible(page, css, f"the box {css}")
    box = css if text is None else await page.evaluate(
        "([css, text]) => { const l = [...document.querySelectorAll(css)]"
        ".find(l => l.innerText.trim() === text); return l && l.control ? '#' + l.control.id : null; }",
        [css, text])
    if box is None:
        raise ExpertError(f"no box labelled {text!r} among {css} on {page.url}")
    if await page.is_checked(box) != checked:
        yield reach(page, "click", box)


async def solve_create_article(page, instruction, task):
    """News' listing, Add child page (articles are the only kind it takes), the form, then Publish or Save
    draft."""
    p = parse_instruction(task, instruction)
    yield listing(page, "News")
    yield Move("click", css="header a[aria-label='Add child page']")
    yield reach(page, "type", "#id_title", value=p["title"])
    yield enter_date(page, "#id_date", p["date"])
    if "author" in p:
        yield choose_snippet(page, "author", p["author"])
    if "intro" in p:
        yield reach(page, "type", "#id_intro", value=p["intro"])
    if "body" in p:   # Draftail: a contenteditable region, typed into like any text box
        yield reach(page, "type", "[data-contentpath=body] [contenteditable=true]", value=p["body"])
    if "category" in p:
        yield check(page, "[data-contentpath=categories] label", text=p["category"])
    if "tag" in p:   # the tag box takes a tag when Enter is pressed
        yield reach(page, "type", "[data-contentpath=tags] .tagit-new input", value=p["tag"])
        yield Move("press", value="Enter")
    yield save_draft(page) if task == "draft-article" else publish(page)


async def solve_create_page(page, instruction, task):
    """Add child page in the section's listing (the home page's own listing for the top level, where the
    page type is chosen first), the form, Promote's "Show in menus" for a menu page, then Publish."""
    p = parse_instruction(task, instruction)
    section = {"create-event": "Events", "create-section-page": p.get("section")}.get(task)
    yield listing(page, section)
    yield Move("click", css="header a[aria-label='Add child page']")
    if task == "create-menu-page":
        yield reach(page, "click", "main a", text="Standard page")
    yield reach(page, "type", "#id_title", value=p["title"])
    if task == "create-event":
        yield enter_date(page, "#id_start_date", p["date"])
        yield reach(page, "type", "#id_location", value=p["location"])
    yield reach(page, "type", "#id_intro", value=p["intro"])
    if task == "create-menu-page":
        yield reach(page, "click", "#tab-label-promote")
        yield check(page, "#id_show_in_menus")
    yield publish(page)


async def solve_unpublish(page, instruction, task):
    """The editor's action bar menu: Unpublish, then its confirmation page."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield menu(page, FOOTER_MORE, "Unpublish")
    yield reach(page, "click", SUBMIT, text="Yes, unpublish it")


async def solve_move(page, instruction, task):
    """The page's row menu in the search results: Move; on the move page, the parent chooser's "Choose
    another page", the new parent in the modal, then Confirm and, when Wagtail asks, its confirmation page's
    "Yes, move this page"."""
    p = parse_instruction(task, instruction)
    yield row_action(page, p["title"], "Move")
    yield menu(page, "main form button[aria-label=Actions]", "Choose another page")
    if task == "move-to-section":
        yield choose_page(page, p["new_section"])
    elif task == "move-to-top":
        yield choose_page(page, await top_title(page))
    else:
        yield choose_page(page, p["new_parent"], path=[await section_of(page, p["title"])])
    yield navigate(page, SUBMIT)   # Confirm
    if page.url.rstrip("/").endswith("/confirm"):
        yield reach(page, "click", SUBMIT)   # "Yes, move this page"


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
    yield row_action(page, p["title"], "Copy")
    yield reach(page, "type", "#id_new_title", value=p["new_title"])
    yield reach(page, "type", "#id_new_slug", value=p["new_slug"])
    yield check(page, "#id_publish_copies", task != "copy-page-draft")
    yield reach(page, "click", SUBMIT)


async def solve_delete(page, instruction, task):
    """The page's row menu in the search results: Delete, then its confirmation page."""
    p = parse_instruction(task, instruction)
    yield row_action(page, p["title"], "Delete")
    yield reach(page, "click", SUBMIT)   # "Yes, delete it"


async def solve_revert(page, instruction, task):
    """The page's history (the clock icon in the editor's header): the "Draft saved" row of the editor's
    version, its "Review this version", then the revision's Publish this version / Replace current draft."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield navigate(page, "header a[aria-label=History]")
    rows = await page.evaluate(js_rows("tbody tr", "td"))
    k = next((k for k, r in enumerate(rows) if r[0].startswith("Draft saved") and r[1] == p["editor"]), None)
    if k is None:
        raise ExpertError(f"no version saved by {p['editor']} in the history on {page.url}: {rows}")
    yield menu(page, f"tbody tr:nth-child({k + 1}) button[aria-label=Actions]", "Review this version")
    yield publish_version(page) if task == "revert-publish" else save_draft(page)


async def publish_version(page):
    yield menu(page, FOOTER_MORE, "Publish this version")


def js_rows(row_css, cell_css):
    """A function listing the rows of a table as lists of their cells' normalised texts."""
    return (f"() => {{ {JS_NORM} return [...document.querySelectorAll('{row_css}')]"
            f".map(tr => [...tr.querySelectorAll('{cell_css}')].map(td => norm(td.innerText))); }}")


PROMOTE = {"set-slug": ("#id_slug", "new_slug"), "set-seo-title": ("#id_seo_title", "seo_title"),
           "set-description": ("#id_search_description", "description")}


async def solve_promote(page, instruction, task):
    """The editor's Promote tab: the slug, the title tag, the meta description or "Show in menus"; Publish."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield reach(page, "click", "#tab-label-promote")
    if task == "hide-from-menus":
        yield check(page, "#id_show_in_menus", False)
    else:
        css, name = PROMOTE[task]
        yield reach(page, "type", css, value=p[name])
    yield publish(page)


async def snippets(page, model):
    """Log in, then Snippets in the sidebar and the model's listing ("Authors", "Categories")."""
    yield login(page)
    yield Move("click", css="#wagtail-sidebar a[href='/admin/snippets/']")
    yield reach(page, "click", "main a", text=model)


async def solve_snippet(page, instruction, task):
    """The snippet's listing: its Add button and form, or the snippet's row and its edit form; Save."""
    p = parse_instruction(task, instruction)
    model = "Authors" if task in ("add-author", "author-role") else "Categories"
    yield snippets(page, model)
    if task.startswith("add-"):
        yield reach(page, "click", "header a[href$='/add/']")
        yield reach(page, "type", "#id_name", value=p["name"])
        if task == "add-author":
            yield reach(page, "type", "#id_role", value=p["role"])
            yield reach(page, "type", "#id_email", value=p["email"])
        else:
            yield reach(page, "type", "#id_slug", value=p["slug"])
    else:
        yield reach(page, "click", "td.title a", text=p["name"])
        if task == "author-role":
            yield reach(page, "type", "#id_role", value=p["role"])
        else:
            yield reach(page, "type", "#id_name", value=p["new_name"])
    yield reach(page, "click", "footer button[type=submit]", text="Save")


async def solve_moderation(page, instruction, task):
    """Submit: the editor's action bar menu. Approve / request changes: the dashboard's "Awaiting your
    review" row's menu (requesting changes asks for a comment in a dialog)."""
    p = parse_instruction(task, instruction)
    if task == "submit-moderation":
        yield open_editor(page, p["title"])
        yield menu(page, FOOTER_MORE, "Submit to Moderators approval")
        return
    yield login(page)
    await visible(page, "#awaiting-review-section tbody tr", "the dashboard's review list")
    rows = await page.evaluate(js_rows("#awaiting-review-section tbody tr", "td"))
    k = next((k for k, r in enumerate(rows) if r and r[0] == p["title"]), None)
    if k is None:
        raise ExpertError(f"{p['title']!r} is not awaiting review on the dashboard: {rows}")
    toggle = f"#awaiting-review-section tbody tr:nth-child({k + 1}) button[aria-label=Actions]"
    if task == "approve-page":
        yield menu(page, toggle, "Approve")
        return
    yield menu(page, toggle, "Request changes")
    await visible(page, f"{MODAL} textarea", "the comment dialog")
    yield reach(page, "type", f"{MODAL} textarea", value=p["comment"])
    yield reach(page, "click", f"{MODAL} button[type=submit], {MODAL} input[type=submit]")


async def status_panel(page):
    """The editor's status side panel (the "i" in its header), opened once."""
    if not await page.locator("[data-side-panel=status]:not([hidden])").count():
        yield reach(page, "click", "button[aria-label='Toggle status']")
        await visible(page, "[data-side-panel=status]", "the status panel")


async def solve_lock(page, instruction, task):
    """Lock: the status panel's Lock switch. Unlock: the Unlock button of the editor's "locked" banner."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    if task == "unlock-page":
        yield reach(page, "click", ".messages button", text="Unlock")
        return
    yield status_panel(page)
    yield reach(page, "click", "[data-side-panel=status] label.switch")   # the Lock switch


PRIVACY = {"password-protect": "Private, accessible with a shared password",
           "login-only": "Private, accessible to any logged-in users", "make-public": "Public"}


async def solve_privacy(page, instruction, task):
    """The status panel's "Change privacy": a dialog with the kinds of restriction (and the password)."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    yield status_panel(page)
    yield reach(page, "click", "[data-side-panel=status] button", text="Change privacy")
    await visible(page, "#set-privacy input[name=restriction_type]", "the privacy dialog")
    yield check(page, "#set-privacy label", text=PRIVACY[task])
    if task == "password-protect":
        yield reach(page, "type", "#set-privacy #id_password", value=p["password"])
    yield reach(page, "click", "#set-privacy form [type=submit]")


async def settings(page, item):
    """Log in, then one of the dashboard's "Site administration" links (Users, Sites, Redirects, ...: the
    pages of the sidebar's Settings menu)."""
    yield login(page)
    yield reach(page, "click", "#site-administration-section a", text=item)


async def solve_redirect(page, instruction, task):
    """Site administration > Redirects: the add form (a page from the chooser's search, or a URL; Permanent
    as asked), or the redirect's edit form with another page chosen."""
    p = parse_instruction(task, instruction)
    yield settings(page, "Redirects")
    if task == "retarget-redirect":
        yield reach(page, "click", "td.title a", text=p["old_path"])
        yield menu(page, "main form button[aria-label=Actions]", "Choose another page")
        yield search_page(page, p["title"])
        yield reach(page, "click", SUBMIT, text="Save")
        return
    yield reach(page, "click", "header a[href$='/add/']")
    yield reach(page, "type", "#id_old_path", value=p["old_path"])
    yield check(page, "#id_is_permanent", task == "redirect-to-page")
    if task == "redirect-to-page":
        yield reach(page, "click", "main button[data-chooser-action-choose]")
        yield search_page(page, p["title"])
    else:
        yield reach(page, "type", "#id_redirect_link", value=p["url"])
    yield reach(page, "click", SUBMIT, text="Create")


async def solve_users(page, instruction, task):
    """Site administration > Users: the add form (account fields, then the role's group), or the user's
    edit form with one group or the Active box changed."""
    p = parse_instruction(task, instruction)
    yield settings(page, "Users")
    if task == "create-editor":
        yield reach(page, "click", "header a[href$='/new/']")
        for field in ("username", "email", "first_name", "last_name"):
            key = {"first_name": "first", "last_name": "last"}.get(field, field)
            yield reach(page, "type", f"#id_{field}", value=p[key])
        yield reach(page, "type", "#id_password1", value=p["password"])
        yield reach(page, "type", "#id_password2", value=p["password"])
        yield reach(page, "click", "#tab-label-roles")   # the groups are on the form's Roles tab
        yield check(page, "#tab-roles label", text=p["group"])
        yield reach(page, "click", SUBMIT, text="Create")
        return
    yield reach(page, "click", "td.title a", text=p["name"])
    if task == "make-moderator":
        yield reach(page, "click", "#tab-label-roles")
        yield check(page, "#tab-roles label", text="Moderators")
    else:
        yield check(page, "#id_is_active", False)
    yield reach(page, "click", SUBMIT, text="Save")


async def solve_settings(page, instruction, task):
    """Site administration > Collections (a collection's edit form, or Add with its parent) or Sites (the
    site's form)."""
    p = parse_instruction(task, instruction)
    if task == "rename-site":
        yield settings(page, "Sites")
        yield reach(page, "click", "td.title a")
        yield reach(page, "type", "#id_site_name", value=p["site_name"])
    else:
        yield settings(page, "Collections")
        if task == "rename-collection":
            yield reach(page, "click", "td.title a", text=p["name"])
            yield reach(page, "type", "#id_name", value=p["new_name"])
        else:
            yield reach(page, "click", "header a[href$='/add/']")
            yield reach(page, "type", "#id_name", value=p["name"])
            yield reach(page, "select", "#id_parent", value=await parent_label(page, p["parent"]))
    yield reach(page, "click", SUBMIT)


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
        yield listing(page, p["section"])
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
        yield navigate(page, "header a[aria-label=History]")
        rows = await page.evaluate(js_rows("tbody tr", "td"))
        row = next((r for r in rows if r[0].startswith("Draft saved")), None)
        if row is None:
            raise ExpertError(f"no saved version in the history on {page.url}")
        yield Move("stop", value=row[1])
    else:
        yield status_panel(page)
        date = "[data-side-panel=status] .w-human-readable-date"
        first = await page.evaluate("(css) => [...document.querySelectorAll(css)].pop()"
                                    ".dataset.wTooltipContentValue", date)
        yield Move("hover", css=date, nth=await page.locator(date).count() - 1)
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
        yield navigate(page, "header a[aria-label=History]")
    elif task == "open-author":
        yield snippets(page, "Authors")
        yield navigate(page, "td.title a", text=p["name"])
    else:
        yield listing(page, p["section"])
    yield Move("stop", value="")


async def solve_public(page, instruction, task):
    """The reader's side: the menu, a listing (News pages through older articles), the page; a staff page
    asks to sign in first, a protected one for its password."""
    p = parse_instruction(task, instruction)
    if task == "public-author":
        yield navigate(page, "nav.menu a", text="News")
        while not await page.locator("ul.listing a", has_text=p["title"]).count():
            if not await page.locator("nav.pager a", has_text="Older articles").count():
                raise ExpertError(f"no article {p['title']!r} in the news listing")
            yield navigate(page, "nav.pager a", text="Older articles")
        yield navigate(page, "ul.listing a", text=p["title"])
        author = await page.evaluate("() => (document.querySelector('article .author') || {}).textContent")
        yield Move("stop", value=author)
        return
    yield Move("click", css="nav.menu a", text=p["section"])
    yield reach(page, "click", "ul.cards a", text=p["title"])
    if task == "public-staff-page":
        yield reach(page, "type", "#id_username", value=p["username"])
        yield reach(page, "type", "#id_password", value=p["password"])
        yield navigate(page, "form.gate input[type=submit]")
        yield Move("stop", value="")
        return
    yield reach(page, "type", "#id_password", value=p["password"])
    yield navigate(page, "form.gate input[type=submit]")
    intro = await page.evaluate("() => (document.querySelector('main .intro') || {}).textContent")
    yield Move("stop", value=intro)


async def solve_classify(page, instruction, task):
    """The editor's tag box (a tag, then Enter) or a category's box; Publish."""
    p = parse_instruction(task, instruction)
    yield open_editor(page, p["title"])
    if task == "add-tag":
        yield reach(page, "type", "[data-contentpath=tags] .tagit-new input", value=p["tag"])
        yield Move("press", value="Enter")
    else:
        yield check(page, "[data-contentpath=categories] label", text=p["category"])
    yield publish(page)


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
