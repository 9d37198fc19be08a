"""envs/backoffice/experts.py -- the back office's scripted experts: log in, then work through the
admin like a person who knows it. One expert per template (tasks/backoffice.json groups its tasks by
`template`); it gets the task's name for the variant's route and fields. They read the task's
parameters back out of the instruction (the task's own template turned into a regex), find rows by
their cell texts and options by their labels, and scroll a target below the fold into view first.
A step that is itself a sequence of moves (log in, open a list) is yielded whole: envs.flatten.
"""
import datetime

from envs import MONTHS, ExpertError, Move, django_suite, js_fn, reach

USER, PASSWORD = "admin", "admin-pass-2026"   # seeded by envs/backoffice


def parse_instruction(task, instruction):
    return django_suite.parse_instruction("backoffice", task, instruction)


# The changelist rows as {field-name: cell text}, in order (the admin gives each cell a field-NAME class).
_JS_ROWS = """() => [...document.querySelectorAll('#result_list tbody tr')].map(tr => Object.fromEntries(
    [...tr.querySelectorAll('[class*=field-]')].map(c => [[...c.classList].find(k => k.startsWith('field-')).slice(6),
                                                         c.textContent.replace(/\\s+/g, ' ').trim()])))"""


async def changelist_rows(page):
    return await page.evaluate(_JS_ROWS)


def row_index(rows, **cells):
    """The first changelist row whose cells have these texts."""
    k = next((k for k, r in enumerate(rows) if all(r.get(f) == v for f, v in cells.items())), None)
    if k is None:
        raise ExpertError(f"no row with {cells} among {len(rows)} rows")
    return k


async def login(page):
    """The first page of every episode is the login form (episodes start logged out)."""
    yield django_suite.admin_login(page, USER, PASSWORD)


async def open_list(page, model, search=None, why=None):
    """From anywhere: log in, open a model's list from the index, search it (`why`: what the search finds)."""
    yield login(page)
    yield Move("click", css="#content-main th a", text=model, why=f"to open the list of {model.lower()}")
    if search is not None:
        yield Move("type", css="#searchbar", value=search, why=why)
        yield Move("press", value="Enter", why="to run the search")


async def open_add_form(page, model, why):
    """Log in, then the index's Add link of a model (the model's class name, lowercased)."""
    yield login(page)
    yield Move("click", css=f"#content-main tr.model-{model} a.addlink", why=why)


async def pick_filter(page, title, choice, why):
    """One choice of a list filter in the sidebar ("By status: Open"); choices like "No" repeat across filters."""
    yield reach(page, "click", f'#changelist-filter details[data-filter-title="{title}"] a', text=choice,
                why=why)


async def run_admin_action(page, rows, action, tick, why):
    """Tick the changelist rows (by index; `tick`: what they are), choose the admin action (`why`: what
    it does to them), press Go."""
    for k in rows:
        yield reach(page, "click", "#result_list input.action-select", nth=k, why=tick)
    yield reach(page, "select", "select[name=action]", value=action, why=why)
    yield Move("click", css="button[name=index]", why="to apply the action to the selected rows")


async def save(page, why, name="_save"):
    yield reach(page, "click", f"input[name={name}]", why=why)


async def confirm_delete(page, why):
    """The admin's "Are you sure?" page: its form's submit button is "Yes, I'm sure"."""
    yield reach(page, "click", "#content form input[type=submit]", why=why)


async def move_option(page, field, label, why, remove=False):
    """Move one option across a filter_horizontal widget (groups, permissions): narrow the
    'available' list with its filter box, select the option whose label is `label` or ends with
    ' | label' (permissions read "Shop | ticket | Can delete ticket"), press the arrow button (`why`)."""
    src, button = ("to", "remove") if remove else ("from", "add")
    kind = field[:-1]   # "group", "permission"
    if not remove:   # the chosen list is short; the available one can be long
        yield reach(page, "type", f"#id_{field}_input", value=label, why=f"to find the {label} {kind}")
    options = await page.evaluate("(css) => [...document.querySelectorAll(css)].map(o => o.textContent)",
                                  f"#id_{field}_{src} option")
    full = next((o for o in options if o == label or o.endswith(" | " + label)), None)
    if full is None:
        raise ExpertError(f"no option {label!r} in #id_{field}_{src}")
    yield reach(page, "select", f"#id_{field}_{src}", value=full, why=f"to select the {label} {kind}")
    yield reach(page, "click", f"#id_{field}_{button}", why=why)


# edit-customer: which form field gets which parameter (None: tick the checkbox), and why.
CUSTOMER_EDITS = {
    "update-customer-contact": [("email", "new_email", "to change the customer's email"),
                                ("phone", "new_phone", "to change the customer's phone number")],
    "update-customer-email": [("email", "new_email", "to enter the customer's new email")],
    "make-customer-vip": [("is_vip", None, "to mark the customer as a VIP")],
    "move-customer": [("city", "new_city", "to update the customer's city"),
                      ("company", "new_company", "to update the customer's company")],
}


async def solve_edit_customer(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield open_list(page, "Customers", p["name"], why=f"to find customer {p['name']}")
    yield Move("click", css="#result_list th.field-name a", text=p["name"],
               why=f"to open {p['name']}'s record")
    for field, param, why in CUSTOMER_EDITS[task]:
        if param is None:
            yield reach(page, "click", f"#id_{field}", why=why)
        else:
            yield reach(page, "type", f"#id_{field}", value=p[param], why=why)
    yield save(page, f"to save {p['name']}'s record")


async def drill_dates(page, day):
    """Drill the changelist's date hierarchy down to a day (or a month, when `day` is YYYY-MM). The
    admin skips the levels that have one choice only, so each level is clicked only when it is there."""
    date = datetime.date.fromisoformat(day if len(day) > 7 else day + "-01")
    month = MONTHS[date.month - 1]
    titles = [(str(date.year), str(date.year)), (f"{month} {date.year}", f"{month} {date.year}")]
    if len(day) > 7:
        titles.append((f"{month} {date.day}", f"{month} {date.day}, {date.year}"))
    for title, when in titles:
        links = await page.evaluate(js_fn("t", "return [...document.querySelectorAll('nav.toplinks a')]"
                                             ".filter(a => norm(a.textContent) === t).length;"), title)
        if links:
            yield Move("click", css="nav.toplinks a", text=title, why=f"to narrow the orders to {when}")


async def solve_pay_orders(page, instruction, task):
    """Find the orders (the customer's by search, or a day's by the date hierarchy), filter to unpaid,
    tick each that is not cancelled, run the action."""
    p = parse_instruction(task, instruction)
    what = f"{p['customer']}'s unpaid orders" if "customer" in p else f"the unpaid orders of {p['day']}"
    yield open_list(page, "Orders", p.get("customer"), why=f"to find {p.get('customer')}'s orders")
    if "day" in p:
        yield drill_dates(page, p["day"])
    yield pick_filter(page, "paid", "No", why="to show only unpaid orders")
    rows = await changelist_rows(page)
    # a search also matches other customers' names, emails and notes: keep the customer's own rows
    ticks = [k for k, row in enumerate(rows)
             if row["status"] != "Cancelled" and ("customer" not in p or row["customer"] == p["customer"])]
    yield run_admin_action(page, ticks, "Mark selected orders as paid",
                           tick=f"to select {what} except cancelled ones", why=f"to mark {what} as paid")


async def solve_close_ticket(page, instruction, task):
    p = parse_instruction(task, instruction)
    if task == "close-oldest-ticket":   # filter by assignee and status, sort oldest first, take the top row
        yield open_list(page, "Tickets")
        yield pick_filter(page, "assigned to", p["username"],
                          why=f"to show only tickets assigned to {p['username']}")
        yield pick_filter(page, "status", "Open", why="to show only open tickets")
        yield Move("click", css="#result_list th.column-created div.text a",   # newest first -> oldest first
                   why="to sort the tickets oldest first")
        created = await page.evaluate("() => document.querySelector('#result_list th.column-created').className")
        if "ascending" not in created:
            raise ExpertError("the Created column did not sort ascending")
        k = 0
        which = f"the oldest open ticket of {p['username']}"
    else:
        yield open_list(page, "Tickets", p["customer"], why=f"to find {p['customer']}'s tickets")
        k = row_index(await changelist_rows(page), subject=p["subject"], customer=p["customer"], status="Open")
        which = f"the ticket \"{p['subject']}\""
    if task == "close-ticket-form":
        ticket_id = (await changelist_rows(page))[k]["id"]
        yield Move("click", css="#result_list th.field-id a", text=ticket_id, why=f"to open {which}")
        yield reach(page, "select", "#id_status", value="Closed", why="to set the ticket's status to Closed")
        yield save(page, "to save the closed ticket")
    else:
        yield run_admin_action(page, [k], "Close selected tickets", tick=f"to select {which}",
                               why=f"to close {which}")


async def solve_product_active(page, instruction, task):
    """Bulk action on the searched row; or the product form, found by search (deactivate) or by the
    Active filter (reactivate), with its Active box toggled."""
    p = parse_instruction(task, instruction)
    if task == "reactivate-product":
        yield open_list(page, "Products")
        yield pick_filter(page, "active", "No", why="to show only inactive products")
    else:
        yield open_list(page, "Products", p.get("sku", p["product"]),
                        why=f"to find the product {p['product']}")
    rows = await changelist_rows(page)
    k = row_index(rows, **({"sku": p["sku"]} if "sku" in p else {"name": p["product"]}))
    if task == "deactivate-product":
        yield run_admin_action(page, [k], "Deactivate selected products", tick=f"to select {p['product']}",
                               why=f"to deactivate {p['product']}")
        return
    yield Move("click", css="#result_list th.field-sku a", text=rows[k]["sku"],
               why=f"to open {p['product']}'s page")
    active = task == "reactivate-product"
    yield reach(page, "click", "#id_active",
                why="to make the product active again" if active else "to stop selling the product")
    yield save(page, f"to save {p['product']}")


async def solve_answer(page, instruction, task):
    """Read the answer off the filtered list: a count of rows, or a cell."""
    p = parse_instruction(task, instruction)
    if task == "count-open-tickets":
        yield open_list(page, "Tickets")
        yield pick_filter(page, "assigned to", p["username"],
                          why=f"to show only tickets assigned to {p['username']}")
        yield pick_filter(page, "status", "Open", why="to show only open tickets")
        yield Move("stop", value=str(len(await changelist_rows(page))))
        return
    yield open_list(page, "Orders", p.get("customer") or p.get("id"),
                    why=f"to find {p['customer']}'s orders" if "customer" in p
                    else f"to find order #{p.get('id')}")
    if task == "order-total":   # the search also matches ids that contain this one
        rows = await changelist_rows(page)
        yield Move("stop", value=rows[row_index(rows, id=p["id"])]["total"])
        return
    if task == "count-orders-in-month":
        month = MONTHS.index(p["month"]) + 1
        yield drill_dates(page, f"{p['year']}-{month:02d}")
        yield pick_filter(page, "status", p["status_label"],
                          why=f"to show only {p['status_label'].lower()} orders")
        yield Move("stop", value=str(len(await changelist_rows(page))))
        return
    yield pick_filter(page, "paid", "No", why="to show only unpaid orders")   # count-unpaid-orders
    yield Move("stop", value=str(sum(r["customer"] == p["customer"] for r in await changelist_rows(page))))


async def solve_staff_user(page, instruction, task):
    """New users: the add form (username, password twice), then the change form it leads to (names,
    Staff status, groups). Existing users: search, open, move the group across the widget."""
    p = parse_instruction(task, instruction)
    if task.startswith("create-"):
        yield open_add_form(page, "user", why="to start a new staff account")
        yield Move("type", css="#id_username", value=p["username"], why="to set the new user's username")
        yield Move("type", css="#id_password1", value=p["password"], why="to set the new user's password")
        yield Move("type", css="#id_password2", value=p["password"], why="to confirm the password")
        yield save(page, f"to create the user {p['username']}")
        for field, why in (("first", "to enter the first name"), ("last", "to enter the last name"),
                           ("email", "to enter the email address")):
            if field in p:
                css = f"#id_{field}_name" if field != "email" else "#id_email"
                yield reach(page, "type", css, value=p[field], why=why)
        yield reach(page, "click", "#id_is_staff", why=f"to make {p['username']} a staff member")
    else:
        yield open_list(page, "Users", p["username"], why=f"to find the user {p['username']}")
        yield Move("click", css="#result_list th.field-username a", text=p["username"],
                   why=f"to open {p['username']}'s account")
    remove = task.startswith("remove-")
    yield move_option(page, "groups", p["group"], remove=remove,
                      why=(f"to take {p['username']} out of the {p['group']} group" if remove
                           else f"to add {p['username']} to the {p['group']} group"))
    yield save(page, f"to save {p['username']}'s account")


async def solve_group_permissions(page, instruction, task):
    p = parse_instruction(task, instruction)
    if task == "create-group":
        yield open_add_form(page, "group", why=f"to create the group {p['group']}")
        yield Move("type", css="#id_name", value=p["group"], why="to name the new group")
        perms = [f"Can view {p['model']}", f"Can change {p['model']}"]
    else:
        yield open_list(page, "Groups")
        yield Move("click", css="#result_list th a", text=p["group"], why=f"to open the {p['group']} group")
        perms = [p["perm"]]
    revoke = task.startswith("revoke-")
    for perm in perms:
        yield move_option(page, "permissions", perm, remove=revoke,
                          why=f"to take \"{perm}\" away from the group" if revoke
                          else f"to give the group \"{perm}\"")
    yield save(page, f"to save the {p['group']} group")


# The order form's inline rows: formset prefix ("lines-0"), the chosen product's label ("Name (SKU)"),
# whether the row is a saved line. The hidden template row (empty-form) is left out.
_JS_LINES = """() => [...document.querySelectorAll('#lines-group tr.form-row:not(.empty-form)')].map(tr => {
    const opt = tr.querySelector('select[name$="-product"] option:checked');
    return {prefix: tr.id, product: opt && opt.value ? opt.textContent.trim() : '',
            saved: tr.classList.contains('has_original')};
})"""


async def open_order(page, order_id):
    yield open_list(page, "Orders", order_id, why=f"to find order #{order_id}")
    # the search also matches ids containing it
    yield Move("click", css="#result_list th.field-id a", text=order_id, why=f"to open order #{order_id}")


async def solve_order_lines(page, instruction, task):
    """The inline: a new line in the empty extra row (the product through its autocomplete box), a
    quantity typed into a saved line, or a saved line's Delete box; then save the order."""
    p = parse_instruction(task, instruction)
    yield open_order(page, p["order_id"])
    lines = await page.evaluate(_JS_LINES)
    if task == "add-order-line":
        row = next(r for r in lines if not r["saved"] and not r["product"])["prefix"]
        yield reach(page, "click", f"#{row} .select2-selection", why="to choose the product of a new line")
        yield Move("type", css=".select2-container--open .select2-search__field", value=p["sku"],
                   why=f"to search for {p['product']}")
        yield Move("click", css=".select2-container--open .select2-results__option",
                   text=f"{p['product']} ({p['sku']})", why=f"to pick {p['product']}")
        yield reach(page, "type", f"#id_{row}-quantity", value=p["qty"], why="to set how many units to add")
    else:
        row = next((r["prefix"] for r in lines if r["saved"] and r["product"].startswith(p["product"] + " (")), None)
        if row is None:
            raise ExpertError(f"order #{p['order_id']} has no line of {p['product']!r}")
        if task == "remove-order-line":
            yield reach(page, "click", f"#id_{row}-DELETE", why=f"to remove the {p['product']} line")
        else:
            yield reach(page, "type", f"#id_{row}-quantity", value=p["qty"],
                        why=f"to change the quantity of {p['product']}")
    yield save(page, f"to save order #{p['order_id']}")


async def solve_delete(page, instruction, task):
    """A never-sold product from its change form's Delete link; a customer, or a customer's closed
    tickets, with the bulk delete action. Both end on the confirmation page."""
    p = parse_instruction(task, instruction)
    if task == "delete-product":
        what = f"the product {p['product']}"
        yield open_list(page, "Products", p["sku"], why=f"to find {what}")
        yield Move("click", css="#result_list th.field-sku a", text=p["sku"],
                   why=f"to open {p['product']}'s page")
        yield reach(page, "click", "a.deletelink", why=f"to delete {what}")
    elif task == "delete-customer":
        what = f"customer {p['name']}"
        yield open_list(page, "Customers", p["name"], why=f"to find {what}")
        k = row_index(await changelist_rows(page), name=p["name"])
        yield run_admin_action(page, [k], "Delete selected customers", tick=f"to select {what}",
                               why=f"to delete {what}")
    else:
        what = f"{p['customer']}'s closed tickets"
        yield open_list(page, "Tickets", p["customer"], why=f"to find {p['customer']}'s tickets")
        yield pick_filter(page, "status", "Closed", why="to show only closed tickets")
        ticks = [k for k, r in enumerate(await changelist_rows(page)) if r["customer"] == p["customer"]]
        yield run_admin_action(page, ticks, "Delete selected tickets", tick=f"to select {what}",
                               why=f"to delete {what}")
    yield confirm_delete(page, f"to confirm deleting {what}")


async def solve_order_status(page, instruction, task):
    """Set the status and save. Shipping an unpaid order is refused ("A shipped order must be paid."):
    then tick Paid -- the instruction says it was paid -- and save again."""
    p = parse_instruction(task, instruction)
    yield open_order(page, p["order_id"])
    status = "Shipped" if task == "ship-order" else "Cancelled"
    yield reach(page, "select", "#id_status", value=status, why=f"to set the order's status to {status}")
    yield save(page, f"to save order #{p['order_id']}")
    if await page.locator(".errorlist.nonfield").count():
        yield reach(page, "click", "#id_paid", why="to mark the order as paid so it can ship")
        yield save(page, f"to save order #{p['order_id']} again")


async def solve_product_stock_price(page, instruction, task):
    p = parse_instruction(task, instruction)
    yield open_list(page, "Products", p["sku"], why=f"to find product {p['sku']}")
    k = row_index(await changelist_rows(page), sku=p["sku"])
    if task == "set-price-in-list":   # the list's editable column, then the list's own Save
        yield reach(page, "type", "#result_list td.field-price input", nth=k, value=p["new_price"],
                    why=f"to change the price of {p['sku']}")
        yield save(page, "to save the new price")
        return
    yield Move("click", css="#result_list th.field-sku a", text=p["sku"],
               why=f"to open {p['product']}'s page")
    stock = int(await page.input_value("#id_stock"))   # read what is there, add the delivery
    yield reach(page, "type", "#id_stock", value=str(stock + int(p["n"])),
                why=f"to add the {p['n']} delivered units to the stock")
    yield save(page, "to save the new stock level")


async def solve_ticket_edit(page, instruction, task):
    """Open the ticket (by search: its row; by filter: the assignee's newest open one) and set a select."""
    p = parse_instruction(task, instruction)
    if task == "hand-over-ticket":
        yield open_list(page, "Tickets")
        yield pick_filter(page, "assigned to", p["old"], why=f"to show only tickets assigned to {p['old']}")
        yield pick_filter(page, "status", "Open", why="to show only open tickets")
        k = 0   # the list's own order: newest first
        which = f"{p['old']}'s newest open ticket"
    else:
        yield open_list(page, "Tickets", p["customer"], why=f"to find {p['customer']}'s tickets")
        k = row_index(await changelist_rows(page), subject=p["subject"], customer=p["customer"], status="Open")
        which = f"the ticket \"{p['subject']}\""
    yield Move("click", css="#result_list th.field-id a", text=(await changelist_rows(page))[k]["id"],
               why=f"to open {which}")
    if task == "escalate-ticket":
        yield reach(page, "select", "#id_priority", value="High",
                    why="to raise the ticket's priority to High")
    else:
        yield reach(page, "select", "#id_assigned_to", value=p["new"],
                    why=f"to assign the ticket to {p['new']}")
    yield save(page, "to save the ticket")


EXPERTS = {   # template -> expert(page, instruction, task)
    "edit-customer": solve_edit_customer,
    "pay-orders": solve_pay_orders,
    "close-ticket": solve_close_ticket,
    "product-active": solve_product_active,
    "answer": solve_answer,
    "staff-user": solve_staff_user,
    "group-permissions": solve_group_permissions,
    "order-lines": solve_order_lines,
    "delete": solve_delete,
    "order-status": solve_order_status,
    "product-stock-price": solve_product_stock_price,
    "ticket-edit": solve_ticket_edit,
}
