"""Fill a freshly migrated database with one deterministic shop: a catalogue, customers, their orders,
reviews, offers and vouchers.

  MAG_DJANGO_DB=/tmp/shop.sqlite3 python manage.py seed --seed 0

Everything comes from random.Random(seed) and a fixed epoch (settings.SANDBOX_NOW): every timestamp is
set by travelling the frozen clock to it (Oscar stamps products, orders and reviews with auto_now_add),
passwords are hashed with a fixed salt. Orders are placed by Oscar's own OrderCreator from a basket,
as a checkout does, and moved on by its EventHandler, as the dashboard does; so the same seed gives the
same rows, byte for byte. Names come from the word lists below, so no Faker dependency. The files
beside the database (product images, the search index) are `seed_files`'s, made from these rows.
"""
import datetime
import random
from decimal import Decimal

import time_machine
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sites.models import Site
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify
from oscar.core.loading import get_class, get_model

Basket = get_model("basket", "Basket")
Benefit = get_model("offer", "Benefit")
Category = get_model("catalogue", "Category")
Condition = get_model("offer", "Condition")
ConditionalOffer = get_model("offer", "ConditionalOffer")
Country = get_model("address", "Country")
Partner = get_model("partner", "Partner")
Product = get_model("catalogue", "Product")
ProductCategory = get_model("catalogue", "ProductCategory")
ProductClass = get_model("catalogue", "ProductClass")
ProductImage = get_model("catalogue", "ProductImage")
ProductReview = get_model("reviews", "ProductReview")
Range = get_model("offer", "Range")
ShippingAddress = get_model("order", "ShippingAddress")
StockRecord = get_model("partner", "StockRecord")
UserAddress = get_model("address", "UserAddress")
Voucher = get_model("voucher", "Voucher")
EventHandler = get_class("order.processing", "EventHandler")
OrderCreator = get_class("order.utils", "OrderCreator")
OrderTotalCalculator = get_class("checkout.calculators", "OrderTotalCalculator")
Free = get_class("shipping.methods", "Free")
Default = get_class("partner.strategy", "Default")

EPOCH = settings.SANDBOX_NOW
ADMIN_EMAIL, ADMIN_PASSWORD = "admin@harbourpine.test", "admin-pass-2026"
CUSTOMER_PASSWORD = "customer-pass-2026"
N_CUSTOMERS, N_REVIEWS, PER_CATEGORY = 20, 34, 6
N_RECENT, N_OLDER = 12, 36   # orders of the last week (still open, most of them), and of the 60 days before

# top category -> (its product class: one word, as the search's Type facet shows it stemmed, {subcategory:
# product names}); a seed sells PER_CATEGORY of each subcategory's names
CATALOGUE = {
    "Kitchen": ("Kitchen", {
        "Cookware": ["Cast Iron Skillet", "Copper Saucepan", "Enamel Casserole", "Carbon Steel Wok",
                     "Stock Pot", "Griddle Pan", "Milk Pan"],
        "Tableware": ["Stoneware Dinner Plate", "Porcelain Mug", "Linen Napkin Set", "Glass Tumbler Set",
                      "Serving Bowl", "Salad Servers", "Espresso Cup Pair"]}),
    "Garden": ("Garden", {
        "Tools": ["Hand Trowel", "Pruning Shears", "Border Fork", "Watering Can", "Garden Kneeler",
                  "Bulb Planter", "Weeding Knife"],
        "Planters": ["Terracotta Pot", "Window Box", "Hanging Basket", "Raised Bed Kit", "Herb Planter",
                     "Glazed Urn", "Seed Tray Set"]}),
    "Outdoor": ("Outdoor", {
        "Camping": ["Camping Lantern", "Enamel Camp Mug", "Folding Stool", "Wool Blanket", "Fire Steel",
                    "Camp Kettle", "Dry Bag"],
        "Picnic": ["Picnic Hamper", "Cool Bag", "Picnic Rug", "Bamboo Cutlery Set", "Insulated Flask",
                   "Melamine Plate Set", "Folding Table"]}),
    "Home": ("Home", {
        "Lighting": ["Table Lamp", "Pendant Shade", "Brass Candle Holder", "Floor Lamp", "String Lights",
                     "Reading Light", "Storm Lantern"],
        "Textiles": ["Wool Throw", "Cushion Cover", "Cotton Bath Towel", "Linen Duvet Cover", "Jute Doormat",
                     "Knitted Pouffe", "Table Runner"]}),
}
PRICES = {"Kitchen": (8, 90), "Garden": (5, 70), "Outdoor": (6, 120), "Home": (12, 150)}   # pounds
STYLES = ["Coastal", "Nordic", "Heritage", "Harbour", "Alpine", "Meadow", "Rustic", "Studio"]
FIRST = ["Ada", "Ben", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira",
         "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera"]
LAST = ["Adams", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt", "Tanaka", "Weber"]
TOWNS = [("London", "SE1 7PB"), ("Bristol", "BS1 4DJ"), ("Leeds", "LS1 4AP"), ("York", "YO1 7HH"),
         ("Bath", "BA1 1LZ"), ("Cardiff", "CF10 1EP"), ("Edinburgh", "EH1 1YZ"), ("Brighton", "BN1 1EE"),
         ("Norwich", "NR2 1NH"), ("Exeter", "EX1 1HB")]
STREETS = ["High Street", "Mill Lane", "Church Road", "Station Road", "Park Avenue", "Harbour Walk",
           "Queen Street", "Orchard Close"]
COUNTRIES = [("GB", "United Kingdom", "United Kingdom of Great Britain and Northern Ireland"),
             ("IE", "Ireland", "Ireland"), ("FR", "France", "French Republic"),
             ("DE", "Germany", "Federal Republic of Germany"),
             ("NL", "Netherlands", "Kingdom of the Netherlands")]
ORDER_NOTES = ["Customer asked for gift wrapping.", "Leave the parcel with the neighbour at number 12.",
               "Called the customer to confirm the address.", "Dispatch together with the back-ordered item."]
REVIEWS = {   # score -> (title, body)
    5: ("Exactly what I wanted", "Well made and arrived quickly. I would buy it again."),
    4: ("Very good", "Good quality for the price; the colour is a little darker than the photo."),
    3: ("Does the job", "Fine for everyday use, nothing special."),
    2: ("Not great", "Smaller than I expected and the finish is rough in places."),
    1: ("Disappointed", "It broke within a week. I have asked for a refund."),
}
# (name, top category of its range or None for everything, benefit type, value, items needed, status)
SITE_OFFERS = [
    ("Spring garden sale", "Garden", Benefit.PERCENTAGE, 15, 1, ConditionalOffer.OPEN),
    ("Picnic season", "Outdoor", Benefit.FIXED, 5, 2, ConditionalOffer.OPEN),
    ("Kitchen bundle", "Kitchen", Benefit.PERCENTAGE, 10, 3, ConditionalOffer.OPEN),
    ("Winter warmers", "Home", Benefit.PERCENTAGE, 20, 1, ConditionalOffer.SUSPENDED),
    ("Cosy evenings", "Home", Benefit.FIXED, 8, 2, ConditionalOffer.SUSPENDED),
]
VOUCHER_WORDS = ["WELCOME", "THANKYOU", "HARBOUR", "PINE", "SUMMER", "FRIENDS", "NEWS", "LOYAL"]


def at(moment):
    """Travel the frozen clock to `moment` while the rows made in the block are saved."""
    return time_machine.travel(moment, tick=False)


def make_catalogue(rng):
    """Categories (two levels), one product class per top category, the products with their stock
    records (one partner) and image rows (seed_files draws the images); returns the products."""
    partner = Partner.objects.create(name="Harbour & Pine Warehouse", code="warehouse")
    products, sku = [], 0
    for top, (class_name, subs) in CATALOGUE.items():
        product_class = ProductClass.objects.create(name=class_name, slug=slugify(class_name))
        root = Category.add_root(name=top, slug=slugify(top), description=f"{top} goods, chosen with care.")
        low, high = PRICES[top]
        for sub, names in subs.items():
            category = root.add_child(name=sub, slug=slugify(sub), description=f"Our {sub.lower()}.")
            for name in rng.sample(names, PER_CATEGORY):
                sku += 1
                title = f"{rng.choice(STYLES)} {name}"
                product = Product.objects.create(
                    title=title, slug=slugify(title), product_class=product_class,
                    upc=str(rng.randrange(10 ** 11, 10 ** 12)),
                    description=f"<p>The {title.lower()}: {sub.lower()} from our {top.lower()} range, "
                                f"made to last.</p>")
                ProductCategory.objects.create(product=product, category=category)
                StockRecord.objects.create(
                    product=product, partner=partner, partner_sku=f"HP-{sku:04d}", price_currency="GBP",
                    price=Decimal(f"{rng.randrange(low, high)}.{rng.choice(['00', '50', '99'])}"),
                    num_in_stock=rng.choice([0, 2, 3] + list(range(6, 80))), low_stock_threshold=5)
                ProductImage.objects.create(product=product, original=f"images/products/{product.slug}.png",
                                            caption=title, display_order=0)
                products.append(product)
    return products


def make_customers(rng):
    """Customers with a default address each (distinct names: a name finds one customer)."""
    Site.objects.filter(id=settings.SITE_ID).update(domain="harbourpine.test", name="Harbour & Pine")
    for k, (code, name, official) in enumerate(COUNTRIES):
        Country.objects.create(iso_3166_1_a2=code, iso_3166_1_a3=code + "X", iso_3166_1_numeric=str(k),
                               printable_name=name, name=official, display_order=len(COUNTRIES) - k,
                               is_shipping_country=True)
    User.objects.create_superuser("admin", ADMIN_EMAIL, ADMIN_PASSWORD, first_name="Alex",
                                  last_name="Morgan")
    names = rng.sample([(f, s) for f in FIRST for s in LAST], N_CUSTOMERS)
    uk = Country.objects.get(iso_3166_1_a2="GB")
    customers = []
    for first, last in names:
        user = User.objects.create_user(f"{first}{last}".lower(), f"{first}.{last}@example.test".lower(),
                                        CUSTOMER_PASSWORD, first_name=first, last_name=last)
        town, postcode = rng.choice(TOWNS)
        UserAddress.objects.create(user=user, first_name=first, last_name=last, country=uk,
                                   line1=f"{rng.randrange(1, 120)} {rng.choice(STREETS)}", line4=town,
                                   postcode=postcode, is_default_for_shipping=True,
                                   is_default_for_billing=True)
        customers.append(user)
    return customers


def place_order(rng, products, user, guest):
    """One order placed by Oscar's OrderCreator from a basket of 1-3 products in stock, shipped free to
    the customer's address (a guest's own), numbered from its basket as Oscar numbers them."""
    basket = Basket.objects.create(owner=user)
    basket.strategy = Default()
    in_stock = [p for p in products if p.stockrecords.get().net_stock_level > 4]
    for product in rng.sample(in_stock, rng.choice([1, 1, 2, 3])):
        basket.add_product(product, quantity=rng.choice([1, 1, 1, 2, 3]))
    who = user.addresses.get() if user else None
    first, last = (user.first_name, user.last_name) if user else guest
    town, postcode = rng.choice(TOWNS)
    address = ShippingAddress.objects.create(
        first_name=first, last_name=last, country=Country.objects.get(iso_3166_1_a2="GB"),
        line1=who.line1 if who else f"{rng.randrange(1, 120)} {rng.choice(STREETS)}",
        line4=who.line4 if who else town, postcode=who.postcode if who else postcode)
    shipping = Free()
    charge = shipping.calculate(basket)
    order = OrderCreator().place_order(
        basket=basket, user=user, shipping_address=address, shipping_method=shipping, shipping_charge=charge,
        total=OrderTotalCalculator().calculate(basket, charge), order_number=None,
        guest_email="" if user else f"{first}.{last}@example.test".lower())
    basket.submit()
    return order


def final_status(rng, age):
    """An order's status today from its age in days: the last week's are mostly still open."""
    if age < 2:
        return rng.choice(["Pending", "Pending", "Pending", "Being processed"])
    if age < 7:
        return rng.choices(["Pending", "Being processed", "Cancelled"], weights=[4, 5, 1])[0]
    return rng.choices(["Being processed", "Shipped", "Complete", "Cancelled"], weights=[1, 3, 6, 1])[0]


PATHS = {   # the statuses an order passes through to reach its final one
    "Pending": [], "Being processed": ["Being processed"], "Shipped": ["Being processed", "Shipped"],
    "Complete": ["Being processed", "Shipped", "Complete"], "Cancelled": ["Cancelled"],
}


def make_orders(rng, products, customers, staff):
    """Orders of the last two months, some by guests; each moved on through the status pipeline by
    staff, with the note the dashboard writes for each change, and sometimes a staff note."""
    week = 7 * 24 * 60   # minutes
    ages = [rng.randrange(60, week) for _ in range(N_RECENT)]
    ages += [rng.randrange(week, 9 * week) for _ in range(N_OLDER)]
    placed = sorted(EPOCH - datetime.timedelta(minutes=age) for age in ages)
    handler = EventHandler(user=staff)
    for moment in placed:
        user = rng.choice(customers) if rng.random() < 0.8 else None
        with at(moment):
            order = place_order(rng, products, user, (rng.choice(FIRST), rng.choice(LAST)))
        changed = moment
        for status in PATHS[final_status(rng, (EPOCH - moment).days)]:
            changed = min(changed + datetime.timedelta(minutes=rng.randrange(60, 30 * 60)), EPOCH)
            with at(changed):   # the dashboard's own words for the change
                note = f"Order status changed from '{order.status}' to '{status}'"
                handler.handle_order_status_change(order, status, note_msg=note)
        if rng.random() < 0.25:
            with at(min(moment + datetime.timedelta(hours=rng.randrange(1, 48)), EPOCH)):
                handler.create_note(order, rng.choice(ORDER_NOTES), note_type="Info")


def make_reviews(rng, products, customers):
    """Reviews by customers at seeded moments: most approved, some awaiting moderation, a few rejected."""
    pairs = rng.sample([(p, c) for p in products for c in customers], N_REVIEWS)
    for product, user in pairs:
        score = rng.choices([5, 4, 3, 2, 1], weights=[5, 5, 3, 2, 1])[0]
        status = rng.choices([ProductReview.APPROVED, ProductReview.FOR_MODERATION, ProductReview.REJECTED],
                             weights=[7, 3, 1])[0]
        title, body = REVIEWS[score]
        with at(EPOCH - datetime.timedelta(minutes=rng.randrange(60, 30 * 24 * 60))):
            ProductReview.objects.create(product=product, user=user, score=score, title=title, body=body,
                                         status=status)


def make_offers(rng):
    """A range per top category and one for everything; site offers (some suspended) and vouchers, each
    voucher with the offer the dashboard would give it."""
    ranges = {None: Range.objects.create(name="Everything", includes_all_products=True)}
    for top in CATALOGUE:
        ranges[top] = Range.objects.create(name=f"{top} range")
        ranges[top].included_categories.add(Category.objects.get(depth=1, name=top))
    start, end = EPOCH - datetime.timedelta(days=30), EPOCH + datetime.timedelta(days=60)
    for k, (name, top, kind, value, items, status) in enumerate(SITE_OFFERS):
        condition = Condition.objects.create(range=ranges[top], type=Condition.COUNT, value=items)
        benefit = Benefit.objects.create(range=ranges[top], type=kind, value=value)
        ConditionalOffer.objects.create(name=name, offer_type=ConditionalOffer.SITE, status=status,
                                        condition=condition, benefit=benefit, priority=k,
                                        start_datetime=start, end_datetime=end)
    # one voucher for everything (so that every product has one), three for ranges of goods
    discounts = [(None, rng.choice([5, 10, 15]))]
    discounts += rng.sample([(top, value) for top in CATALOGUE for value in (5, 10, 15)], 3)
    for word, (top, value) in zip(rng.sample(VOUCHER_WORDS, 4), discounts):
        condition = Condition.objects.create(range=ranges[top], type=Condition.COUNT, value=1)
        benefit = Benefit.objects.create(range=ranges[top], type=Benefit.PERCENTAGE, value=value)
        what = f"the {top.lower()} range" if top else "everything"
        offer = ConditionalOffer.objects.create(name=f"{value}% off {what}", condition=condition,
                                                offer_type=ConditionalOffer.VOUCHER, benefit=benefit,
                                                start_datetime=start, end_datetime=end)
        voucher = Voucher.objects.create(name=f"{word.title()} {value}", code=f"{word}{value}",
                                         usage=Voucher.MULTI_USE, start_datetime=start, end_datetime=end)
        voucher.offers.add(offer)
    picks = Range.objects.create(name="Staff picks", description="Our team's favourites this season.")
    for product in rng.sample(list(Product.objects.order_by("id")), 6):
        picks.add_product(product)


class Command(BaseCommand):
    help = "Seed a migrated database with a deterministic shop."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=0)

    @transaction.atomic
    def handle(self, *args, seed, **options):
        if User.objects.exists():
            raise CommandError("the database is already seeded (seed a freshly migrated file)")
        # Oscar keeps its search index in step with every save; here the index does not exist yet:
        # seed_files builds it from the finished rows
        apps.get_app_config("haystack").signal_processor.teardown()
        rng = random.Random(seed)
        with at(EPOCH - datetime.timedelta(days=400)):
            products = make_catalogue(rng)
            customers = make_customers(rng)
            make_offers(rng)
        staff = User.objects.get(email=ADMIN_EMAIL)
        make_orders(rng, products, customers, staff)
        make_reviews(rng, products, customers)
        self.stdout.write(f"seeded: {len(products)} products, {len(customers)} customers, "
                          f"{N_RECENT + N_OLDER} orders, {N_REVIEWS} reviews")
