"""Fill a freshly migrated database with one deterministic small business.

  MAG_DJANGO_DB=/tmp/bo.sqlite3 python manage.py seed --seed 0

Everything comes from random.Random(seed) and a fixed epoch -- never now(), never a random salt --
so the same seed gives the same rows, ids and password hashes, byte for byte (`manage.py dump`
shows it). Names come from the small word lists below, so no Faker dependency.
"""
import datetime
import random
import string
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, Permission, User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from shop.models import Customer, Order, OrderLine, Product, Ticket

EPOCH = settings.SANDBOX_NOW   # "today" in the data, where the sandbox's clock stands still
ADMIN_PASSWORD = "admin-pass-2026"
STAFF_PASSWORD = "staff-pass-2026"
N_STAFF, N_CUSTOMERS, N_PRODUCTS, N_ORDERS, N_TICKETS = 5, 30, 20, 40, 25
N_UNSOLD = 3   # products no order uses (inactive, old stock): the only ones the admin can delete

FIRST = ["Ada", "Ben", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira",
         "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera"]
LAST = ["Adams", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt", "Tanaka", "Weber"]
COMPANIES = ["Northwind Traders", "Blue Harbor Ltd", "Cedar & Finch", "Orbit Logistics", "Greenleaf Foods",
             "Summit Dental", "Pixel Forge", "Riverside Clinic", "Atlas Builders", "Lumen Labs", ""]
CITIES = ["Berlin", "Lyon", "Porto", "Oslo", "Krakow", "Austin", "Leeds", "Milan", "Osaka", "Toronto"]
PRODUCTS = {   # category -> (SKU prefix, base names, price range in whole currency units)
    "hardware": ("HW", ["Laptop Stand", "USB-C Dock", "Monitor 27in", "Keyboard", "Mouse", "Webcam"], (20, 600)),
    "software": ("SW", ["Antivirus Licence", "Office Suite", "Backup Plan", "VPN Seat"], (30, 300)),
    "accessories": ("AC", ["Laptop Sleeve", "HDMI Cable", "Headset", "Desk Lamp", "Phone Holder"], (8, 90)),
    "supplies": ("SU", ["Printer Paper", "Toner Cartridge", "Sticky Notes", "Binder Pack"], (3, 70)),
    "services": ("SV", ["On-site Setup", "Extended Warranty", "Data Migration"], (50, 400)),
}
MODELS = ["Pro", "Lite", "Plus", "Max", "Mini", "Basic", "Prime"]
NOTES = ["", "", "", "Deliver to the back entrance.", "Customer asked for an invoice copy.",
         "Gift wrap, please.", "Call before delivery."]
TICKET_SUBJECTS = ["Invoice shows the wrong address", "Order arrived damaged", "Cannot activate licence",
                   "Request for a refund", "Delivery is late", "Wrong item received", "Need a quote for 50 units",
                   "Password reset for the portal", "Warranty claim", "Change of billing contact"]
GROUP_PERMS = {   # group -> (model, actions): what each team may do in the back office
    "Sales": [("customer", "view add change"), ("order", "view add change"), ("orderline", "view add change delete"),
              ("product", "view")],
    "Support": [("customer", "view change"), ("ticket", "view add change"), ("order", "view")],
    "Warehouse": [("product", "view add change"), ("order", "view change"), ("orderline", "view")],
}


def moment(rng, max_days):
    """A fixed-epoch timestamp up to max_days before EPOCH, to the minute."""
    return EPOCH - datetime.timedelta(minutes=rng.randrange(max_days * 24 * 60))


def password(rng, raw):
    # A salt from the seeded rng (22 alphanumerics ~ 128 bits, what Django expects, so no
    # rehash on login) instead of a random one: same seed -> same hash.
    salt = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(22))
    return make_password(raw, salt=salt)


def add_users(rng):
    User.objects.create(username="admin", first_name="Alex", last_name="Admin", email="admin@acme.test",
                        is_staff=True, is_superuser=True, password=password(rng, ADMIN_PASSWORD),
                        date_joined=EPOCH - datetime.timedelta(days=400))
    groups = {}
    for name, grants in GROUP_PERMS.items():
        groups[name] = Group.objects.create(name=name)
        for model, actions in grants:
            codenames = [f"{a}_{model}" for a in actions.split()]
            groups[name].permissions.add(*Permission.objects.filter(content_type__app_label="shop",
                                                                     codename__in=codenames).order_by("id"))
    staff = []
    for first, last in rng.sample([(f, l) for f in FIRST for l in LAST], N_STAFF):
        user = User.objects.create(username=f"{first}.{last}".lower(), first_name=first, last_name=last,
                                   email=f"{first}.{last}@acme.test".lower(), is_staff=True,
                                   password=password(rng, STAFF_PASSWORD), date_joined=moment(rng, 365))
        user.groups.add(groups[list(groups)[len(staff) % len(groups)]])   # every team has someone
        staff.append(user)
    return staff


def add_customers(rng):
    customers = []
    for first, last in rng.sample([(f, l) for f in FIRST for l in LAST], N_CUSTOMERS):
        company = rng.choice(COMPANIES)
        domain = company.split()[0].lower().strip("&") + ".example" if company else "mail.example"
        customers.append(Customer.objects.create(
            name=f"{first} {last}", email=f"{first}.{last}@{domain}".lower(), company=company,
            phone=f"+{rng.randint(1, 49)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
            city=rng.choice(CITIES), created=moment(rng, 700).date(), is_vip=rng.random() < 0.2))
    return customers


def add_products(rng):
    names = [(cat, base) for cat, (_, bases, _) in PRODUCTS.items() for base in bases]
    products = []
    for i, (cat, base) in enumerate(sorted(rng.sample(names, N_PRODUCTS))):
        prefix, _, (lo, hi) = PRODUCTS[cat]
        products.append(Product.objects.create(
            sku=f"{prefix}-{1000 + 37 * i + rng.randrange(37)}", name=f"{base} {rng.choice(MODELS)}",
            category=cat, price=Decimal(rng.randint(lo * 100, hi * 100)) / 100,
            stock=0 if rng.random() < 0.15 else rng.randint(1, 200)))
    for p in rng.sample(products, N_UNSOLD):   # discontinued: inactive and never sold
        p.active = False
        p.save()
    return [p for p in products if p.active]


def add_orders(rng, customers, products):
    # A few regulars place most orders, so some customers have several unpaid ones.
    weights = [6 if i < 5 else 1 for i in range(len(customers))]
    for _ in range(N_ORDERS):
        status = rng.choices(["new", "paid", "shipped", "cancelled"], [4, 3, 3, 1])[0]
        order = Order.objects.create(
            customer=rng.choices(customers, weights)[0], created=moment(rng, 120), status=status,
            paid=status in ("paid", "shipped") or (status == "cancelled" and rng.random() < 0.3),
            note=rng.choice(NOTES))
        for product in rng.sample(products, rng.randint(1, 4)):
            OrderLine.objects.create(order=order, product=product, quantity=rng.randint(1, 5),
                                     unit_price=product.price)


def add_tickets(rng, customers, staff):
    for _ in range(N_TICKETS):
        created = moment(rng, 60)
        closed = rng.random() < 0.4
        Ticket.objects.create(
            subject=rng.choice(TICKET_SUBJECTS), customer=rng.choice(customers),
            assigned_to=rng.choice(staff + [None]), status="closed" if closed else "open",
            priority=rng.choices(["low", "normal", "high"], [2, 5, 2])[0], created=created,
            closed_at=created + datetime.timedelta(hours=rng.randint(1, 96)) if closed else None)


class Command(BaseCommand):
    help = "Seed a freshly migrated back-office database deterministically."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=0)

    @transaction.atomic   # one transaction: all or nothing, and far faster on SQLite
    def handle(self, *args, seed, **options):
        if User.objects.exists() or Customer.objects.exists():
            raise CommandError("database is not empty: seed a freshly migrated file")
        rng = random.Random(seed)
        staff = add_users(rng)
        customers = add_customers(rng)
        add_orders(rng, customers, add_products(rng))
        add_tickets(rng, customers, staff)
        self.stdout.write(f"seeded {seed}: {User.objects.count()} users, {Customer.objects.count()} customers, "
                          f"{Product.objects.count()} products, {Order.objects.count()} orders, "
                          f"{Ticket.objects.count()} tickets")
