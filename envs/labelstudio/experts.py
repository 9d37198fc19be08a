"""envs/labelstudio/experts.py -- the annotation studio's scripted experts: a member of the labelling team
who knows Label Studio's front end. One expert per template (tasks/labelstudio.json groups its tasks by
`template`); it reads the task's parameters back out of the instruction (envs.django_suite.parse_instruction).

What shapes the moves on a single-page app: every page after the sign-in is drawn by React, in the page,
after the load event; the data manager draws only the table rows in view (a row further down exists only
once scrolled to); a task opens beside the table, in the labelling interface, whose choices are styled
checkboxes (Ant Design's) and whose bottom bar submits or updates the annotation.
"""

from envs import ExpertError, Move, django_suite, js_fn, reach, where

ADMIN, ADMIN_PASSWORD = "admin@studio.test", "admin-pass-2026"   # seeded by envs/labelstudio
ROW = ".lsf-table-row *"   # a cell's text in a row of the data manager's table: the click opens the task
CHOICE = "label.lsf-choice__checkbox input[name='{}']"   # a choice's box, by the choice's value
SKIP = "button[data-testid=bottombar-skip-button]"   # the labelling stream's Skip
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


async def open_text(page, text):
    """Scroll the data manager's table until the row of `text` is drawn and in view, then open it."""
    await page.wait_for_selector(ROW, timeout=15_000)   # the table comes after the load event
    for _ in range(ROW_SCROLLS):
        await page.wait_for_timeout(100)   # rows are drawn a frame after the scroll
        w = await where(page, ROW, text)
        if w == "ok":
            break
        yield Move("scroll", value="up" if w == "up" else "down")
    else:
        raise ExpertError(f"no row {text!r} in the data manager after {ROW_SCROLLS} scrolls")
    yield Move("click", css=ROW, text=text, why="to open the text in the labelling interface")


async def label(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield open_text(page, p["text"])
    yield Move("click", css=CHOICE.format(p["choice"]), why=f"to label the text as {p['choice']}")
    yield Move("click", css="button[data-testid=bottombar-submit-button]", why="to submit the annotation")


async def relabel(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield open_text(page, p["text"])
    yield Move("click", css=CHOICE.format(p["given"]), why=f"to take the wrong label {p['given']} off")
    yield Move("click", css=CHOICE.format(p["choice"]), why=f"to label the text as {p['choice']}")
    yield Move("click", css="button[data-testid=bottombar-update-button]", why="to save the corrected annotation")


async def skip(page, instruction, task):
    """A text left for the lead: the labelling stream ("Label All Tasks": the project's texts in turn, the
    data manager's quick view has no Skip), its first text checked, then the bottom bar's Skip (an annotation
    cancelled, with no result)."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield Move("click", css="button", text="Label All Tasks", why="to label the project's texts in turn")
    await page.wait_for_selector(f"{SKIP}, .lsf-choices", timeout=15_000)
    shown = await page.evaluate(js_fn("", "return norm((document.querySelector('.lsf-richtext') || "
                                          "document.body).innerText);"))
    if p["text"] not in shown:
        raise ExpertError(f"the stream's first text is not {p['text']!r}: {shown[:200]!r}")
    yield Move("click", css=SKIP, why="to skip the text for the lead")


async def project_facts(page, instruction, task):
    """The projects list's card: "done / total" under the project's title (done: labelled or skipped; total: its
    number of tasks), then its annotations (a tick; skipped ones not counted) and its skipped tasks (a dash)."""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    # the list is drawn after the load event, each card's counts from a request of their own
    await page.wait_for_function("() => [...document.querySelectorAll('.lsf-project-card__total')].length > 0 && "
                                 "[...document.querySelectorAll('.lsf-project-card__total')]"
                                 ".every((e) => /\\d/.test(e.textContent))", timeout=15_000)
    card = await page.evaluate(js_fn("title", """
        const c = [...document.querySelectorAll('.lsf-project-card')]
          .find((c) => norm(c.querySelector('.lsf-project-card__title-text').textContent) === title);
        const text = (css) => c && c.querySelector(css) ? norm(c.querySelector(css).textContent) : null;
        return {total: text('.lsf-project-card__total'),
                annotations: text('.lsf-project-card__detail-item_type_completed'),
                skipped: text('.lsf-project-card__detail-item_type_rejected')};"""), p["project"])
    if card["total"] is None:
        raise ExpertError(f"no card of {p['project']!r} with its counts")
    done, total = card["total"].split(" / ")
    answers = {"count-tasks": total, "count-done": done, "count-skipped": card["skipped"],
               "count-annotations": card["annotations"]}
    yield Move("stop", value=answers[task])


async def settings(page, instruction, task):
    """The project's settings, from the data manager's Settings link: its name on the General page, the
    labelling instructions on the Annotation page; each page's own Save. (Not how the project hands out its
    texts: its radio buttons are drawn divs over hidden inputs, with no role, so nothing marks them.)"""
    p = parse_instruction(task, instruction)
    yield sign_in(page)
    yield open_project(page, p["project"])
    yield Move("click", css="a", text="Settings", why=f'to open the "{p["project"]}" project\'s settings')
    if task == "rename-project":
        yield Move("type", css="input[name=title]", value=p["new"], why="to give the project its new name")
    else:
        yield Move("click", css="a", text="Annotation", why="to open the labelling instructions")
        yield Move("type", css="textarea[name=expert_instruction]", value=p["text"],
                   why="to write the labelling instructions")
        yield Move("click", css="input[name=show_instruction]", why="to show the instructions before labelling")
    yield reach(page, "click", "button", "Save", why="to save the project's settings")


EXPERTS = {"label": label, "relabel": relabel, "skip": skip, "project-facts": project_facts,
           "settings": settings}
