"""Settings of the Riverton town council's website: Wagtail (installed from PyPI, unmodified) with its
admin, over one seeded SQLite file. The site's own code -- its page models, snippets and templates, the
seed command -- is the app `town`, as in any Wagtail project.

A live environment for web agents, not a deployment: it listens on 127.0.0.1 only, loads nothing from
the network (no gravatar, no update check, no fonts or scripts from a CDN: the public pages use only
town/static/), sends no mail (locmem backend) and keeps no state outside the SQLite file and the media
folder beside it, so the harness resets an episode by replacing that file.

Runbook (from envs/cms/; build from the repository root)
  Build a database:  python -m envs.django_suite cms /tmp/cms.sqlite3 --seed 0   (migrate + seed, atomic)
  Serve it:          MAG_DJANGO_DB=/tmp/cms.sqlite3 python manage.py runserver 127.0.0.1:PORT --noreload \
                       --insecure
  Log in:            http://127.0.0.1:PORT/admin/login/  as admin / admin-pass-2026
                     (editors and moderators: USERNAME / editor-pass-2026)
  The public site:   http://127.0.0.1:PORT/

The admin is Wagtail's own: an agent reaches users, sites, collections and redirects from the sidebar's
Settings menu, as a Wagtail user does (docs/environments.md lists what the sandbox changes, and why).

What makes a seed's screenshots the same on every run and every day:
  - the server's clock stands still at the data's "today" (time-machine, for the whole process: the
    admin's "3 months ago" comes from Django's timesince, which reads datetime directly, so patching
    timezone.now alone is not enough); every revision, log entry and lock an episode writes gets it;
  - no random uuids: uuid4 (the translation key of a new or copied page, the id grouping one action's log
    entries) draws from a generator seeded by the request and the database's state (town/sandbox.py);
  - the editor writes nothing in the background: autosave is off (WAGTAIL_AUTOSAVE_INTERVAL = 0) and the
    editing-session ping (every 10 s, and whenever the tab becomes visible) is answered by a view that
    writes nothing and reports no other editors (town/sandbox.py, routed in urls.py);
  - the "You have unsaved edits" reminder does not poll its form on a timer (town/static/town/admin.js):
    whether a step's screenshot showed it depended on how fast the steps before it ran;
  - passwords set during an episode get a fixed salt (town/hashers.py);
  - string hashing is not randomised (manage.py sets PYTHONHASHSEED=0): Wagtail writes its reference index
    from sets; and the site's page types hash by their label (town/models.py), not their address: the
    page chooser's title lists the allowed types in the order of a set of them;
  - no banners that come and go: the "what's new" banner and the upgrade check are off; avatars are
    Wagtail's default picture (no gravatar).
"""
import datetime
import os
from pathlib import Path

import time_machine
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

DB_PATH = os.environ.get("MAG_DJANGO_DB")
if not DB_PATH:
    raise ImproperlyConfigured("set MAG_DJANGO_DB to the SQLite file to serve "
                               "(build one with: python -m envs.django_suite cms PATH --seed N)")

# "Today" in the data (the seed command's EPOCH). tick=False: the clock does not move at all, so two
# revisions of one episode get the same time and a screenshot cannot depend on how fast a step ran.
SANDBOX_NOW = datetime.datetime(2026, 3, 2, 9, 0, tzinfo=datetime.timezone.utc)
time_machine.travel(SANDBOX_NOW, tick=False).start()

# A fixed key is fine here and only here: a local test environment on 127.0.0.1 with throwaway data.
SECRET_KEY = "mag-cms-local-test-env-not-a-secret"
DEBUG = False   # agents must see the pages a real user sees, not Django's debug pages
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "town.apps.TownConfig",   # first: its templates (404, 500) win
    "wagtail.contrib.redirects",
    "wagtail.embeds",
    "wagtail.sites",
    "wagtail.users",
    "wagtail.snippets",
    "wagtail.documents",
    "wagtail.images",
    "wagtail.search",
    "wagtail.admin",
    "wagtail",
    "modelcluster",
    "taggit",
    "django_filters",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "town.sandbox.SeededUUIDMiddleware",
    "wagtail.contrib.redirects.middleware.RedirectMiddleware",
]

ROOT_URLCONF = "cms_site.urls"

TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DB_PATH,
        "CONN_MAX_AGE": 0,   # every request opens the file anew: a copy swapped in between episodes is seen
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

PASSWORD_HASHERS = ["town.hashers.FixedSaltMD5PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
MEDIA_ROOT = os.path.join(os.path.dirname(DB_PATH), "media")   # uploads, beside the served file
MEDIA_URL = "/media/"
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"   # moderation e-mails go nowhere
DEFAULT_FROM_EMAIL = "web@riverton.test"
DATA_UPLOAD_MAX_NUMBER_FIELDS = 10_000   # Wagtail's own advice: its page editor posts many fields

WAGTAIL_SITE_NAME = "Riverton Council"
# the address the admin writes into e-mails and "view live" links, where the harness serves the site
WAGTAILADMIN_BASE_URL = "http://" + os.environ.get("MAG_DJANGO_HOST", "127.0.0.1:8000")
WAGTAILSEARCH_BACKENDS = {"default": {"BACKEND": "wagtail.search.backends.database"}}
WAGTAIL_ENABLE_UPDATE_CHECK = False        # it asks releases.wagtail.io from the browser
WAGTAIL_ENABLE_WHATS_NEW_BANNER = False    # a dismissible banner on the dashboard
WAGTAIL_GRAVATAR_PROVIDER_URL = None       # avatars: Wagtail's default picture, nothing fetched
WAGTAIL_AUTOSAVE_INTERVAL = 0              # no revisions written while an episode types
WAGTAILADMIN_COMMENTS_ENABLED = False      # the comments side panel: not used by any task
WAGTAIL_PASSWORD_REQUIRED_TEMPLATE = "town/password_required.html"   # private pages, in the site's look
WAGTAIL_FRONTEND_LOGIN_TEMPLATE = "town/login.html"
