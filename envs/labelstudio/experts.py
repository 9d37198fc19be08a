"""envs/labelstudio/experts.py -- the annotation studio's scripted experts: a member of the labelling team
who knows Label Studio's front end. One expert per template (tasks/labelstudio.json groups its tasks by
`template`); it reads the task's parameters back out of the instruction (envs.django_suite.parse_instruction).

What shapes the moves on a single-page app: every page after the sign-in is drawn by React, in the page,
after the load event; the data manager draws only the table rows in view (a row further down exists only
once scrolled to); a task opens beside the table, in the labelling interface, whose choices are styled
checkboxes (Ant Design's) and whose bottom bar submits or updates the annotation; menus, lists and a tab's
options are drawn only once opened (a tab's options only while the pointer is over it), and an action on
ticked rows asks for its confirmation in a dialog.
"""

from envs import ExpertError, Move, django_suite, js_fn, reach, where

ADMIN, ADMIN_PASSWORD = "admin@studio.test", "admin-pass-2026"   # seeded by envs/labelstudio
ROW = ".lsf-table-row *"   # a cell's text in a row of the data manager's table: the click opens the task
CHOICE = "label.lsf-choice__checkbox input[name='{}']"   # a choice's box, by the choice's value
SKIP = "button[data-testid=bottombar-skip-button]"   # the labelling stream's Skip
TEMPLATES = ".lsf-templates-list"   # a new project's Labeling Setup: its groups, then their templates
ROW_SCROLLS = 12   # the table holds at most 24 texts, 8 in view: a row is found within a few scrolls


def parse_instruction(task, instruction):
    return django_suite.parse_instruction("labelstudio", task, instruction)


async def sign_in(page):
    yield Move("type", css="input[name=email]", value=ADMIN, why="to sign in to Label Studio")
    yield Move("type", css="input[name=password]", value=ADMIN_PASSWORD, why="to complete the sign-in details")
    yield Move("click", css="button[type=submit]", why="to sign in to Label Studio")


async def open_project(page, project):
    """From the projects list: the project's card opens its data manager."""
    yield Move("click", css="a *", text=project, why=f'to open the "{project}" project')


async def find_row(page, text):
    """Scroll the data manager's table until the row of `text` is drawn and in view."""
    await page.wait_for_selector(ROW, timeout=15_000)   # the table comes after the load event
    for _ in range(ROW_SCROLLS):
        await page.wait_for_timeout(100)   # rows are drawn a frame after the scroll
        w = await where(page, ROW, text)
        if w == "ok":
            return
        yield Move("scroll", value="up" if w == "up" else "down")
    raise ExpertError(f"no row {text!r} in the data manager after {ROW_SCROLLS} scrolls")


async def open_text(page, text):
    """The row of `text`, opened in the labelling interface."""
    yield find_row(page, text)
    yield Move("click", css=ROW, text=text, why="to open the text in the labelling interface")


async def open_settings(page, project, section=None):
    """The project's settings (the data manager's Settings link), on its General page or `section`."""
    yield open_project(page, project)
    yield Move("click", css="a", text="Settings", why=f'to open the "{project}" project\'s settings')
    if section:
        yield Move("click", css="a", text=section, why=f"to open the {section} settings")


async def choose_and_submit(page, choice):
    """The labelling interface: the text's choice, then the bottom bar's Submit."""
    yield Move("click", css=CHOICE.format(choice), why=f"to label the text as {choice}")
    yield Move("click", css="button[data-testid=bottombar-submit-button]", why="to submit the annotation")


async def act_on_ticked(page, action, why):
    """The actions menu of the ticked rows ("1 Task"), the action, and its dialog's confirmation."""
    yield Move("click", css="button[aria-label='Tasks Actions']", why="to open the actions on the ticked rows")
    yield Move("click", css="li", text=action, why=why)
    yield Move("click", css="button[data-testid=dialog-ok-button]", why=f"{why}, confirmed")


async def label(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield open_text(page, p["text"])
    yield choose_and_submit(page, p["choice"])


async def relabel(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield open_text(page, p["text"])
    yield Move("click", css=CHOICE.format(p["given"]), why=f"to take the wrong label {p['given']} off")
    yield Move("click", css=CHOICE.format(p["choice"]), why=f"to label the text as {p['choice']}")
    yield Move("click", css="button[data-testid=bottombar-update-button]", why="to save the corrected annotation")


async def stream(page, instruction, task):
    """The labelling stream ("Label All Tasks": the project's texts in turn; the data manager's quick view has
    no Skip): each text checked as it comes, then either its choice and Submit, or the bottom bar's Skip for
    the lead (an annotation cancelled, with no result)."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield Move("click", css="button", text="Label All Tasks", why="to label the project's texts in turn")
    for text in [p["text"], p["other"]] if "other" in p else [p["text"]]:
        try:   # the next text comes by a request of its own after a Skip
            await page.wait_for_function(js_fn("text", "const t = document.querySelector('.lsf-richtext');"
                                                       "return !!t && norm(t.innerText).includes(text);"),
                                         arg=text, timeout=15_000)
        except Exception as e:  # noqa: BLE001 -- Playwright's TimeoutError
            shown = await page.evaluate(js_fn("", "return norm(document.body.innerText).slice(0, 200);"))
            raise ExpertError(f"the stream's next text is not {text!r}: {shown!r}") from e
        if task.startswith("skip"):
            yield Move("click", css=SKIP, why="to skip the text for the lead")
            continue
        yield choose_and_submit(page, p["choice"])


CARDS = js_fn("", """
    const text = (c, css) => c.querySelector(css) ? norm(c.querySelector(css).textContent) : null;
    return [...document.querySelectorAll('.lsf-project-card')].map((c) => ({
      title: text(c, '.lsf-project-card__title-text'), total: text(c, '.lsf-project-card__total'),
      annotations: text(c, '.lsf-project-card__detail-item_type_completed'),
      skipped: text(c, '.lsf-project-card__detail-item_type_rejected')}));""")


async def project_facts(page, instruction, task):
    """The projects list's cards: "done / total" under a project's title (done: labelled or skipped; total: its
    number of tasks), then its annotations (a tick; skipped ones not counted) and its skipped tasks (a dash).
    A total-* question adds up every card's count."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    # the list is drawn after the load event, each card's counts from a request of their own
    await page.wait_for_function("() => [...document.querySelectorAll('.lsf-project-card__total')].length > 0 && "
                                 "[...document.querySelectorAll('.lsf-project-card__total')]"
                                 ".every((e) => /\\d/.test(e.textContent))", timeout=15_000)
    cards = {}
    for c in await page.evaluate(CARDS):
        done, total = map(int, c["total"].split(" / "))
        cards[c["title"]] = {"count-tasks": total, "count-done": done, "count-left": total - done,
                             "count-skipped": int(c["skipped"]), "count-annotations": int(c["annotations"])}
    if task.startswith("total-"):
        answer = sum(card[task.replace("total-", "count-")] for card in cards.values())
    elif p["project"] in cards:
        answer = cards[p["project"]][task]
    else:
        raise ExpertError(f"no card of {p['project']!r} with its counts (cards: {sorted(cards)})")
    yield Move("stop", value=str(answer))


async def settings(page, instruction, task):
    """The project's settings: its name and description on the General page, the labelling instructions on
    the Annotation page; each page's own Save. (Not how the project hands out its texts: its radio buttons
    are drawn divs over hidden inputs, with no role, so nothing marks them.)"""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    if task == "set-instructions":
        yield open_settings(page, p["project"], "Annotation")
        yield Move("type", css="textarea[name=expert_instruction]", value=p["text"],
                   why="to write the labelling instructions")
        yield Move("click", css="input[name=show_instruction]", why="to show the instructions before labelling")
    else:
        yield open_settings(page, p["project"])
        if "new" in p:
            yield Move("type", css="input[name=title]", value=p["new"], why="to give the project its new name")
        if "text" in p:
            yield Move("type", css="textarea[name=description]", value=p["text"],
                       why="to give the project its new description")
    yield reach(page, "click", "button", "Save", why="to save the project's settings")


async def labeling(page, instruction, task):
    """A choice added to the project's labelling config: the Labeling Interface page's visual editor (its
    box takes new choices, one a line, and Add puts them under the config's choices), then Save."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_settings(page, p["project"], "Labeling Interface")
    yield Move("type", css="textarea[name=labels]", value=p["choice"], why=f"to write the new choice {p['choice']}")
    yield Move("click", css="button[aria-label='Add labels']", why="to add it to the project's choices")
    yield Move("click", css="button[aria-label='Save configuration']", why="to save the labelling config")


async def task_actions(page, instruction, task):
    """An action on one or two texts of the data manager: their rows ticked, the actions menu of the ticked
    rows ("1 Task", "2 Tasks"), the action, and the dialog's confirmation."""
    p = parse_instruction(task, instruction)
    action, why = {"delete-task": ("Delete Tasks", "to delete the text from the project"),
                   "delete-two-tasks": ("Delete Tasks", "to delete the two texts from the project"),
                   "delete-annotations": ("Delete Annotations", "to delete the text's annotations")}[task]
    yield sign_in(page)
    yield open_project(page, p["project"])
    for text in [p["text"], p["other"]] if "other" in p else [p["text"]]:
        yield find_row(page, text)
        box = await page.evaluate(js_fn("text", """
            const row = [...document.querySelectorAll('.lsf-table-row')]
              .find((r) => [...r.querySelectorAll('*')].some((e) => norm(e.textContent) === text));
            const box = row && row.querySelector('input[type=checkbox]');
            return box && box.getAttribute('aria-label');"""), text)
        if not box:
            raise ExpertError(f"no tick box in the row of {text!r}")
        yield Move("click", css=f"input[aria-label='{box}']", why="to tick the text's row")
    yield act_on_ticked(page, action, why)


async def columns(page, instruction, task):
    """The data manager's Columns menu: a column's box ticked to show it, cleared to hide it (the tab keeps
    the choice)."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield Move("click", css="button", text="Columns", why="to choose the table's columns")
    verb = "show" if task == "show-column" else "hide"
    yield Move("click", css="li label", text=p["column"], why=f"to {verb} the {p['column']} column")


WEBHOOK_TOGGLES = {"add-webhook-paused": (0, "to add it switched off"),   # the form's toggles in order:
                   "add-webhook-no-payload": (1, "to send the event without its data")}   # active, payload, all


async def webhook(page, instruction, task):
    """A webhook of the project (Settings, Webhooks): its receiver's address, the form's toggles left as
    they are (active, with the payload, for every event) unless the instruction says otherwise."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_settings(page, p["project"], "Webhooks")
    yield Move("click", css="button", text="Add Webhook", why="to add a webhook to the project")
    yield Move("type", css="input[name=url]", value=p["url"], why="to give the webhook its receiver's address")
    if task in WEBHOOK_TOGGLES:
        nth, why = WEBHOOK_TOGGLES[task]
        yield Move("click", css="form input[type=checkbox]", nth=nth, why=why)
    yield Move("click", css="button[aria-label='Add Webhook']", why="to save the webhook")


async def delete_project(page, instruction, task):
    """The Danger Zone's Delete Project, confirmed by typing "delete" in its dialog."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_settings(page, p["project"], "Danger Zone")
    yield Move("click", css="button", text="Delete Project", why=f'to delete the "{p["project"]}" project')
    yield Move("type", css="input[data-testid=danger-zone-confirmation-input]", value="delete",
               why="to confirm the deletion")
    yield Move("click", css="button[data-testid=danger-zone-confirm-button]", why="to delete the project")


async def shown_nth(page, css, text):
    """The index among `css` matches of the one that shows `text` (innerText: its icons' <title>s, in its
    textContent, are not shown)."""
    nth = await page.evaluate(js_fn("[css, text]", "return [...document.querySelectorAll(css)]"
                                                   ".findIndex((e) => norm(e.innerText) === text);"), [css, text])
    if nth < 0:
        raise ExpertError(f"nothing {css!r} shows {text!r}")
    return nth


NEW_PROJECT_TEMPLATE = {"create-project": "Text Classification", "create-ner-project": "Named Entity Recognition"}


async def create_project(page, instruction, task):
    """A new project (the projects list's Create): its name and description, then a template of Labeling
    Setup's Natural Language Processing: Text Classification (choices Positive, Negative, Neutral) or Named
    Entity Recognition (spans marked PER, ORG, LOC, MISC). (Not a project saved with no labelling set up: its
    data manager was drawn in one run and stayed blank in the other.)"""
    p, template = parse_instruction(task, instruction), NEW_PROJECT_TEMPLATE[task]
    yield sign_in(page)
    yield Move("click", css="button[aria-label='Create new project']", why="to create a new project")
    yield Move("type", css="input[name=name]", value=p["title"], why="to name the project")
    yield Move("type", css="textarea[name=description]", value=p["description"], why="to describe the project")
    yield Move("click", css="li", text="Labeling Setup", why="to choose what the project labels")
    await page.wait_for_selector(TEMPLATES, timeout=15_000)
    group = await shown_nth(page, TEMPLATES + "__group", "Natural Language Processing")
    yield Move("click", css=TEMPLATES + "__group", nth=group, why="to see the templates for texts")
    await page.wait_for_selector(TEMPLATES + "__template", timeout=15_000)
    card = await shown_nth(page, TEMPLATES + "__template", template)
    yield Move("click", css=TEMPLATES + "__template", nth=card, why=f"to use the {template} template")
    yield Move("click", css="button", text="Save", why="to create the project")


async def tabs(page, instruction, task):
    """The data manager's tabs (each a saved view of the table): a tab's options menu (Rename, Duplicate),
    drawn while the pointer is over the tab, and the + that opens a new tab; a tab is renamed in place, its
    name typed over and Enter pressed."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    new = task.startswith("new-tab")
    if new:
        yield Move("click", css="button[aria-label='Open New Tab']", why="to open a new tab")
    nth = 1 if new else 0
    # the options button is drawn only while the pointer is over its tab
    yield Move("hover", css=".lsf-tabs-dm__item-left", nth=nth, why="to show the tab's options")
    yield Move("click", css="button[aria-label='Tab options']", nth=nth, why="to open the tab's options")
    if task == "duplicate-tab":
        yield Move("click", css="li", text="Duplicate", why="to make a copy of the Default tab")
        return
    yield Move("click", css="li", text="Rename", why="to rename the tab")
    yield Move("type", css="input[aria-label='Tab name']", value=p["name"], why="to give the tab its name")
    yield Move("press", value="Enter", why="to save the tab's name")
    if "column" in p:
        yield order_by(page, p["column"])
    if "word" in p:
        yield add_filter(page, p["word"])


async def order_by(page, column, descending=False):
    """The data manager's Order by menu (a column of the table), then the arrow beside it for the other way
    (descending); the tab keeps the order."""
    yield Move("click", css="button", text="Order by", why="to choose the column the table is ordered by")
    yield Move("click", css="li", text=column, why=f"to order the table by {column}")
    if descending:
        yield Move("click", css="button[aria-label='Sort descending']", why="to put the largest first")


async def order(page, instruction, task):
    """The data manager ordered by a column, the largest first for -descending and newest-first (by ID)."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield order_by(page, p.get("column", "ID"), descending=task in ("order-descending", "newest-first"))


FILTER_VALUE = ".lsf-filterLine input"   # a filter line: its column, its operator, then the value box


async def shown_count(page):
    """The data manager footer's "Tasks: 6 / 20" once it has stopped changing (the table asks again for its
    tasks a moment after each key of a filter's value)."""
    seen = []
    for _ in range(40):
        seen.append(await page.evaluate(js_fn("", "const m = norm(document.body.innerText)"
                                                  ".match(/Tasks: (\\d+) \\/ \\d+/); return m && m[1];")))
        if len(seen) >= 4 and seen[-1] is not None and len(set(seen[-4:])) == 1:
            return seen[-1]
        await page.wait_for_timeout(250)
    raise ExpertError(f"the data manager's count of tasks did not settle: {seen[-4:]}")


FILTER_COLUMNS = {   # a filter on a count column: the column's option, the value, why
    "filter-unannotated": ("total_annotations", "0", "the number of annotations", "to keep the tasks with none"),
    "filter-skipped": ("cancelled_annotations", "1", "the number of skips", "to keep the skipped tasks")}
ROW_ACTIONS = {"delete-containing": ("Delete Tasks", "to delete the texts shown"),
               "delete-annotations-containing": ("Delete Annotations", "to delete the annotations of the texts shown")}


async def add_filter(page, word=None, column=None):
    """The data manager's Filters, Add Filter: a line "text contains ..." whose value box takes `word`; or
    `column` (a FILTER_COLUMNS key) chosen in the line's first list (its options drawn in a pop-up)."""
    yield Move("click", css="button[aria-label='Filters']", why="to filter the table's tasks")
    yield Move("click", css="button", text="Add Filter", why="to add a filter")
    if word is not None:
        yield Move("type", css=FILTER_VALUE, value=word, why=f'to keep the texts that contain "{word}"')
        return
    option, value, what, why = FILTER_COLUMNS[column]
    yield Move("click", css="button[data-testid='select-trigger-filter:tasks:data.text']",
               why="to choose the column to filter by")
    yield Move("click", css=f"[data-testid='select-option-filter:tasks:{option}']", why=f"to filter by {what}")
    yield Move("type", css=FILTER_VALUE, value=value, why=why)


async def filters(page, instruction, task):
    """A filter of the data manager (the tab keeps it); then, for some tasks, what the filtered table is for:
    the footer's count ("Tasks: 6 / 20"), or every row ticked ("Select all rows") and an action on them,
    confirmed."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield add_filter(page, p.get("word"), None if "word" in p else task)
    if task == "count-containing":
        yield Move("stop", value=await shown_count(page))
    elif task in ROW_ACTIONS:
        await shown_count(page)   # the filtered rows drawn before they are all ticked
        action, why = ROW_ACTIONS[task]
        yield Move("click", css="input[aria-label='Select all rows']", why="to tick every text the filter shows")
        yield act_on_ticked(page, action, why)


async def account(page, instruction, task):
    """The signed-in person's own account (the avatar's menu, Account & Settings): Personal Info's names
    and phone, then its Save."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield Move("click", css=".lsf-menu-header__user", why="to open your account's menu")
    yield Move("click", css="li", text="Account & Settings", why="to open your account's settings")
    field, why = {"set-first-name": ("first_name", "to write your first name as you sign it"),
                  "set-last-name": ("last_name", "to write your new last name"),
                  "set-phone": ("phone", "to write your phone number")}[task]
    yield Move("type", css=f"input[name={field}]", value=p["value"], why=why)
    yield Move("click", css="button", text="Save", why="to save your account's details")


EXPERTS = {"label": label, "relabel": relabel, "stream": stream, "project-facts": project_facts,
           "settings": settings, "labeling": labeling, "task-actions": task_actions, "columns": columns,
           "webhook": webhook, "delete-project": delete_project, "create-project": create_project,
           "tabs": tabs, "order": order, "filters": filters, "account": account}
