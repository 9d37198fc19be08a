"""Fill a freshly migrated database with one deterministic council website.

  MAG_DJANGO_DB=/tmp/cms.sqlite3 python manage.py seed --seed 0

The tree: a home page; News with dated articles by authors (snippets), filed under categories and
tagged; Events; two sections of standard pages. Articles go through the states an editorial team
leaves them in -- published, published with a newer draft, never published, waiting in the
"Moderators approval" workflow (Wagtail's default, made by its migrations) -- with revisions by several
editors at seeded moments; a few pages are locked, one is private. Editors and moderators are in the
groups Wagtail's migrations made; redirects and image collections complete the admin.

Everything comes from random.Random(seed) and a fixed epoch (settings.SANDBOX_NOW): every timestamp is
set by travelling the frozen clock to it (revisions and log entries take the time when they are saved),
uuids come from the seed (town/sandbox.py), passwords are hashed with a fixed salt. So the same seed
gives the same rows, byte for byte. Names come from the word lists below, so no Faker dependency.
"""
import datetime
import random

import time_machine
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify
from wagtail.contrib.redirects.models import Redirect
from wagtail.log_actions import log
from wagtail.models import Collection, Page, PageViewRestriction, Site, Workflow

from town.models import (
    Author,
    Category,
    EventIndexPage,
    EventPage,
    HomePage,
    NewsIndexPage,
    NewsPage,
    StandardPage,
)
from town.sandbox import seed_uuids

EPOCH = settings.SANDBOX_NOW
ADMIN_PASSWORD = "admin-pass-2026"
EDITOR_PASSWORD = "editor-pass-2026"
N_EDITORS, N_MODERATORS, N_AUTHORS, N_ARTICLES, N_EVENTS, N_EVENT_DRAFTS = 4, 2, 6, 18, 10, 2
# how many articles are left in each state (the rest are simply published)
N_CHANGED, N_DRAFTS, N_MODERATED = 4, 4, 3

FIRST = ["Ada", "Ben", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira",
         "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera"]
LAST = ["Adams", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt", "Tanaka", "Weber"]
ROLES = ["Press officer", "Transport reporter", "Parks officer", "Housing lead", "Culture editor",
         "Community liaison", "Planning officer", "Digital editor"]
CATEGORIES = ["Transport", "Environment", "Housing", "Culture", "Council", "Health"]
TAGS = ["cycling", "roads", "parks", "budget", "library", "events", "recycling", "schools", "planning",
        "volunteering", "heritage", "consultation"]
NEWS = [   # title -> its category: one article each at most, so a title names one article
    ("Cycle lanes planned for Mill Road", "Transport"), ("New library opening hours", "Culture"),
    ("Spring clean of the riverside", "Environment"), ("Council tax bills for 2026", "Council"),
    ("Bus station refurbishment begins", "Transport"), ("Street lights switch to LED", "Environment"),
    ("Car-free Sundays in Market Square", "Transport"), ("Tree planting in Elm Park", "Environment"),
    ("Consultation on the local plan", "Housing"), ("Flood defences on the Wey", "Environment"),
    ("Recycling centre moves to Station Road", "Environment"), ("Summer festival line-up", "Culture"),
    ("Youth club gets a new home", "Health"), ("Pothole repairs on the ring road", "Transport"),
    ("Winter gritting routes published", "Transport"), ("New mayor sworn in", "Council"),
    ("Swimming pool reopens", "Health"), ("Allotment waiting list opens", "Environment"),
    ("Air quality report published", "Health"), ("Community grants awarded", "Council"),
    ("Town hall clock restored", "Culture"), ("Electric car chargers installed", "Transport"),
    ("Affordable homes on Quarry Lane", "Housing"), ("Road closures for the half marathon", "Transport"),
    ("Heritage trail signs unveiled", "Culture"), ("Food bank appeal", "Health"),
    ("Decision on the old brewery site", "Housing"), ("School crossing patrol recruits", "Council"),
]
INTROS = ["What {t} means for residents.", "{T}: the details and the dates.",
          "Everything you need to know about {t}.", "The council explains {t}.",
          "{T}, and how to have your say.", "A short guide to {t}."]
SENTENCES = ["The work is funded by the council's capital programme.",
             "Residents can comment until the end of the month.",
             "Ward councillors will hold a drop-in session at the Town Hall.",
             "Details are on the noticeboard in Market Square.",
             "The project follows last year's public consultation.",
             "Questions can be sent to the council's contact centre.",
             "A progress report will go to the next full council meeting."]
EVENTS = ["Full council meeting", "Planning committee", "Farmers' market", "Riverside clean-up",
          "Library story time", "Heritage walk", "Open-air cinema", "Repair café",
          "Budget consultation evening", "Bike maintenance workshop", "Museum late opening",
          "Charity fun run", "Careers fair", "Christmas lights switch-on"]
LOCATIONS = ["Town Hall, Council Chamber", "Market Square", "Elm Park", "Central Library", "Riverside Walk",
             "Community Centre", "Station Road Depot", "Quarry Lane Hall"]
SECTIONS = {   # standard pages: a section (in the menu) and its pages
    "About the council": ["Councillors", "Meetings and minutes", "Budget and spending",
                          "Jobs at the council"],
    "Services": ["Bins and recycling", "Parking permits", "Council tax", "Libraries",
                 "Planning applications"],
    "Contact us": [],
}
PASSWORDS = ["riverside-42", "townhall-17", "market-2026", "elmpark-88"]   # of the password-protected page
COLLECTIONS = ["Press photos", "Reports", "Maps", "Logos", "Event posters"]
REDIRECTS = [("/recycling", "Bins and recycling"), ("/tax", "Council tax"), ("/parking", "Parking permits"),
             ("/whats-on", "Events"), ("/press", "News")]


def at(moment):
    """Travel the frozen clock to `moment` while the rows made in the block are saved."""
    return time_machine.travel(moment, tick=False)


def days_before(rng, lo, hi):
    """A seeded moment between hi and lo days before EPOCH, on a working hour."""
    return EPOCH - datetime.timedelta(days=rng.randrange(lo, hi), hours=rng.randrange(0, 8),
                                      minutes=rng.randrange(0, 60))


def body(rng, n=2):
    return "".join(f"<p>{s}</p>" for s in rng.sample(SENTENCES, n))


def intro(rng, title):
    return rng.choice(INTROS).format(t=title[0].lower() + title[1:], T=title)


def make_people(rng):
    """The admin; editors and moderators, in the groups Wagtail's migrations made; the authors (snippets).
    First names are distinct, so a user's username is their first name."""
    admin = User.objects.create_superuser("admin", "admin@riverton.test", ADMIN_PASSWORD,
                                          first_name="Alex", last_name="Morgan")
    n_users = N_EDITORS + N_MODERATORS
    names = list(zip(rng.sample(FIRST, n_users + N_AUTHORS), rng.choices(LAST, k=n_users + N_AUTHORS)))
    groups = {name: Group.objects.get(name=name) for name in ("Editors", "Moderators")}
    users = []
    for k, (first, last) in enumerate(names[:n_users]):
        user = User.objects.create_user(first.lower(), f"{first.lower()}@riverton.test", EDITOR_PASSWORD,
                                        first_name=first, last_name=last)
        user.groups.add(groups["Editors" if k < N_EDITORS else "Moderators"])
        users.append(user)
    roles = rng.sample(ROLES, N_AUTHORS)
    authors = [Author.objects.create(name=f"{first} {last}", role=role,
                                     email=f"{first.lower()}.{last.lower()}@riverton.test")
               for (first, last), role in zip(names[n_users:], roles)]
    return admin, users[:N_EDITORS], users[N_EDITORS:], authors


def create(parent, page, user, publisher=None):
    """A page as the admin's create view makes it: saved under `parent` (logged "created" by its owner),
    its first revision ("draft saved"), then published by `publisher` (editors may not publish) or left a
    draft -- all at the clock's current moment."""
    page.owner, page.live = user, False
    parent.add_child(instance=page)
    revision = page.save_revision(user=user, log_action=True)
    if publisher is not None:
        revision.publish(user=publisher)
    return page


def edit(page, user, publisher, **fields):
    """A later revision with changed fields, published by `publisher` or left as a draft."""
    page = page.specific_class.objects.get(pk=page.pk)   # the live row, as the editor loads it
    if page.has_unpublished_changes:
        page = page.get_latest_revision_as_object()
    for name, value in fields.items():
        setattr(page, name, value)
    revision = page.save_revision(user=user, log_action=True)
    if publisher is not None:
        revision.publish(user=publisher)
    return revision


def make_tree(rng, admin, editors, publishers):
    """The home page (in place of Wagtail's welcome page), its sections, the standard pages."""
    root = Page.objects.get(depth=1)
    with at(EPOCH - datetime.timedelta(days=420)):
        Page.objects.filter(depth=2).delete()   # "Welcome to your new Wagtail site!", and its Site
        root.refresh_from_db()
        home = create(root, HomePage(title="Welcome to Riverton", slug="home",
                                     intro="News, events and services from Riverton Council.",
                                     body="<p>Find out what is happening in town.</p>"), admin, admin)
        Site.objects.create(hostname="localhost", port=80, root_page=home, is_default_site=True,
                            site_name="Riverton Council")   # the default site answers at any address
        news = create(home, NewsIndexPage(title="News", slug="news", show_in_menus=True,
                                          intro="The latest news from the council."), admin, admin)
        events = create(home, EventIndexPage(title="Events", slug="events", show_in_menus=True,
                                             intro="What's on in Riverton."), admin, admin)
    standard = []
    for section, titles in SECTIONS.items():
        with at(days_before(rng, 300, 400)):
            top = create(home, StandardPage(title=section, slug=slugify(section), show_in_menus=True,
                                            intro=f"{section} at Riverton Council.", body=body(rng)),
                         rng.choice(editors), rng.choice(publishers))
        for title in titles:
            with at(days_before(rng, 100, 300)):
                standard.append(create(top, StandardPage(title=title, slug=slugify(title),
                                                         intro=intro(rng, title), body=body(rng)),
                                       rng.choice(editors), rng.choice(publishers)))
    for k, page in enumerate(rng.sample(standard, 3)):   # later edits, the first one left a draft
        with at(days_before(rng, 5, 90)):
            publisher = rng.choice(publishers) if k else None
            edit(page, rng.choice(editors), publisher, intro=intro(rng, page.title))
    return news, events, standard


def make_articles(rng, news, editors, publishers, authors):
    """Articles with their histories: created by one editor, maybe revised by others, and left published,
    published with a newer draft, a draft, or submitted to the moderators."""
    categories = {name: Category.objects.create(name=name, slug=slugify(name)) for name in CATEGORIES}
    states = (["changed"] * N_CHANGED + ["draft"] * N_DRAFTS + ["moderated"] * N_MODERATED
              + ["live"] * (N_ARTICLES - N_CHANGED - N_DRAFTS - N_MODERATED))
    rng.shuffle(states)
    picked = rng.sample(NEWS, N_ARTICLES)
    moments = sorted((days_before(rng, 10, 300) for _ in picked), reverse=True)   # newest first
    articles = []
    for (title, category), state, created in zip(picked, states, moments):
        author, writer = rng.choice(authors), rng.choice(editors)
        page = NewsPage(title=title, slug=slugify(title), date=created.date(), author=author,
                        intro=intro(rng, title), body=body(rng, 3))
        page.categories = [categories[category]] + rng.sample(list(categories.values()), rng.randrange(0, 2))
        page.tags.add(*rng.sample(TAGS, rng.randrange(0, 4)))
        moment = created
        with at(moment):
            create(news, page, writer, None if state == "draft" else rng.choice(publishers))
        for _ in range(rng.randrange(1, 3)):   # later revisions by other editors: a new intro each
            moment += datetime.timedelta(days=rng.randrange(1, 9), hours=rng.randrange(1, 6))
            with at(min(moment, EPOCH - datetime.timedelta(hours=2))):
                publisher = rng.choice(publishers) if state in ("live", "moderated") else None
                edit(page, rng.choice(editors), publisher, intro=intro(rng, title))
        if state == "changed":   # a newer draft on top of the published article
            with at(min(moment + datetime.timedelta(days=2), EPOCH - datetime.timedelta(hours=1))):
                edit(page, rng.choice(editors), None, intro=f"Update: {intro(rng, title)}")
        if state == "moderated":   # changes submitted for review
            submitter = rng.choice(editors)
            with at(min(moment + datetime.timedelta(days=1), EPOCH - datetime.timedelta(hours=1))):
                page = NewsPage.objects.get(pk=page.pk)
                edit(page, submitter, None, body=body(rng, 3))
                Workflow.objects.get(name="Moderators approval").start(page, submitter)
        articles.append(NewsPage.objects.get(pk=page.pk))
    return articles


def make_events(rng, events, editors, publishers):
    """Events around today, the first N_EVENT_DRAFTS of them not published yet."""
    for k, title in enumerate(rng.sample(EVENTS, N_EVENTS)):
        with at(days_before(rng, 5, 120)):
            start = (EPOCH + datetime.timedelta(days=rng.randrange(-30, 150))).date()
            create(events, EventPage(title=title, slug=slugify(title), start_date=start,
                                     location=rng.choice(LOCATIONS), intro=intro(rng, title), body=body(rng)),
                   rng.choice(editors), None if k < N_EVENT_DRAFTS else rng.choice(publishers))


def lock(page, user, moment):
    with at(moment):
        page.locked, page.locked_by, page.locked_at = True, user, moment
        page.save(update_fields=["locked", "locked_by", "locked_at"])
        log(instance=page, action="wagtail.lock", user=user)


def make_admin_extras(rng, editors, standard, articles):
    """Locks, private pages (for logged-in users, or behind a shared password), redirects, collections."""
    live = [a for a in articles if a.live and not a.has_unpublished_changes]
    for page in rng.sample(live, 2) + rng.sample(standard, 1):
        lock(page, rng.choice(editors), days_before(rng, 1, 20))
    private = rng.sample([p for p in standard if not p.locked], 4)
    with at(days_before(rng, 30, 60)):
        for page in private[:2]:
            PageViewRestriction.objects.create(page=page, restriction_type=PageViewRestriction.LOGIN)
        for page, password in zip(private[2:], rng.sample(PASSWORDS, 2)):
            PageViewRestriction.objects.create(page=page, restriction_type=PageViewRestriction.PASSWORD,
                                               password=password)
    pages = {p.title: p for p in Page.objects.all()}
    for old_path, title in REDIRECTS:
        Redirect.objects.create(old_path=old_path, site=None, redirect_page=pages[title],
                                is_permanent=rng.random() < 0.6)
    root = Collection.get_first_root_node()
    for name in rng.sample(COLLECTIONS, 4):
        root.add_child(instance=Collection(name=name))


class Command(BaseCommand):
    help = "Seed a migrated database with a deterministic council website."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=0)

    @transaction.atomic
    def handle(self, *args, seed, **options):
        if User.objects.exists():
            raise CommandError("the database is already seeded (seed a freshly migrated file)")
        rng = random.Random(seed)
        seed_uuids(f"seed {seed}")
        with at(EPOCH - datetime.timedelta(days=430)):
            admin, editors, moderators, authors = make_people(rng)
        publishers = moderators + [admin]   # Wagtail's Editors group may not publish
        news, events, standard = make_tree(rng, admin, editors, publishers)
        articles = make_articles(rng, news, editors, publishers, authors)
        make_events(rng, events, editors, publishers)
        make_admin_extras(rng, editors, standard, articles)
        self.stdout.write(f"seeded: {User.objects.count()} users, {Page.objects.count()} pages, "
                          f"{NewsPage.objects.count()} articles")
