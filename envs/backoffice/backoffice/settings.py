"""Settings of the Acme back office: Django's real admin over one seeded SQLite file.

A live environment for web agents, not a deployment: it listens on 127.0.0.1 only, loads nothing
from the network (the admin's CSS/JS come from Django itself), and keeps no state outside the
SQLite file, so the harness resets an episode by replacing that file.

Runbook (from envs/backoffice/; build from the repository root)
  Build a database:  python -m envs.django_suite backoffice /tmp/bo.sqlite3 --seed 0   (migrate + seed, atomic)
  Serve it:          MAG_DJANGO_DB=/tmp/bo.sqlite3 python manage.py runserver 127.0.0.1:PORT --noreload --insecure
  Log in:            http://127.0.0.1:PORT/admin/  as admin / admin-pass-2026
  Dump it:           MAG_DJANGO_DB=/tmp/bo.sqlite3 python manage.py dump    (canonical JSON of every row)

--insecure makes runserver serve the admin's static files with DEBUG off (no collectstatic, no
web server); --noreload keeps it one process that the harness can terminate cleanly.
"""
import datetime
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

BASE_DIR = Path(__file__).resolve().parent.parent

DB_PATH = os.environ.get("MAG_DJANGO_DB")
if not DB_PATH:
    raise ImproperlyConfigured("set MAG_DJANGO_DB to the SQLite file to serve "
                               "(build one with: python -m envs.django_suite backoffice PATH --seed N)")

# The sandbox's clock stands still at the data's "today" (seed.py's EPOCH): what an episode creates or
# changes (a user's date joined, the last login, a ticket's closed at) shows the same time on every run
# and every day, so a seed gives the same screenshots. Set here, before any model binds timezone.now
# as a field default (settings load first).
SANDBOX_NOW = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.timezone.utc)
timezone.now = lambda: SANDBOX_NOW

# A fixed key is fine here and only here: a local test environment on 127.0.0.1 with throwaway
# data. Fixed also means sessions survive a server restart over the same file.
SECRET_KEY = "mag-backoffice-local-test-env-not-a-secret"
DEBUG = False   # agents must see the pages a real user sees, not Django's debug pages
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "shop",
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

ROOT_URLCONF = "backoffice.urls"

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
        # 0 = every request opens the file anew, so when the harness swaps in a fresh copy
        # between episodes the next request sees it (no stale handle on the old inode).
        "CONN_MAX_AGE": 0,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# MD5 only, because seeding hashes a dozen passwords and every episode logs in: PBKDF2's
# ~1M iterations would cost seconds each; with a fixed salt, so a password set during an episode
# gives the same screenshot on every run (shop/hashers.py). Unsafe anywhere but a local test environment.
PASSWORD_HASHERS = ["shop.hashers.FixedSaltMD5PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
