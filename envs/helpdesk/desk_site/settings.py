"""Settings of the Acme service desk: django-helpdesk (installed from PyPI, unmodified) over one seeded
SQLite file.

A live environment for web agents, not a deployment: it listens on 127.0.0.1 only, loads nothing from
the network (HELPDESK_USE_CDN off: the package's own copies of Bootstrap, jQuery, DataTables and Font
Awesome), sends no mail (locmem backend) and keeps no state outside the SQLite file, so the harness
resets an episode by replacing that file.

Runbook (from envs/helpdesk/; build from the repository root)
  Build a database:  python -m envs.django_suite helpdesk /tmp/hd.sqlite3 --seed 0   (migrate + seed, atomic)
  Serve it:          MAG_DJANGO_DB=/tmp/hd.sqlite3 python manage.py runserver 127.0.0.1:PORT --noreload \
                       --insecure
  Log in:            http://127.0.0.1:PORT/login/  as admin / admin-pass-2026
                     (agents: USERNAME / agent-pass-2026)

What makes a seed's screenshots the same on every run and every day:
  - the server's clock stands still at the data's "today" (time-machine, for the whole process: the
    desk's "2 days ago" and every timestamp an episode writes come from it; patching timezone.now alone
    misses the ones that call datetime directly);
  - a ticket made during an episode gets a secret key from its id, not uuid4 (desk/apps.py);
  - passwords set during an episode get a fixed salt (desk/hashers.py);
  - the ticket list's Timeline tab is off (its page fetches a font from a CDN and breaks under a fixed clock).
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
                               "(build one with: python -m envs.django_suite helpdesk PATH --seed N)")

# "Today" in the data (the seed command's EPOCH). tick=False: the clock does not move at all, so two
# follow-ups of one episode get the same time and a screenshot cannot depend on how fast a step ran.
SANDBOX_NOW = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.timezone.utc)
time_machine.travel(SANDBOX_NOW, tick=False).start()

# A fixed key is fine here and only here: a local test environment on 127.0.0.1 with throwaway data.
SECRET_KEY = "mag-helpdesk-local-test-env-not-a-secret"
DEBUG = False   # agents must see the pages a real user sees, not Django's debug pages
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.sites",      # helpdesk builds absolute links from the Site
    "django.contrib.humanize",   # naturaltime on follow-ups
    "rest_framework",            # helpdesk's API pages render with DRF's templates
    "helpdesk",
    "desk.apps.DeskConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "desk_site.urls"
SITE_ID = 1

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

PASSWORD_HASHERS = ["desk.hashers.FixedSaltMD5PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
MEDIA_ROOT = os.path.join(os.path.dirname(DB_PATH), "media")   # attachments, beside the served file
MEDIA_URL = "/media/"
LOGIN_URL = "helpdesk:login"
LOGIN_REDIRECT_URL = "helpdesk:home"
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"   # notifications go nowhere
DEFAULT_FROM_EMAIL = "helpdesk@acme.test"

HELPDESK_TEAMS_MODE_ENABLED = False       # on by default, and then it needs pinax-teams
HELPDESK_USE_CDN = False                  # the package's bundled copies of its JavaScript and CSS
HELPDESK_TICKETS_TIMELINE_ENABLED = False
HELPDESK_KB_ENABLED = True
