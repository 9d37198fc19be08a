"""envs/shop/experts.py -- the shop's scripted experts: a member of staff who knows Oscar's dashboard, and
customers who know its storefront. One expert per template (tasks/shop.json groups its tasks by
`template`); it gets the task's name for the variant's route and fields, and reads the task's parameters
back out of the instruction (envs.django_suite.parse_instruction). A step that is itself a sequence of
moves (log in, open an order, choose in a select box) is yielded whole: envs.flatten.

Two widgets shape the dashboard's moves. Its <select>s are select2 boxes (the <select> itself is hidden):
a click opens the box, typing filters a long list, a click picks the option. Its tables put a row's
actions in an Actions menu. The storefront's selects are plain: there `select` picks the option.
"""
import re

from playwright.async_api import Error as PlaywrightError

from envs import MONTHS, ExpertError, Move, django_suite, flatten, js_fn, reach, where

ADMIN, ADMIN_PASSWORD = "admin@harbourpine.test", "admin-pass-2026"   # seeded by envs/shop
CUSTOMER_PASSWORD = "customer-pass-2026"
SHORT_MONTHS = {name[:3]: k for k, name in enumerate(MONTHS, 1)}   # Oscar's dates: "23 Jan 2026"


def parse_instruction(task, instruction):
    return django_suite.parse_instruction("shop", task, instruction)


# ----------------------------------------------------------------------------------------------
# Reading the page: rows of tables, a value beside its label.

async def row_box(page, name, words):
    """The checkbox `name` of the table row that shows every one of `words` (a CSS selector by its value)."""
    value = await page.evaluate(js_fn("[name, words]", """
        const tr = [...document.querySelectorAll('tr')].find(tr => tr.querySelector(`input[name=${name}]`)
            && words.every(w => norm(tr.textContent).includes(w)));
        return tr ? tr.querySelector(`input[name=${name}]`).value : null;"""), [name, words])
    if value is None:
        raise ExpertError(f"no row with {words} and a {name} box on {page.url}")
    return f"input[name={name}][value='{value}']"


async def row_action(page, name, action, why):
    """The Actions menu of a table's row (the row showing `name`), then one of its items (for `why`)."""
    menus = "table tbody tr button.dropdown-toggle"
    k = await page.evaluate(js_fn("[menus, name]", "return [...document.querySelectorAll(menus)]"
                                  ".findIndex(b => norm(b.closest('tr').textContent).includes(name));"),
                            [menus, name])
    if k < 0:
        raise ExpertError(f"no row {name!r} with an Actions menu on {page.url}")
    yield open_menu(page, ".dropdown-menu.show", menus, nth=k, why=f"to show the actions for {name}")
    yield Move("click", css=".dropdown-menu.show a", text=action, why=why)


async def open_menu(page, menu_css, css, text=None, nth=0, why=None):
    """Click what opens a menu (a dropdown, a select2 box) until the menu shows: on a busy machine a
    click can land while the page is still setting itself up, and a person clicks again."""
    for _ in range(3):
        yield reach(page, "click", css, text=text, nth=nth, why=why)
        if await page.locator(menu_css).count():
            return
    raise ExpertError(f"clicking {css} {text or ''} opened no {menu_css} on {page.url}")


async def column(page, heading):
    """The cells under a table heading (a table whose first row holds its headings), top to bottom."""
    return await page.evaluate(js_fn("heading", """
        for (const table of document.querySelectorAll('table')) {
            const rows = [...table.querySelectorAll('tr')];
            const heads = rows.length ? [...rows[0].children].map(c => norm(c.textContent)) : [];
            const k = heads.indexOf(heading);
            const cells = rows.slice(1).map(r => r.children[k]).filter(Boolean);
            if (k >= 0) return cells.map(c => norm(c.textContent));
        }
        return [];"""), heading)


async def first_in_column(page, heading):
    cells = await column(page, heading)
    if not cells:
        raise ExpertError(f"no {heading!r} column on {page.url}")
    return cells[0]


# ----------------------------------------------------------------------------------------------
# The dashboard.

async def staff_login(page):
    """Staff tasks start at /dashboard/, which sends a visitor to the dashboard's login form."""
    yield Move("type", css="#id_username", value=ADMIN, why="to sign in to the dashboard as the admin")
    yield Move("type", css="#id_password", value=ADMIN_PASSWORD,
               why="to complete the admin's sign-in details")
    yield Move("click", css="#dashboard_login_form input[type=submit]", why="to sign in to the dashboard")


async def menu(page, section, item, why):
    """The dashboard's menu bar: a section's dropdown, then one of its pages (for `why`)."""
    yield open_menu(page, "#bottom_nav_bar .dropdown-menu.show", "#bottom_nav_bar a.nav-link", text=section,
                    why=f"to open the dashboard's {section} menu")
    yield Move("click", css="#bottom_nav_bar .dropdown-menu.show a", text=item, why=why)


async def choose(page, select, label, choices, why):
    """Pick `label` in a select box (for `why`; `choices` names its options: "statuses"). A select2 box (in
    front of the hidden <select> matched by `select`) opens with a click; its list is filtered by typing when
    the option is below the list's fold; then the option is clicked. A select the dashboard left plain (a
    search form's) is a plain select."""
    await page.wait_for_load_state("load")   # the dashboard makes its select2 boxes once the page is ready
    enhanced = await page.evaluate("(css) => { const s = document.querySelector(css);"
                                   " return !!s && s.classList.contains('select2-hidden-accessible'); }",
                                   select)
    if not enhanced:
        yield reach(page, "select", select, value=label, why=why)
        return
    box = f"{select} + .select2 .select2-selection__rendered"
    yield open_menu(page, ".select2-container--open .select2-results", box, why=f"to show the {choices}")
    option = ".select2-container--open .select2-results__option"
    if await where(page, option, label) != "ok":
        yield Move("type", css=".select2-container--open .select2-search__field", value=label,
                   why=f"to find {label} among the {choices}")
    options = await page.evaluate(js_fn("css", "return [...document.querySelectorAll(css)]"
                                                ".map(o => norm(o.textContent));"), option)
    if label not in options:
        raise ExpertError(f"no option {label!r} in the select box {select}: {options}")
    yield Move("click", css=option, text=label, why=why)


async def choose_many(page, select, label, choices, why):
    """Add `label` to a select2 box of many choices (for `why`): type into its own search field, click the
    option."""
    yield reach(page, "type", f"{select} + .select2 .select2-search__field", value=label,
                why=f"to find {label} among the {choices}")
    yield Move("click", css=".select2-container--open .select2-results__option", text=label, why=why)


async def open_order(page, number):
    """Fulfilment > Orders, then the order number in the list's search box: an exact number opens the
    order itself."""
    yield menu(page, "Fulfilment", "Orders", why=f"to look up order #{number}")
    yield Move("type", css="#id_order_number", value=number, why=f"to find order #{number}")
    yield Move("press", value="Enter", why=f"to open order #{number}")


async def open_tab(page, label, why):
    """One of the tabs of an order's or a customer's page: Order contents, Notes, Addresses..."""
    yield reach(page, "click", ".nav-tabs a", text=label, why=why)


async def find_customer(page, field, value):
    """Customers > Customers, searched by e-mail address or name, then the customer's page."""
    yield menu(page, "Customers", "Customers", why="to go to the customer list")
    yield Move("type", css=f"#id_{field}", value=value, why=f"to search for the customer {value}")
    yield Move("click", css="button[name=search]", why="to run the customer search")
    yield reach(page, "click", "#default table tbody a", why=f"to open the page of the customer {value}")


async def solve_order_status(page, instruction, task):
    """The order page's "Change order status" box: a new status from the pipeline, then Change status."""
    p = parse_instruction(task, instruction)
    status = {"process-order": "Being processed", "ship-order": "Shipped", "complete-order": "Complete",
              "cancel-order": "Cancelled"}[task]
    yield staff_login(page)
    yield open_order(page, p["number"])
    yield choose(page, "#order_status_form select", status, choices="statuses",
                 why=f"to pick {status} as the order's new status")
    yield reach(page, "click", "#order_status_form button[type=submit]",
                why=f"to move order #{p['number']} to {status}")


async def solve_order_note(page, instruction, task):
    """The order's Notes tab: the message box and Save note. A customer's latest order is the first row of
    the Orders tab on the customer's page (newest first)."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    if task == "note-order":
        yield open_order(page, p["number"])
    else:
        yield find_customer(page, "email", p["email"])
        yield reach(page, "click", "#user_orders a", text=await first_in_column(page, "Order Number"),
                    why=f"to open {p['customer']}'s most recent order")
    yield open_tab(page, "Notes", why="to get to the order's notes")
    yield reach(page, "type", "#id_message", value=p["note"], why="to write the note")
    # the note form's own button: an order with a note still editable has a Delete button above it
    yield reach(page, "click", "#order_note_form input[type=submit]", why="to save the note on the order")


async def solve_order_facts(page, instruction, task):
    """Open the order and read the answer off its page: the Order information table, the Customer
    Information table, the quantities of its lines."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield open_order(page, p["number"])
    if task == "order-items":
        quantities = await page.evaluate("() => [...document.querySelectorAll("
                                         "'input[name^=selected_line_qty_]')].map(i => +i.value)")
        if not quantities:
            raise ExpertError(f"no order lines on {page.url}")
        yield Move("stop", value=str(sum(quantities)))
    elif task == "order-date":
        placed = await first_in_column(page, "Date of purchase")
        m = re.fullmatch(r"(\d+) (\w{3})\w* (\d{4})", placed)
        if m is None or m[2] not in SHORT_MONTHS:
            raise ExpertError(f"no date of purchase on {page.url}: {placed!r}")
        yield Move("stop", value=f"{m[3]}-{SHORT_MONTHS[m[2]]:02d}-{int(m[1]):02d}")
    else:
        heading = {"order-total": "Order Total", "order-email": "Email address",
                   "order-status-question": "Status"}[task]
        yield Move("stop", value=await first_in_column(page, heading))


async def advanced_search(page, why):
    """The order list's Advanced Search (a form in a modal over the list), opened for `why`."""
    yield menu(page, "Fulfilment", "Orders", why="to go to the order list")
    yield Move("click", css="a", text="Advanced Search", why=why)
    for _ in range(40):   # Bootstrap opens the modal from a timer
        if await page.locator(".modal.show #id_status").count():
            return
        await page.wait_for_timeout(50)
    raise ExpertError("the Advanced Search form did not open")


async def solve_order_search(page, instruction, task):
    """The order list filtered in its Advanced Search: by status, product or customer name. The list shows
    no total, so a count is its rows (the counted statuses fit on one page)."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield advanced_search(page, why={"orders-with-product": "to search the orders by product",
                                     "orders-of-customer": "to search the orders by customer name"}
                          .get(task, "to filter the orders by status"))
    if task in ("orders-by-status", "count-status"):
        yield choose(page, ".modal.show #id_status", p["status"], choices="statuses",
                     why=f"to list only the {p['status']} orders")
    elif task == "orders-with-product":
        yield Move("type", css=".modal.show #id_product_title", value=p["title"],
                   why=f"to find the orders that include {p['title']}")
    else:
        yield Move("type", css=".modal.show #id_name", value=p["customer"],
                   why=f"to find the orders placed by {p['customer']}")
    yield reach(page, "click", ".modal.show button[type=submit]", why="to show the matching orders")
    if task == "count-status":
        if await page.locator(".pagination").count():
            raise ExpertError(f"the {p['status']} orders take more than one page")
        yield Move("stop", value=str(await page.locator("#orders_form table tbody tr").count()))


async def open_product(page, title):
    """Catalogue > Products, searched by title, then the product's row: its edit form."""
    yield menu(page, "Catalogue", "Products", why="to go to the product list")
    yield Move("type", css="#id_title", value=title, why=f"to search the products for {title}")
    yield Move("press", value="Enter", why="to run the product search")
    yield reach(page, "click", "table a", text=title, why=f"to open the edit form of {title}")


async def product_section(page, label, why):
    """A section of the product form (Product details, Categories, Stock and pricing, ...)."""
    yield reach(page, "click", "#product_update_tabs a", text=label, why=why)


async def save_product(page, why):
    yield Move("click", css="button[name=action][value=save]", why=why)


async def solve_product_stock(page, instruction, task):
    """The product form's Stock and pricing section: a field of the first stock record."""
    p = parse_instruction(task, instruction)
    field, value = {"set-stock": ("num_in_stock", "stock"), "set-price": ("price", "price"),
                    "set-threshold": ("low_stock_threshold", "threshold")}[task]
    yield staff_login(page)
    yield open_product(page, p["title"])
    yield product_section(page, "Stock and pricing", why=f"to get to the stock record of {p['title']}")
    yield reach(page, "type", f"#id_stockrecords-0-{field}", value=p[value],
                why={"set-stock": f"to set the stock to {p.get('stock')} units",
                     "set-price": f"to set the price to £{p.get('price')}",
                     "set-threshold": f"to set the low stock threshold to {p.get('threshold')}"}[task])
    yield save_product(page, why={"set-stock": "to save the new stock level",
                                  "set-price": "to save the new price",
                                  "set-threshold": "to save the new low stock threshold"}[task])


async def solve_product_edit(page, instruction, task):
    """The product form: its title, its Is public box, or a category in the first empty row of its
    Categories section (the boxes name a category with its parent: "Garden > Tools")."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield open_product(page, p["title"])
    if task == "rename-product":
        yield reach(page, "type", "#id_title", value=p["new_title"],
                    why=f"to rename the product to {p['new_title']}")
    elif task == "hide-product":
        yield reach(page, "click", "#id_is_public", why="to take the product off the storefront")
    else:
        yield product_section(page, "Categories", why=f"to list {p['title']} in another category")
        k = await page.evaluate("() => [...document.querySelectorAll('select[id^=id_productcategory_set-]')]"
                                ".findIndex(s => !s.value)")
        if k < 0:
            raise ExpertError(f"the Categories section of {page.url} has no empty row")
        yield choose(page, f"#id_productcategory_set-{k}-category", f"{p['top']} > {p['category']}",
                     choices="categories", why=f"to add the product to {p['category']}")
    yield save_product(page, why={"rename-product": "to save the new title",
                                  "hide-product": "to save the product as not public"}
                       .get(task, "to save the new category"))


async def category_label(page, name):
    """A category's label in the product form's category boxes ("Garden > Tools"), by its own name."""
    labels = await page.evaluate("() => [...document.querySelectorAll('#id_productcategory_set-0-category "
                                 "option')].map(o => o.textContent.trim())")
    found = [label for label in labels if label.split(" > ")[-1] == name]
    if len(found) != 1:
        raise ExpertError(f"no single category {name!r} among {labels}")
    return found[0]


async def solve_product_create(page, instruction, task):
    """Catalogue > Products: the product type box and New Product, then the product form: title, UPC or
    Is public, a category (a product needs one), the first stock record."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield menu(page, "Catalogue", "Products", why="to go to the product list")
    yield choose(page, "#id_product_class", p["product_class"], choices="product types",
                 why=f"to create a {p['product_class']} product")
    yield Move("click", css="button[type=submit]", text="New Product", why="to start the new product")
    yield reach(page, "type", "#id_title", value=p["title"], why=f"to name the product {p['title']}")
    if task == "create-hidden-product":
        yield reach(page, "click", "#id_is_public", why="to keep the product off the storefront")
    else:
        yield reach(page, "type", "#id_upc", value=p["upc"], why=f"to give the product the UPC {p['upc']}")
    yield product_section(page, "Categories", why="to give the product its category")
    yield choose(page, "#id_productcategory_set-0-category", await category_label(page, p["category"]),
                 choices="categories", why=f"to put the product in {p['category']}")
    yield product_section(page, "Stock and pricing", why="to fill in the product's stock and price")
    yield choose(page, "#id_stockrecords-0-partner", "Harbour & Pine Warehouse", choices="partners",
                 why="to stock the product in the shop's warehouse")
    yield reach(page, "type", "#id_stockrecords-0-partner_sku", value=p["sku"],
                why=f"to give the stock record the SKU {p['sku']}")
    yield reach(page, "type", "#id_stockrecords-0-num_in_stock", value=p["stock"],
                why=f"to put {p['stock']} units in stock")
    yield reach(page, "type", "#id_stockrecords-0-price", value=p["price"],
                why=f"to price the product at £{p['price']}")
    yield save_product(page, why="to create the product")


async def solve_category(page, instruction, task):
    """Catalogue > Categories: Create new category (placed as the first child of its parent), or a
    subcategory's form (its parent's Actions > Edit children, then its name)."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield menu(page, "Catalogue", "Categories", why="to go to the category list")
    if task == "create-subcategory":
        yield reach(page, "click", "a", text="Create new category", why="to start a new category")
        yield reach(page, "type", "#id_name", value=p["name"], why=f"to name the category {p['name']}")
        yield choose(page, "#id_treebeard_position", "First child of", choices="positions",
                     why="to place the category inside another one")
        yield choose(page, "#id_treebeard_ref_node", p["parent"], choices="categories",
                     why=f"to put the category inside {p['parent']}")
    else:
        yield row_action(page, p["top"], "Edit children", why=f"to see the subcategories of {p['top']}")
        yield reach(page, "click", "table tbody a", text=p.get("old") or p["name"],
                    why=f"to open the {p.get('old') or p['name']} category")
        if task == "rename-category":
            yield reach(page, "type", "#id_name", value=p["new"], why=f"to rename the category to {p['new']}")
        else:
            yield reach(page, "click", "#id_is_public", why="to hide the category from the shop")
    yield reach(page, "click", "button[name=action][value=save]",
                why={"create-subcategory": "to create the category",
                     "rename-category": "to save the category's new name"}
                .get(task, "to save the category as hidden"))


async def solve_voucher(page, instruction, task):
    """Offers > Vouchers: Create new voucher (name, code, end date, its offer), or a voucher's Actions >
    Edit with another usage."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield menu(page, "Offers", "Vouchers", why="to go to the voucher list")
    if task == "create-voucher":
        yield reach(page, "click", "a", text="Create new voucher", why="to start a new voucher")
        yield reach(page, "type", "#id_name", value=p["name"], why=f"to name the voucher {p['name']}")
        yield reach(page, "type", "#id_code", value=p["code"],
                    why=f"to give the voucher the code {p['code']}")
        # the box's input mask wants the seconds; Tab closes the date picker (Escape would undo the typing)
        yield reach(page, "type", "#id_end_datetime", value=f"{p['end']} 23:59:00",
                    why=f"to make the voucher valid until {p['end']}")
        yield Move("press", value="Tab", why="to close the date picker")
        yield choose_many(page, "#id_offers", p["offer"], choices="offers",
                          why=f"to give the voucher the {p['offer']} discount")
    else:
        yield row_action(page, p["code"], "Edit", why=f"to edit the voucher {p['code']}")
        yield choose(page, "#id_usage", "Can only be used once per customer", choices="usage rules",
                     why="to allow one use per customer")
    yield reach(page, "click", "form button[type=submit]", text="Save", why="to save the voucher")


async def solve_offer(page, instruction, task):
    """Offers > Offers, the offer's page: Suspend offer / Reinstate offer, or its Incentive's Edit (the
    wizard's step 2, saved at once)."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield menu(page, "Offers", "Offers", why="to go to the offer list")
    yield reach(page, "click", "table a", text=p["name"], why=f"to open the {p['name']} offer")
    if task == "suspend-offer":
        yield reach(page, "click", "button", text="Suspend offer", why="to suspend the offer")
    elif task == "reinstate-offer":
        yield reach(page, "click", "button", text="Reinstate offer", why="to reinstate the offer")
    else:
        yield reach(page, "click", "a[href*='incentive']", text="Edit", why="to change the offer's discount")
        yield reach(page, "type", "#id_value", value=p["value"], why=f"to make the discount {p['value']}%")
        yield reach(page, "click", "button[type=submit]", text="Save changes", why="to save the new discount")


async def solve_offer_create(page, instruction, task):
    """Offers > Offers > Create new offer: the wizard's four steps (name and type; incentive; condition;
    the restrictions as they are)."""
    p = parse_instruction(task, instruction)
    site = task == "create-site-offer"
    yield staff_login(page)
    yield menu(page, "Offers", "Offers", why="to go to the offer list")
    yield reach(page, "click", "a", text="Create new offer", why="to start a new offer")
    yield reach(page, "type", "#id_name", value=p["name"], why=f"to name the offer {p['name']}")
    yield choose(page, "#id_offer_type", "Site offer - available to all users" if site else
                 "Voucher offer - only available after entering the appropriate voucher code",
                 choices="offer types",
                 why="to make it a site offer" if site else "to make it a voucher offer")
    yield reach(page, "click", "button[type=submit]", text="Continue to step 2",
                why="to go on to the offer's discount")
    yield choose(page, "#id_range", p["range"], choices="ranges",
                 why=f"to give the discount on {p['range']}")
    yield choose(page, "#id_type", "Discount is a percentage off of the product's value" if site else
                 "Discount is a fixed amount off of the basket's total", choices="discount types",
                 why="to take a percentage off the products" if site else "to take an amount off the basket")
    yield reach(page, "type", "#id_value", value=p["value"],
                why=f"to make the discount {p['value']}%" if site else f"to make the discount £{p['value']}")
    yield reach(page, "click", "button[type=submit]", text="Continue to step 3",
                why="to go on to the offer's condition")
    yield choose(page, "#id_range", p["range"], choices="ranges",
                 why=f"to count the basket's products from {p['range']}")
    yield choose(page, "#id_type", "Depends on number of items in basket that are in condition range",
                 choices="condition types", why="to make the offer depend on the number of items")
    yield reach(page, "type", "#id_value", value=p["items"], why=f"to require at least {p['items']} items")
    yield reach(page, "click", "button[type=submit]", text="Continue to step 4",
                why="to go on to the offer's restrictions")
    yield reach(page, "click", "button[type=submit]", text="Save this offer", why="to create the offer")


async def solve_review_moderation(page, instruction, task):
    """Content > Reviews, searched for those awaiting moderation (that search form's status box is a plain
    select): the review's box ticked, the new status, Update."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield menu(page, "Content", "Reviews", why="to go to the review list")
    yield choose(page, "select#id_status.form-control", "Requires moderation", choices="statuses",
                 why="to look for the reviews awaiting moderation")
    yield reach(page, "click", "button[type=submit]", text="Search",
                why="to list the reviews awaiting moderation")
    words = [p["title"], p["customer"]] + ([p["review_title"]] if "review_title" in p else [])
    yield reach(page, "click", await row_box(page, "selected_review", words),
                why=f"to select {p['customer']}'s review of {p['title']}")
    yield choose(page, "select[name=status].select2-hidden-accessible",
                 "Approved" if task == "approve-review" else "Rejected", choices="statuses",
                 why="to approve the review" if task == "approve-review" else "to reject the review")
    yield reach(page, "click", "button[name=update]", why="to save the review's new status")


async def solve_customer_lookup(page, instruction, task):
    """Customers > Customers, searched by e-mail or name; the customer's page lists their orders, and their
    addresses in its Addresses tab."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    if task == "customer-search":
        yield menu(page, "Customers", "Customers", why="to go to the customer list")
        yield Move("type", css="#id_email", value=p["email"], why=f"to search for the customer {p['email']}")
        yield Move("click", css="button[name=search]", why=f"to find the customer {p['email']}")
        return
    yield find_customer(page, "name", p["customer"])
    if task == "customer-order-count":
        yield Move("stop", value=str(len(await column(page, "Order Number"))))
        return
    yield open_tab(page, "Addresses", why=f"to see {p['customer']}'s address")
    # an address card's lines: name, street, town, postcode, country
    card = page.locator("#user_addresses .card")
    if not await card.count():
        raise ExpertError(f"no address on {page.url}")
    lines = [line.strip() for line in (await card.first.inner_text()).splitlines() if line.strip()]
    yield Move("stop", value=lines[-3])


async def solve_product_lookup(page, instruction, task):
    """The dashboard's product list searched by UPC (the title is in the results) or by title (the stock is
    in the product's form); or the shop's basket (its order total)."""
    p = parse_instruction(task, instruction)
    if task == "basket-total-question":
        yield add_to_basket(page, p["title"])
        yield view_basket(page)
        yield set_quantity(page, p["title"], p["quantity"])
        total = page.locator("td.total .price_color")
        if not await total.count():
            raise ExpertError(f"no order total on {page.url}")
        yield Move("stop", value=(await total.first.inner_text()).strip())
        return
    yield staff_login(page)
    yield menu(page, "Catalogue", "Products", why="to go to the product list")
    if task == "product-by-upc":
        yield Move("type", css="#id_upc", value=p["upc"],
                   why=f"to search the products for the UPC {p['upc']}")
        yield Move("press", value="Enter", why=f"to find the product with the UPC {p['upc']}")
        yield Move("stop", value=await first_in_column(page, "Title"))
        return
    yield Move("type", css="#id_title", value=p["title"], why=f"to search the products for {p['title']}")
    yield Move("press", value="Enter", why="to run the product search")
    yield reach(page, "click", "table a", text=p["title"], why=f"to open the edit form of {p['title']}")
    yield product_section(page, "Stock and pricing", why=f"to see the stock of {p['title']}")
    yield Move("stop", value=await page.input_value("#id_stockrecords-0-num_in_stock"))


async def solve_range(page, instruction, task):
    """Catalogue > Ranges, the Staff picks range's Actions > Edit products: the UPC box and Go!, or the
    product's box and Remove selected products."""
    p = parse_instruction(task, instruction)
    yield staff_login(page)
    yield menu(page, "Catalogue", "Ranges", why="to go to the list of ranges")
    yield row_action(page, "Staff picks", "Edit products", why="to change the products in Staff picks")
    if task == "add-to-range":
        yield reach(page, "type", "#id_query", value=p["upc"], why=f"to pick {p['title']} by its UPC")
        yield reach(page, "click", "button[type=submit]", text="Go!", why=f"to add {p['title']} to the range")
    else:
        yield reach(page, "click", await row_box(page, "selected_product", [p["title"]]),
                    why=f"to select {p['title']}")
        yield reach(page, "click", "button[type=submit]", text="Remove selected products",
                    why=f"to take {p['title']} out of the range")


# ----------------------------------------------------------------------------------------------
# The storefront.

async def customer_login(page, email):
    """The header's Login or register link, then the login form (it returns to the account page)."""
    yield Move("click", css="#login_link", why="to open the shop's sign-in form")
    yield Move("type", css="#id_login-username", value=email, why=f"to sign in as {email}")
    yield Move("type", css="#id_login-password", value=CUSTOMER_PASSWORD,
               why="to complete the account's sign-in details")
    yield Move("click", css="button[name=login_submit]", why="to sign in to the shop")


async def shop_search(page, text):
    """The header's search box."""
    yield Move("type", css="#id_q", value=text, why=f"to search the shop for {text}")
    yield Move("press", value="Enter", why="to run the search")


async def product_page(page, title):
    """The product's title in the search box, then its result."""
    yield shop_search(page, title)
    yield reach(page, "click", ".product_pod h3 a", text=title, why=f"to open the page of {title}")


async def add_to_basket(page, title):
    yield product_page(page, title)
    yield reach(page, "click", "#add_to_basket_form button[type=submit]", why=f"to put {title} in the basket")


async def view_basket(page):
    """The header's View basket button."""
    yield Move("click", css=".basket-mini button", text="View basket", why="to open the basket")


async def ajax_done(page):
    """Wait, as a person waits for the page to change, until its background requests (jQuery's) are done."""
    for _ in range(200):
        if await page.evaluate("() => !window.jQuery || jQuery.active === 0"):
            return
        await page.wait_for_timeout(50)
    raise ExpertError(f"a background request of {page.url} did not finish")


async def set_quantity(page, title, quantity):
    """The basket's quantity box of the product's line, then its Update button: the basket saves in the
    background and redraws itself."""
    titles = await page.evaluate("() => [...document.querySelectorAll('.basket-items h3 a')]"
                                 ".map(a => a.textContent.trim())")
    if title not in titles:
        raise ExpertError(f"{title!r} is not in the basket: {titles}")
    k = titles.index(title)
    yield reach(page, "type", f"#id_form-{k}-quantity", value=str(quantity),
                why=f"to change the quantity of {title} to {quantity}")
    yield reach(page, "click", "button[type=submit]", text="Update", nth=k, why="to update the basket")
    await ajax_done(page)


async def browse_category(page, top, category):
    """The header's Browse store menu, the top category, then the subcategory among the links beside it."""
    yield open_menu(page, ".dropdown-menu.show", "#navbarDropdown", text="Browse store",
                    why="to browse the shop's categories")
    yield Move("click", css=".dropdown-menu.show a", text=top, why=f"to open the {top} category")
    yield reach(page, "click", ".side_categories a", text=category, why=f"to open the {category} category")


async def solve_browse(page, instruction, task):
    """Browse store down to a category (then its Sort by box, or a product in it); or the search box, its
    results sorted by price, the first of them."""
    p = parse_instruction(task, instruction)
    if task == "search-cheapest":
        yield shop_search(page, p["style"])
        yield reach(page, "select", "#id_sort_by", value="Price low to high",
                    why="to put the cheapest results first")
        yield reach(page, "click", ".product_pod h3 a", why="to open the cheapest product")
        return
    yield browse_category(page, p["top"], p["category"])
    if task == "open-product":
        yield reach(page, "click", ".product_pod h3 a", text=p["title"],
                    why=f"to open the page of {p['title']}")
    else:
        order = "Price high to low" if task == "browse-category" else "Price low to high"
        yield reach(page, "select", "#id_sort_by", value=order,
                    why="to show the most expensive first" if task == "browse-category"
                    else "to show the cheapest first")


async def solve_basket(page, instruction, task):
    """Add the product(s) from their pages; a quantity is set in the basket."""
    p = parse_instruction(task, instruction)
    yield add_to_basket(page, p["title"])
    if task == "basket-two":
        yield add_to_basket(page, p["other"])
    elif task == "basket-quantity":
        yield view_basket(page)
        yield set_quantity(page, p["title"], p["quantity"])


async def solve_basket_voucher(page, instruction, task):
    """Add the product, set its quantity in the basket, then the basket's voucher box."""
    p = parse_instruction(task, instruction)
    yield add_to_basket(page, p["title"])
    yield view_basket(page)
    if task == "apply-voucher-quantity":
        yield set_quantity(page, p["title"], p["quantity"])
    yield reach(page, "click", "a, button", text="I have a voucher code...", why="to open the voucher box")
    yield reach(page, "type", "#id_code", value=p["code"], why=f"to use the voucher code {p['code']}")
    yield reach(page, "click", "button[type=submit]", text="Add voucher",
                why="to apply the voucher to the basket")


async def place_order(page):
    """Payment (nothing to enter in this shop), then the preview's Place order."""
    yield reach(page, "click", "a, button", text="Continue", why="to go on to the order preview")
    yield reach(page, "click", "#place-order", why="to place the order")


async def solve_guest_checkout(page, instruction, task):
    """Basket, Proceed to checkout, the guest's e-mail, the shipping address, payment, Place order."""
    p = parse_instruction(task, instruction)
    yield add_to_basket(page, p["title"])
    yield view_basket(page)
    if task == "guest-order-two":
        yield set_quantity(page, p["title"], 2)
    yield reach(page, "click", "a", text="Proceed to checkout", why="to start checking out")
    yield reach(page, "type", "#id_username", value=p["email"],
                why=f"to check out as a guest with {p['email']}")
    yield reach(page, "click", "button[type=submit]", text="Continue", why="to continue as a guest")
    for field in ("first_name", "last_name", "line1", "line4", "postcode"):
        yield reach(page, "type", f"#id_{field}", value=p[ADDRESS_PARAMS[field]],
                    why="to fill in the delivery address")
    if task == "guest-order-ireland":   # the box starts at the United Kingdom
        yield reach(page, "select", "#id_country", value="Ireland", why="to deliver the order to Ireland")
    yield reach(page, "click", "button[type=submit]", text="Continue", why="to ship to this address")
    yield place_order(page)


ADDRESS_PARAMS = {"first_name": "first", "last_name": "last", "line1": "line1", "line4": "town",
                  "postcode": "postcode"}   # an address form's fields -> the task's parameters


async def solve_customer_checkout(page, instruction, task):
    """Sign in, add the product, checkout: the saved address's Ship to button, payment, Place order."""
    p = parse_instruction(task, instruction)
    yield customer_login(page, p["email"])
    yield add_to_basket(page, p["title"])
    yield view_basket(page)
    if "quantity" in p:
        yield set_quantity(page, p["title"], p["quantity"])
    yield reach(page, "click", "a", text="Proceed to checkout", why="to start checking out")
    yield reach(page, "click", "button.ship-address",   # the first: the default shipping address
                why="to ship to the saved address")
    yield place_order(page)


async def account_page(page, label, why):
    """A section of the customer's account (the tabs of the account pages)."""
    yield reach(page, "click", "a.nav-link", text=label, why=why)


async def solve_address_book(page, instruction, task):
    """Account > Address Book: Add a new address, or the address's Edit."""
    p = parse_instruction(task, instruction)
    yield customer_login(page, p["email"])
    yield account_page(page, "Address Book", why="to get to the saved addresses")
    if task == "add-address":
        yield reach(page, "click", "a", text="Add a new address", why="to start a new address")
        for field in ("first_name", "last_name", "line1", "line4", "postcode"):
            yield reach(page, "type", f"#id_{field}", value=p[ADDRESS_PARAMS[field]],
                        why="to fill in the new address")
        yield reach(page, "select", "#id_country", value="United Kingdom",
                    why="to set the address's country to United Kingdom")
    else:
        yield reach(page, "click", "a", text="Edit", why=f"to edit the address at {p['line1']}")
        yield reach(page, "type", "#id_postcode", value=p["postcode"],
                    why=f"to correct the postcode to {p['postcode']}")
    yield reach(page, "click", "button[type=submit]", text="Save", why="to save the address")


async def solve_review_write(page, instruction, task):
    """The product page's Write a review: title, the score's stars, the text (and, signed out, the
    reviewer's name and e-mail)."""
    p = parse_instruction(task, instruction)
    if task == "write-review":
        yield customer_login(page, p["email"])
    yield product_page(page, p["title"])
    yield reach(page, "click", "a", text="Write a review", why=f"to start a review of {p['title']}")
    yield reach(page, "type", "#id_title", value=p["review_title"], why="to give the review its title")
    yield reach(page, "click", ".reviewrating .star-rating i", nth=int(p["score"]) - 1,
                why=f"to give the product {p['score']} stars")
    yield reach(page, "type", "#id_body", value=p["body"], why="to write the review's text")
    if task == "write-review-guest":
        yield reach(page, "type", "#id_name", value=p["name"], why=f"to sign the review as {p['name']}")
        yield reach(page, "type", "#id_email", value=p["email"], why="to give the reviewer's e-mail address")
    yield reach(page, "click", "button[type=submit]", text="Save review", why="to submit the review")


async def solve_account_answers(page, instruction, task):
    """Account > Order History: the orders, newest first (the count, the latest total); an order's own page
    says its status."""
    p = parse_instruction(task, instruction)
    yield customer_login(page, p["email"])
    yield account_page(page, "Order History", why="to see your past orders")
    numbers = await column(page, "Order number")
    if not numbers:
        raise ExpertError(f"no orders on {page.url}")
    if task == "my-order-count":
        yield Move("stop", value=str(len(numbers)))
    elif task == "my-last-order-total":
        yield Move("stop", value=await first_in_column(page, "Total inc tax"))
    else:
        if p["number"] not in numbers:
            raise ExpertError(f"order #{p['number']} is not in the order history: {numbers}")
        yield reach(page, "click", "table a", text=p["number"], why=f"to open order #{p['number']}")
        status = await page.evaluate(js_fn("", "const h = [...document.querySelectorAll('h2, h3')]"
                                               ".find(h => norm(h.textContent) === 'Status');"
                                               " return h && h.nextElementSibling ? norm(h.nextElementSibling"
                                               ".textContent) : null;"))
        if not status:
            raise ExpertError(f"no status on {page.url}")
        yield Move("stop", value=status)


async def solve_profile(page, instruction, task):
    """Account > Profile's Edit profile: the last name or the e-mail address, Save."""
    p = parse_instruction(task, instruction)
    yield customer_login(page, p["email"])
    yield reach(page, "click", "a", text="Edit profile", why="to open the profile form")
    if task == "change-last-name":
        yield reach(page, "type", "#id_last_name", value=p["new_last"],
                    why=f"to change the last name to {p['new_last']}")
    else:
        yield reach(page, "type", "#id_email", value=p["new_email"],
                    why=f"to change the e-mail address to {p['new_email']}")
    yield reach(page, "click", "button[type=submit]", text="Save", why="to save the profile")


async def page_arrived(page, limit_s=30):
    """Wait while the page is being left (a followed link, a submitted form: the harness's init script says
    so) and until the next one has loaded. The harness waits two seconds at most; a server that answers
    later (a busy machine) must not have the next move decided on the old page."""
    for _ in range(limit_s * 20):
        try:
            if not await page.evaluate("() => !!(window.__mag && window.__mag.leaving)"):
                break
        except PlaywrightError:   # the old document went away between two looks: the new one is coming
            pass
        await page.wait_for_timeout(50)
    await page.wait_for_load_state("load")


def patient(expert):
    """The expert, deciding each move only once the page it acts on has arrived."""
    async def solve(page, instruction, task):
        moves = flatten(expert(page, instruction, task))
        while True:
            await page_arrived(page)
            move = await anext(moves, None)
            if move is None:
                return
            yield move
    solve.__doc__ = expert.__doc__
    return solve


SOLVERS = {   # template -> its moves(page, instruction, task)
    "order-status": solve_order_status,
    "order-note": solve_order_note,
    "order-facts": solve_order_facts,
    "order-search": solve_order_search,
    "product-stock": solve_product_stock,
    "product-edit": solve_product_edit,
    "product-create": solve_product_create,
    "category": solve_category,
    "voucher": solve_voucher,
    "offer": solve_offer,
    "offer-create": solve_offer_create,
    "review-moderation": solve_review_moderation,
    "customer-lookup": solve_customer_lookup,
    "product-lookup": solve_product_lookup,
    "range": solve_range,
    "browse": solve_browse,
    "basket": solve_basket,
    "basket-voucher": solve_basket_voucher,
    "guest-checkout": solve_guest_checkout,
    "customer-checkout": solve_customer_checkout,
    "address-book": solve_address_book,
    "review-write": solve_review_write,
    "account-answers": solve_account_answers,
    "profile": solve_profile,
}
EXPERTS = {template: patient(solve) for template, solve in SOLVERS.items()}   # as collect.py runs them
