"""Settings of the Harbour & Pine shop: django-oscar (installed from PyPI, unmodified) -- its storefront
and its staff dashboard -- over one seeded SQLite file.

A live environment for web agents, not a deployment: it listens on 127.0.0.1 only, loads nothing from
the network (jQuery from Oscar's own static copy instead of Google's CDN: store/templates/oscar/base.html),
sends no mail (locmem backend) and keeps its state in the SQLite file and in one folder beside it,
`<db>.files/` (the product images and the whoosh search index), so the harness resets an episode by
replacing both (envs/django_suite.py, told by envs/shop/suite.py).

Runbook (from envs/shop/; build from the repository root)
  Build a database:  python -m envs.django_suite shop /tmp/shop.sqlite3 --seed 0   (migrate, seed, then
                       seed_files: the pictures and the search index in /tmp/shop.sqlite3.files/; atomic)
  Serve it:          MAG_DJANGO_DB=/tmp/shop.sqlite3 python manage.py runserver 127.0.0.1:PORT --noreload \
                       --insecure
  Log in:            staff at http://127.0.0.1:PORT/dashboard/ (its login form; the storefront's
                     /accounts/login/ works too) as admin@harbourpine.test / admin-pass-2026; customers
                     at /accounts/login/ with their e-mail and customer-pass-2026
  The suite builds and caches both for a seed by itself (collect.py --suite shop ...), and copies both
  for every episode.

What makes a seed's screenshots the same on every run and every day:
  - the server's clock stands still at the data's "today" (time-machine, for the whole process): the
    dashboard's "last 24 hours" figures, order dates, and every timestamp an episode writes;
  - passwords set during an episode get a fixed salt (store/hashers.py);
  - product images are drawn by Pillow from the seed's rows and their thumbnails made once, at seed time
    (seed_files: sorl records them in the database), so no page makes one while an agent waits; no
    cache outlives a request (CACHES is the dummy backend: sorl's key-value store and Oscar read the
    episode's database, never what an earlier episode left in the server's memory);
  - the search index is built from the seed's rows once and copied for every episode; Oscar's realtime
    signal processor keeps it in step with what the episode changes, in the episode's own copy (nothing
    else writes in the background: no task, no timer).
"""
import datetime
import os

import time_machine
from django.contrib.messages import constants as messages
from django.core.exceptions import ImproperlyConfigured
from oscar.defaults import *  # noqa: F403 -- Oscar's documented way: its defaults, then ours below

DB_PATH = os.environ.get("MAG_DJANGO_DB")
if not DB_PATH:
    raise ImproperlyConfigured("set MAG_DJANGO_DB to the SQLite file to serve "
                               "(build one with: python -m envs.django_suite shop PATH --seed N)")
FILES_DIR = DB_PATH + ".files"   # what the database refers to on disk: served and replaced with it

# "Today" in the data (the seed command's EPOCH). tick=False: the clock does not move at all, so two
# orders placed in one episode get the same time and a screenshot cannot depend on how fast a step ran.
SANDBOX_NOW = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.timezone.utc)
time_machine.travel(SANDBOX_NOW, tick=False).start()

# A fixed key is fine here and only here: a local test environment on 127.0.0.1 with throwaway data.
SECRET_KEY = "mag-shop-local-test-env-not-a-secret"
DEBUG = False   # agents must see the pages a real user sees, not Django's debug pages
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.sites",
    "django.contrib.flatpages",
    "store.apps.StoreConfig",   # first: its oscar/base.html wraps Oscar's own
    "oscar.config.Shop",
    "oscar.apps.analytics.apps.AnalyticsConfig",
    "oscar.apps.checkout.apps.CheckoutConfig",
    "oscar.apps.address.apps.AddressConfig",
    "oscar.apps.shipping.apps.ShippingConfig",
    "oscar.apps.catalogue.apps.CatalogueConfig",
    "oscar.apps.catalogue.reviews.apps.CatalogueReviewsConfig",
    "oscar.apps.communication.apps.CommunicationConfig",
    "oscar.apps.partner.apps.PartnerConfig",
    "oscar.apps.basket.apps.BasketConfig",
    "oscar.apps.payment.apps.PaymentConfig",
    "oscar.apps.offer.apps.OfferConfig",
    "oscar.apps.order.apps.OrderConfig",
    "oscar.apps.customer.apps.CustomerConfig",
    "oscar.apps.search.apps.SearchConfig",
    "oscar.apps.voucher.apps.VoucherConfig",
    "oscar.apps.wishlists.apps.WishlistsConfig",
    "oscar.apps.dashboard.apps.DashboardConfig",
    "oscar.apps.dashboard.reports.apps.ReportsDashboardConfig",
    "oscar.apps.dashboard.users.apps.UsersDashboardConfig",
    "oscar.apps.dashboard.orders.apps.OrdersDashboardConfig",
    "oscar.apps.dashboard.catalogue.apps.CatalogueDashboardConfig",
    "oscar.apps.dashboard.offers.apps.OffersDashboardConfig",
    "oscar.apps.dashboard.partners.apps.PartnersDashboardConfig",
    "oscar.apps.dashboard.pages.apps.PagesDashboardConfig",
    "oscar.apps.dashboard.ranges.apps.RangesDashboardConfig",
    "oscar.apps.dashboard.reviews.apps.ReviewsDashboardConfig",
    "oscar.apps.dashboard.vouchers.apps.VouchersDashboardConfig",
    "oscar.apps.dashboard.communications.apps.CommunicationsDashboardConfig",
    "oscar.apps.dashboard.shipping.apps.ShippingDashboardConfig",
    "widget_tweaks",
    "haystack",
    "treebeard",
    "sorl.thumbnail",
    "django_tables2",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "oscar.apps.basket.middleware.BasketMiddleware",
    "django.contrib.flatpages.middleware.FlatpageFallbackMiddleware",
]

ROOT_URLCONF = "shop_site.urls"
SITE_ID = 1

TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.template.context_processors.i18n",
        "django.template.context_processors.media",
        "django.template.context_processors.static",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
        "oscar.apps.search.context_processors.search_form",
        "oscar.apps.communication.notifications.context_processors.notifications",
        "oscar.apps.checkout.context_processors.checkout",
        "oscar.core.context_processors.metadata",
    ]},
}]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DB_PATH,
        "CONN_MAX_AGE": 0,   # every request opens the file anew: a copy swapped in between episodes is seen
        "ATOMIC_REQUESTS": True,   # as Oscar's sandbox: a checkout that fails half-way leaves no half order
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
# Nothing kept in the server's memory between requests: an episode sees its own database only
CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}

AUTHENTICATION_BACKENDS = [
    "oscar.apps.customer.auth_backends.EmailBackend",   # customers and staff sign in with their e-mail
    "django.contrib.auth.backends.ModelBackend",
]
PASSWORD_HASHERS = ["store.hashers.FixedSaltMD5PasswordHasher"]

LANGUAGE_CODE = "en-gb"   # Oscar's own: prices in pounds, dates as 2 March 2026
LANGUAGES = [("en-gb", "English")]   # one language: the header shows no language selector
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
MEDIA_ROOT = os.path.join(FILES_DIR, "media")   # product images (and sorl's thumbnails of them)
MEDIA_URL = "/media/"
LOGIN_REDIRECT_URL = "/accounts/"
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"   # order confirmations go nowhere
DEFAULT_FROM_EMAIL = OSCAR_FROM_EMAIL = "shop@harbourpine.test"
MESSAGE_TAGS = {messages.ERROR: "danger"}   # Bootstrap's alert class for errors (as Oscar's sandbox)

HAYSTACK_CONNECTIONS = {
    "default": {
        "ENGINE": "haystack.backends.whoosh_backend.WhooshEngine",
        "PATH": os.path.join(FILES_DIR, "whoosh"),
        "INCLUDE_SPELLING": True,
    },
}

THUMBNAIL_DEBUG = False
THUMBNAIL_KEY_PREFIX = "mag-shop"

OSCAR_SHOP_NAME = "Harbour & Pine"
OSCAR_SHOP_TAGLINE = "Home and outdoor goods"
OSCAR_DEFAULT_CURRENCY = "GBP"
OSCAR_ALLOW_ANON_CHECKOUT = True
OSCAR_INITIAL_ORDER_STATUS = "Pending"
OSCAR_INITIAL_LINE_STATUS = "Pending"
# What the order page's status form offers: each status lists the ones it may move to
OSCAR_ORDER_STATUS_PIPELINE = {
    "Pending": ("Being processed", "Cancelled"),
    "Being processed": ("Shipped", "Cancelled"),
    "Shipped": ("Complete",),
    "Complete": (),
    "Cancelled": (),
}
OSCAR_ORDER_STATUS_CASCADE = {"Being processed": "Being processed", "Cancelled": "Cancelled",
                              "Shipped": "Shipped", "Complete": "Shipped"}
OSCAR_LINE_STATUS_PIPELINE = {
    "Pending": ("Being processed", "Cancelled"),
    "Being processed": ("Shipped", "Cancelled"),
    "Shipped": (),
    "Cancelled": (),
}

# Server errors to the server's log (envs/django_suite.py keeps it beside the served file): with DEBUG off,
# a failing page shows only "Server Error" to the agent
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}
