"""envs/helpdesk/experts.py -- the service desk's scripted experts: log in, then work through
django-helpdesk like an agent who knows it. One expert per template (tasks/helpdesk.json groups its
tasks by `template`); it gets the task's name for the variant's route and fields, and reads the task's
parameters back out of the instruction (envs.django_suite.parse_instruction). A step that is itself a
sequence of moves (log in, open a ticket) is yielded whole: envs.flatten.
"""
import datetime
import re

from envs import ExpertError, Move, django_suite, reach

USER, PASSWORD = "admin", "admin-pass-2026"   # seeded by envs/helpdesk
PRIORITIES = {"Critical": "1. Critical", "High": "2. High", "Normal": "3. Normal", "Low": "4. Low",
              "Very Low": "5. Very Low"}   # the priority select's labels


def parse_instruction(task, instruction):
    return django_suite.parse_instruction("helpdesk", task, instruction)


async def login(page):
    """Staff episodes start on the login form (the start page redirects there: episodes start logged out)."""
    yield Move("type", css="#username", value=USER, why="to sign in")
    yield Move("type", css="#password", value=PASSWORD, why="to sign in")
    yield Move("click", css="form button[type=submit]", why="to sign in")


async def open_ticket(page, ticket_id):
    """Log in, then the header's search box: a ticket's number there opens the ticket itself (a title
    lists it)."""
    by_number = str(ticket_id).isdigit()
    yield login(page)
    yield Move("type", css="#search_query", value=ticket_id,
               why=f"to look up ticket #{ticket_id}" if by_number
               else "to search for the ticket by its title")
    yield Move("press", value="Enter",
               why=f"to open ticket #{ticket_id}" if by_number else "to run the search")


async def open_respond_form(page, why, details=False):
    """The ticket page's Respond tab (`why`: the caller's purpose); with details, its "Update ticket
    details" part unfolded too."""
    yield reach(page, "click", "#respond-tab", why=why)
    if details:
        yield reach(page, "click", "a[aria-controls=collapseDetails]",
                    why="to show the ticket's detail fields")
        for _ in range(20):   # Bootstrap's collapse animates (transitions are off, but its timer runs)
            if await page.locator("#collapseDetails.show").count():
                break
            await page.wait_for_timeout(50)


async def save_respond_form(page, why):
    yield reach(page, "click", "#ticket-respond-form button[type=submit]", why=why)


async def solve_assign(page, instruction, task):
    """The owner box beside the ticket's facts (with its save button), the hand icon that takes the
    ticket, or the respond form's details for an owner change together with another field."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    if task == "take-ticket":
        yield reach(page, "click", "a[href='?take']", why="to take the ticket yourself")
    elif task in ("assign-ticket", "unassign-ticket"):
        who = p["agent"] if task == "assign-ticket" else "Unassigned"
        yield reach(page, "select", "select[name=owner]:not(#id_owner)", value=who,
                    why=f"to choose {who} as the owner" if task == "assign-ticket"
                    else "to leave the ticket without an owner")
        yield reach(page, "click", "button[title='Save ticket assignment'],"
                                   "button[data-bs-original-title='Save ticket assignment']",
                    why="to save the ticket's new owner")
    else:   # hand-over-high
        yield open_respond_form(page, "to open the ticket's update form", details=True)
        yield reach(page, "select", "#id_owner", value=p["username"],   # this box lists usernames
                    why=f"to hand the ticket to {p['agent']}")
        yield reach(page, "select", "#id_priority", value=PRIORITIES["High"],
                    why="to raise the priority to High")
        yield save_respond_form(page, "to save the new owner and priority")


async def set_public(page, public):
    """The respond form's "Is this update public?" switch, flipped when it is not as wanted."""
    if await page.is_checked("#id_public") != public:
        yield reach(page, "click", "#id_public", why="to make the update visible to the submitter" if public
                    else "to keep the update internal")


async def solve_respond(page, instruction, task):
    """A comment in the Respond tab: public with a new status (resolve, reopen), or an internal note."""
    p = parse_instruction(task, instruction)
    public = task not in ("internal-note", "resolve-quietly")
    yield open_ticket(page, p["id"])
    yield open_respond_form(page, "to open the reply form" if public
                            else "to open the form for an internal note")
    text = p.get("reply") or p["note"]
    yield reach(page, "type", "#commentBox", value=text,
                why="to write the message to the submitter" if public else "to write the internal note")
    status = {"reply-and-resolve": "#st_resolved", "resolve-quietly": "#st_resolved",
              "reopen-ticket": "#st_reopened", "close-with-reply": "#st_closed"}.get(task)
    if status:
        yield reach(page, "click", status, why={"#st_resolved": "to mark the ticket resolved",
                                                "#st_reopened": "to reopen the ticket",
                                                "#st_closed": "to mark the ticket closed"}[status])
    yield set_public(page, public)
    yield save_respond_form(page, {"reply-and-resolve": "to send the reply and resolve the ticket",
                                   "internal-note": "to save the internal note",
                                   "reopen-ticket": "to reopen the ticket and send the message",
                                   "resolve-quietly": "to resolve the ticket with the internal note",
                                   "close-with-reply": "to close the ticket and send the reply",
                                   }.get(task, "to save the update"))


async def solve_details(page, instruction, task):
    """One field of the respond form's ticket details: the due date (typed: the date picker accepts
    YYYY-MM-DD), the title, the queue."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    yield open_respond_form(page, "to open the ticket's update form", details=True)
    if task == "set-due-date":
        datetime.date.fromisoformat(p["due"])   # a malformed date is the task's bug, not the form's
        yield reach(page, "type", "#id_due_date", value=p["due"], why=f"to set the due date to {p['due']}")
        yield Move("press", value="Escape",   # close the date picker that opened over the form
                   why="to close the date picker")
    elif task == "rename-ticket":
        yield reach(page, "type", "#collapseDetails input[name=title]", value=p["new_title"],
                    why="to enter the ticket's new title")
    elif task == "set-critical":
        yield reach(page, "select", "#id_priority", value=PRIORITIES["Critical"],
                    why="to raise the priority to Critical")
    else:
        yield reach(page, "select", "#id_queue", value=p["queue"], why=f"to move the ticket to {p['queue']}")
    yield save_respond_form(page, {"set-due-date": "to save the new due date",
                                   "rename-ticket": "to save the new title",
                                   "set-critical": "to save the new priority",
                                   }.get(task, "to save the queue change"))


async def fill_ticket_form(page, p, staff):
    """The new-ticket form (staff: /tickets/submit/ from the sidebar; customers: the same form on
    the public home page): queue, summary, description, then priority, e-mail and owner."""
    yield reach(page, "select", "#id_queue", value=p["queue"], why=f"to file the ticket in {p['queue']}")
    yield reach(page, "type", "#id_title", value=p["summary"], why="to enter the ticket's summary")
    yield reach(page, "type", "#id_body", value=p.get("body") or p["summary"], why="to describe the problem")
    if "priority" in p:
        yield reach(page, "select", "#id_priority", value=PRIORITIES[p["priority"]],
                    why=f"to set the priority to {p['priority']}")
    yield reach(page, "type", "#id_submitter_email", value=p["email"],
                why="to enter the submitter's e-mail" if staff else "to enter your e-mail address")
    if staff and "agent" in p:
        yield reach(page, "select", "#id_assigned_to", value=p["username"],
                    why=f"to assign the ticket to {p['agent']}")
    if "due" in p:
        yield reach(page, "type", "#id_due_date", value=p["due"], why=f"to set the due date to {p['due']}")
        yield Move("press", value="Escape", why="to close the date picker")   # the date picker that opened
    yield reach(page, "click", "form button[type=submit]", text="Submit Ticket",
                why="to submit the new ticket")


async def solve_new_ticket(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield login(page)
    yield Move("click", css="a.nav-link[href='/tickets/submit/']",   # the sidebar's New Ticket
               why="to open the new-ticket form")
    yield fill_ticket_form(page, p, staff=True)


async def solve_public(page, instruction, task):
    """Logged out, on the home page: its ticket form, or its knowledge base (a section, then an article,
    which unfolds in place)."""
    p = parse_instruction(task, instruction)
    if task == "public-submit":
        yield fill_ticket_form(page, p, staff=False)
        return
    yield reach(page, "click", "a[href='/kb/']", why="to open the knowledge base")   # the sidebar's link
    # each section is a card: its title, then a "View articles" link
    sections = await page.evaluate(
        "() => [...document.querySelectorAll('.card')].filter(c => c.querySelector(\"a[href^='/kb/']\"))"
        ".map(c => c.querySelector('h1, h2, h3, h4, h5, h6').textContent.trim())")
    if p["category"] not in sections:
        raise ExpertError(f"no knowledge-base section {p['category']!r} among {sections}")
    yield reach(page, "click", ".card a[href^='/kb/']", nth=sections.index(p["category"]),
                why=f"to open the {p['category']} section")
    yield reach(page, "click", "button.accordion-button", text=p["item"], why="to show the article's answer")


async def fact(page, label):
    """A value from the ticket page's facts grid ("PRIORITY: 2. High")."""
    return await page.evaluate("""(label) => {
        const norm = s => (s || '').replace(/\\s+/g, ' ').trim();
        for (const el of document.querySelectorAll('.ticket-info-label, dt, th, small, span, div')) {
            if (norm(el.textContent).toLowerCase() === label && el.nextElementSibling)
                return norm(el.nextElementSibling.textContent);
        }
        return null; }""", label.lower())


async def solve_answer(page, instruction, task):
    """Open the ticket (by number in the header search, or by title in it) and read the fact off."""
    p = parse_instruction(task, instruction)
    if task == "ticket-priority":
        yield open_ticket(page, p["id"])
        value = await fact(page, "Priority")          # "2. High"
        if not value or ". " not in value:
            raise ExpertError(f"no priority on {page.url}: {value!r}")
        yield Move("stop", value=value.split(". ", 1)[1])
        return
    yield open_ticket(page, p["title"])   # a title search lists the ticket (titles are unique)
    yield reach(page, "click", "#ticketTable a", text=None, why="to open the ticket from the search results")
    if task == "ticket-queue":
        yield Move("stop", value=await fact(page, "Queue"))
        return
    owner = await page.evaluate(
        "() => { const s = document.querySelector('select[name=owner]:not(#id_owner)');"
        " return s && s.selectedOptions[0] ? s.selectedOptions[0].textContent.trim() : null; }")
    if not owner:
        raise ExpertError(f"no owner on {page.url}")
    yield Move("stop", value=owner)


async def check_box(page, css, checked, why):
    """Click a checkbox (or switch) when its state is not the wanted one (`why`: the caller's purpose)."""
    if await page.is_checked(css) != checked:
        yield reach(page, "click", css, why=why)


async def ticket_action(page, label, why):
    """The ticket page's Actions menu: Edit, Hold / Unhold, Delete (`why`: the caller's purpose)."""
    yield reach(page, "click", "button.dropdown-toggle", text="Actions",
                why="to open the ticket's Actions menu")
    yield reach(page, "click", ".dropdown-menu.show a, .dropdown-menu.show button", text=label, why=why)


async def solve_hold(page, instruction, task):
    """Hold / Unhold from the ticket's Actions menu; with a note, an internal comment after it."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    if task == "unhold-ticket":
        yield ticket_action(page, "Unhold", "to take the ticket off hold")
    else:
        yield ticket_action(page, "Hold", "to put the ticket on hold")
    if task == "hold-with-note":
        yield open_respond_form(page, "to open the form for an internal note")
        yield reach(page, "type", "#commentBox", value=p["note"], why="to write the note for the team")
        yield set_public(page, False)
        yield save_respond_form(page, "to save the internal note")


async def option_labels(page, css):
    return await page.evaluate("(css) => [...document.querySelectorAll(css + ' option')]"
                               ".map(o => o.textContent.trim())", css)


async def solve_edit(page, instruction, task):
    """The ticket's edit page (Actions > Edit): the submitter, the description, the knowledge-base item."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    yield ticket_action(page, "Edit", "to open the ticket's edit form")
    if task == "change-submitter":
        yield reach(page, "type", "#id_submitter_email", value=p["new_email"],
                    why="to enter the submitter's new e-mail")
    elif task == "edit-description":
        yield reach(page, "type", "#id_description", value=p["description"],
                    why="to write the new description")
    else:   # link-kb-item: the select's labels are "Section: Article"? read them
        options = await option_labels(page, "#id_kbitem")
        label = next((o for o in options if o.endswith(p["item"])), None)
        if label is None:
            raise ExpertError(f"no knowledge-base item {p['item']!r} among {options}")
        yield reach(page, "select", "#id_kbitem", value=label, why="to link the knowledge-base article")
    yield reach(page, "click", "form input[type=submit]", text=None, why="to save the changes")


async def solve_delete(page, instruction, task):
    """Actions > Delete on the ticket, or the Delete button of its row in the dashboard's unassigned
    list; both end on the confirmation page."""
    p = parse_instruction(task, instruction)
    if task == "delete-ticket":
        yield open_ticket(page, p["id"])
        yield ticket_action(page, "Delete", "to delete the ticket")
    elif task == "delete-by-title":   # the header search by title lists it; its row opens it
        yield open_ticket(page, p["title"])
        yield reach(page, "click", "#ticketTable a", why="to open the ticket from the search results")
        yield ticket_action(page, "Delete", "to delete the ticket")
    else:
        yield login(page)
        rows = await page.evaluate(
            "() => [...document.querySelectorAll('table tr')].filter(tr => tr.querySelector('button'))"
            ".map(tr => (tr.querySelector('a') || {}).textContent || '')")
        k = next((k for k, r in enumerate(rows) if r.strip() == f"{p['id']}. {p['title']}"), None)
        if k is None:
            raise ExpertError(f"ticket #{p['id']} is not among the dashboard's unassigned tickets")
        yield reach(page, "click", "table tr button", text="Delete", nth=k,
                    why=f"to delete ticket #{p['id']}")
    yield reach(page, "click", "form[action='./'] button[type=submit]",   # "Yes I Understand - Delete It"
                why="to confirm the deletion")


async def solve_dependency(page, instruction, task):
    """The "depends on" link beside the ticket's facts, then the ticket chooser (labels "ID Title")."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    if task == "add-resolves":   # "this ticket resolves another": the other one depends on this one
        link, box, other = "a[href$='resolves/add/']", "#id_ticket", p["other"]
        why = "to record a ticket this one resolves"
    else:
        link, box, other = "a[href$='dependency/add/']", "#id_depends_on", p["dep"]
        why = "to record a ticket this one depends on"
    yield reach(page, "click", link, why=why)
    label = next((o for o in await option_labels(page, box) if o.startswith(f"{other} ")), None)
    if label is None:
        raise ExpertError(f"ticket #{other} is not among the choices of {box}")
    yield reach(page, "select", box, value=label, why=f"to choose ticket #{other}")
    yield reach(page, "click", "input[type=submit]", why="to save the dependency")


STATUSES = {"Open": 1, "Reopened": 2, "Resolved": 3, "Closed": 4, "Duplicate": 5}


async def wait_for(page, css, what):
    """Bootstrap's collapses and off-canvas panels open from a timer: wait until `css` matches."""
    for _ in range(40):
        if await page.locator(css).count():
            return
        await page.wait_for_timeout(50)
    raise ExpertError(f"{what} did not open ({css})")


async def filter_checkbox(page, section, label):
    """The id of a Filters checkbox by its label ("Billing", "tara", "Unassigned")."""
    box = await page.evaluate(
        "([section, label]) => { const l = [...document.querySelectorAll(`#collapse${section} label`)]"
        ".find(l => l.textContent.trim() === label); return l ? l.htmlFor : null; }", [section, label])
    if box is None:
        raise ExpertError(f"no {label!r} among the list filter's {section} choices")
    return box


async def filter_list(page, statuses=None, queue=None, owner=None):
    """The ticket list's Filters panel (an off-canvas form): the Status boxes as wanted, one Queue and
    one Owner box ticked (their sections unfold first), then Apply Filters."""
    yield reach(page, "click", "#advanced-filters", why="to open the Filters panel")
    await wait_for(page, "#offcanvasFilters.show", "the Filters panel")
    for label, value in STATUSES.items():
        if statuses is not None:
            yield check_box(page, f"#status-check-{value}", label in statuses,
                            f"to include {label} tickets" if label in statuses
                            else f"to leave out {label} tickets")
    # the panel scrolls, but a wheel turned over the page behind it does not: fold the open sections
    # (Sorting, Status) so that the ones unfolded next fit on screen
    for section in ("Sorting", "Status"):
        if (queue or owner) and await page.locator(f"#collapse{section}.show").count():
            yield reach(page, "click", f"button[aria-controls=collapse{section}]",
                        why=f"to fold the {section} section out of the way")
            await wait_for(page, f"#collapse{section}:not(.show):not(.collapsing)", f"folding {section}")
    for section, label in (("Queue", queue), ("Owner", owner)):
        if label is not None:
            yield reach(page, "click", f"button[aria-controls=collapse{section}]",
                        why=f"to show the {section} filter's choices")
            await wait_for(page, f"#collapse{section}.show", f"the {section} filter")
            why = (f"to show only the {label} queue's tickets" if section == "Queue"
                   else "to show only unassigned tickets" if label == "Unassigned"
                   else f"to show only {label}'s tickets")
            yield check_box(page, "#" + await filter_checkbox(page, section, label), True, why)
    yield reach(page, "click", "button[form=filtersForm]", why="to apply the filters")


async def open_list(page):
    """Log in, then All Tickets in the sidebar."""
    yield login(page)
    yield Move("click", css="a.nav-link[href='/tickets/']", why="to open the ticket list")


async def solve_filter(page, instruction, task):
    """A filtered ticket list: the list itself is the answer (its URL), or the count it shows."""
    p = parse_instruction(task, instruction)
    yield open_list(page)
    if task == "queue-resolved-list":
        yield filter_list(page, statuses={"Resolved"}, queue=p["queue"])
        return
    if task == "count-queue-resolved":
        yield filter_list(page, statuses={"Resolved"}, queue=p["queue"])
    else:
        yield filter_list(page, statuses={"Open", "Reopened"}, owner=p["username"])
    if task.startswith("count-"):
        info = await page.evaluate("() => (document.querySelector('.dt-info, .dataTables_info') || {})"
                                   ".textContent")
        m = re.search(r"of (\d+) entr", info or "")   # "of 1 entry", "of 7 entries"
        if m is None:
            raise ExpertError(f"no entry count on the ticket list: {info!r}")
        yield Move("stop", value=m[1])


async def mass_action(page, ticket_ids, action, why):
    """Tick rows of the ticket list (all of them when ticket_ids is None), then the Actions menu's
    action select (`why`: the caller's purpose) and its Go button."""
    if ticket_ids is None:
        yield reach(page, "click", "#actions-dropdown button.dropdown-toggle",
                    why="to open the list's Actions menu")
        yield reach(page, "click", "#select_all_btn", why="to select every ticket in the list")
    else:
        for t in ticket_ids:
            yield reach(page, "click", f"#ticketTable input[name=ticket_id][value='{t}']",
                        why=f"to select ticket #{t}")
        yield reach(page, "click", "#actions-dropdown button.dropdown-toggle",
                    why="to open the list's Actions menu")
    yield reach(page, "select", "#id_mass_action", value=action, why=why)
    yield reach(page, "click", "#actions-dropdown button[type=submit]",
                why="to apply the chosen action to the selected tickets")


async def solve_merge(page, instruction, task):
    """The two tickets ticked in their queue's list, Actions > Merge, then on the merge page the ticket
    to keep, and Validate."""
    p = parse_instruction(task, instruction)
    if task == "merge-keep-older":   # the lower number was opened first; its queue is on its page
        keep, dup = sorted((p["a"], p["b"]), key=int)
        yield open_ticket(page, keep)
        queue = await fact(page, "Queue")
        yield Move("click", css="a.nav-link[href='/tickets/']", why="to open the ticket list")
    else:
        keep, dup, queue = p["id"], p["dup"], p["queue"]
        yield open_list(page)
    yield filter_list(page, queue=queue)
    yield mass_action(page, [dup, keep], "Merge", "to merge the selected tickets")
    yield reach(page, "click", f"input[name=chosen_ticket][value='{keep}']", why=f"to keep ticket #{keep}")
    yield reach(page, "click", "form button[type=submit]", text="Validate", why="to confirm the merge")


async def solve_bulk(page, instruction, task):
    """A filtered list, every row selected, one mass action."""
    p = parse_instruction(task, instruction)
    yield open_list(page)
    if task == "close-resolved-queue":
        yield filter_list(page, statuses={"Resolved"}, queue=p["queue"])
        yield mass_action(page, None, "Close (Don't Send E-Mail)",
                          "to close the tickets without e-mailing anyone")
    elif task == "take-unassigned-queue":
        yield filter_list(page, queue=p["queue"], owner="Unassigned")
        yield mass_action(page, None, "Take (Assign to me)", "to take the tickets yourself")
    else:   # reassign-agent
        yield filter_list(page, statuses={"Open", "Reopened"}, owner=p["old_user"])
        yield mass_action(page, None, p["new_user"], f"to reassign the tickets to {p['new_user']}")


async def admin_login(page):
    """Django's admin has its own login form (the queue settings live there)."""
    yield django_suite.admin_login(page, USER, PASSWORD)


async def solve_queue_admin(page, instruction, task):
    """Queues in Django's admin: the add form (the slug fills itself from the title; typed over), or a
    queue's change form found in the list."""
    p = parse_instruction(task, instruction)
    yield admin_login(page)
    if task in ("create-queue", "create-private-queue"):
        yield Move("click", css="#content-main tr.model-queue a.addlink", why="to add a new queue")
        yield reach(page, "type", "#id_title", value=p["queue"], why="to enter the queue's name")
        yield reach(page, "type", "#id_slug", value=p["slug"], why="to set the queue's slug")
        yield reach(page, "type", "#id_email_address", value=p["email"],
                    why="to set the queue's e-mail address")
        yield check_box(page, "#id_allow_public_submission", task == "create-queue",
                        "to allow submissions from the public form" if task == "create-queue"
                        else "to keep the queue off the public form")
    else:
        yield Move("click", css="#content-main tr.model-queue th a", text="Queues",
                   why="to open the list of queues")
        yield Move("click", css="#result_list th a", text=p["queue"], why=f"to open the {p['queue']} queue")
        if task == "close-public-queue":
            yield check_box(page, "#id_allow_public_submission", False,
                            "to stop submissions from the public form")
        else:
            yield reach(page, "type", "#id_escalate_days", value=p["days"],
                        why=f"to escalate tickets after {p['days']} days")
    yield reach(page, "click", "input[name=_save]", why="to save the queue")


async def solve_settings(page, instruction, task):
    """The user menu's settings page: a select or a checkbox, then Save Changes."""
    p = parse_instruction(task, instruction)
    yield login(page)
    yield Move("click", css="#userDropdown", why="to open the user menu")
    yield Move("click", css=".dropdown-menu.show a[href='/settings/']", why="to open your settings")
    if task == "tickets-per-page":
        yield reach(page, "select", "#id_tickets_per_page", value=p["n"],
                    why=f"to show {p['n']} tickets per page")
    else:
        box = "#id_email_on_ticket_assign" if task == "no-assign-emails" else "#id_login_view_ticketlist"
        yield check_box(page, box, False, "to stop e-mails about tickets assigned to you"
                        if task == "no-assign-emails" else "to land on the dashboard after logging in")
    yield reach(page, "click", "input[type=submit]", why="to save your settings")


MONTH_ABBR = {"Jan.": 1, "Feb.": 2, "March": 3, "April": 4, "May": 5, "June": 6, "July": 7, "Aug.": 8,
              "Sept.": 9, "Oct.": 10, "Nov.": 11, "Dec.": 12}   # Django's "N j, Y" month names


async def solve_fact(page, instruction, task):
    """A fact off the ticket page: the submitter's e-mail (a read-only box), the due date."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    if task == "ticket-submitter":
        yield Move("stop", value=await page.input_value("input[aria-label='Submitter email']"))
        return
    if task == "ticket-status":   # "Open", or "Open - On Hold"
        yield Move("stop", value=(await fact(page, "Status") or "").split(" - ")[0])
        return
    due = await fact(page, "Due date") or ""
    m = re.match(r"(\S+) (\d+), (\d{4})", due)
    if m is None or m[1] not in MONTH_ABBR:
        raise ExpertError(f"no due date on {page.url}: {due!r}")
    yield Move("stop", value=datetime.date(int(m[3]), MONTH_ABBR[m[1]], int(m[2])).isoformat())


async def solve_staff_user(page, instruction, task):
    """Users in Django's admin: the add form (username, password twice), then the change form it leads
    to (names, e-mail, Staff status); or a user found by search, with one box flipped."""
    p = parse_instruction(task, instruction)
    yield admin_login(page)
    if task == "create-agent":
        yield Move("click", css="#content-main tr.model-user a.addlink", why="to add a new user")
        yield Move("type", css="#id_username", value=p["username"], why="to enter the new username")
        yield Move("type", css="#id_password1", value=p["password"], why="to set the password")
        yield Move("type", css="#id_password2", value=p["password"], why="to confirm the password")
        yield reach(page, "click", "input[name=_save]", why="to create the account")
        yield reach(page, "type", "#id_first_name", value=p["first"], why="to enter the first name")
        yield reach(page, "type", "#id_last_name", value=p["last"], why="to enter the last name")
        yield reach(page, "type", "#id_email", value=p["email"], why="to enter the e-mail address")
        yield check_box(page, "#id_is_staff", True, "to give the account staff access")
    else:
        yield Move("click", css="#content-main tr.model-user th a", text="Users",
                   why="to open the list of users")
        yield Move("type", css="#searchbar", value=p["username"], why=f"to search for {p['username']}")
        yield Move("press", value="Enter", why="to run the search")
        yield Move("click", css="#result_list th a", text=p["username"],
                   why=f"to open {p['username']}'s account")
        if task == "deactivate-agent":
            yield check_box(page, "#id_is_active", False, "to deactivate the account")
        else:
            yield check_box(page, "#id_is_superuser", True, "to make the account a superuser")
    yield reach(page, "click", "input[name=_save]", why="to save the account")


async def solve_kb_admin(page, instruction, task):
    """Knowledge-base items in Django's admin: the add form (section, texts, "last updated" from its
    Today and Now shortcuts), or an item's change form with Enabled unticked."""
    p = parse_instruction(task, instruction)
    yield admin_login(page)
    if task == "create-kb-item":
        yield Move("click", css="#content-main tr.model-kbitem a.addlink",
                   why="to add a knowledge-base article")
        yield reach(page, "select", "#id_category", value=p["category"],
                    why=f"to put the article in {p['category']}")
        yield reach(page, "type", "#id_title", value=p["title"], why="to enter the article's title")
        yield reach(page, "type", "#id_question", value=p["question"], why="to enter the question")
        yield reach(page, "type", "#id_answer", value=p["answer"], why="to enter the answer")
        for shortcut in ("Today", "Now"):   # the browser's clock stands still at the data's today
            if await page.locator(f".datetimeshortcuts a:text-is('{shortcut}')").count():
                yield reach(page, "click", ".datetimeshortcuts a", text=shortcut,
                            why="to set the last-updated date to today" if shortcut == "Today"
                            else "to set the last-updated time to now")
        yield check_box(page, "#id_enabled", True, "to enable the article")
    else:
        yield Move("click", css="#content-main tr.model-kbitem th a", why="to open the list of articles")
        yield Move("click", css="#result_list th a", text=p["item"], why="to open the outdated article")
        yield check_box(page, "#id_enabled", False, "to disable the article")
    yield reach(page, "click", "input[name=_save]", why="to save the article")


async def solve_ignore(page, instruction, task):
    """The link beside the submitter's address on the ticket page opens the ignore form: a name, the
    address read off the ticket, maybe one queue (no queue ticked: every queue), Save."""
    p = parse_instruction(task, instruction)
    yield open_ticket(page, p["id"])
    email = await page.input_value("input[aria-label='Submitter email']")   # the form does not fill it in
    yield reach(page, "click", "a[href^='/ignore/add/']", why="to start ignoring the submitter's e-mail")
    yield reach(page, "type", "#id_name", value=p["name"], why="to name the ignore rule")
    yield reach(page, "type", "#id_email_address", value=email, why="to enter the address to ignore")
    if task == "ignore-submitter-queue":
        yield check_box(page, "#" + await label_for(page, "form[method=post] label", p["queue"]), True,
                        f"to ignore the address only in {p['queue']}")
    yield reach(page, "click", "form[method=post] button[type=submit]", text="Save",
                why="to save the ignore rule")


async def label_for(page, css, text):
    """The id of the input a <label> (matched by its text) is for."""
    box = await page.evaluate("([css, text]) => { const l = [...document.querySelectorAll(css)]"
                              ".find(l => l.textContent.trim() === text); return l ? (l.htmlFor ||"
                              " (l.querySelector('input') || {}).id) : null; }", [css, text])
    if not box:
        raise ExpertError(f"no box labelled {text!r}")
    return box


async def solve_saved_query(page, instruction, task):
    """A filtered list, then the Queries panel's Save tab: a title, Shared ticked or not, Save."""
    p = parse_instruction(task, instruction)
    yield open_list(page)
    if task == "save-query":
        yield filter_list(page, statuses={"Open", "Reopened"}, owner=p["username"])
    else:
        yield filter_list(page, statuses={"Resolved"}, queue=p["queue"])
    yield reach(page, "click", "#queries", why="to open the Queries panel")
    await wait_for(page, "#offcanvasQueries.show", "the Queries panel")
    yield reach(page, "type", "#save-query-tab-pane #id_title", value=p["title"], why="to name the query")
    yield check_box(page, "#id_shared", task == "save-shared-query", "to share the query with the team"
                    if task == "save-shared-query" else "to keep the query private")
    yield reach(page, "click", "#save-query-tab-pane button[type=submit]", why="to save the query")


EXPERTS = {   # template -> expert(page, instruction, task)
    "assign": solve_assign,
    "respond": solve_respond,
    "details": solve_details,
    "new-ticket": solve_new_ticket,
    "public": solve_public,
    "answer": solve_answer,
    "fact": solve_fact,
    "hold": solve_hold,
    "edit": solve_edit,
    "delete": solve_delete,
    "dependency": solve_dependency,
    "filter": solve_filter,
    "merge": solve_merge,
    "bulk": solve_bulk,
    "queue-admin": solve_queue_admin,
    "settings": solve_settings,
    "staff-user": solve_staff_user,
    "kb-admin": solve_kb_admin,
    "ignore": solve_ignore,
    "saved-query": solve_saved_query,
}
