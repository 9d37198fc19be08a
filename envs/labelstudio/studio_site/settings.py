"""Settings of the annotation studio: Label Studio (installed from PyPI, unmodified) over one seeded SQLite
file, its own settings module (core.settings.label_studio) with what a sandbox changes on top.

A live environment for web agents, not a deployment: it listens on 127.0.0.1 only, calls nothing outside
the machine, and keeps its state in the SQLite file and the folder beside it (uploads, exports), so the
harness resets an episode by replacing both.

Runbook (from envs/labelstudio/, with .venv-labelstudio's Python; build from the repository root)
  Build a database:  .venv-labelstudio/bin/python -m envs.django_suite labelstudio /tmp/ls.sqlite3 --seed 0
  Serve it:          MAG_DJANGO_DB=/tmp/ls.sqlite3 python manage.py runserver 127.0.0.1:PORT --noreload --insecure
  Log in:            http://127.0.0.1:PORT/user/login/  as admin@studio.test / admin-pass-2026

No call leaves the machine (each a Label Studio setting, read from the environment before its settings
module is imported):
  - SENTRY_DSN and FRONTEND_SENTRY_DSN empty: no error reports from the server or the page (the stock
    settings name HumanSignal's Sentry projects; the page would load Sentry's script from its CDN);
  - COLLECT_ANALYTICS off: no Google Tag Manager script, no tracking iframe, no usage events;
  - LATEST_VERSION_CHECK off: no request to PyPI for the latest version;
  - FEATURE_FLAGS_OFFLINE on (the default, said again): the flags come from the package's own file.
A fixed SECRET_KEY (a local sandbox's, not a secret; else Label Studio writes a random one to a .env file).
Signup is closed (DISABLE_SIGNUP_WITHOUT_LINK): the seed makes the first user and the team.
SSRF protection off (SSRF_PROTECTION_ENABLED): the team's services (the webhooks' receiver, an ML backend)
listen on this machine, 127.0.0.1, an address the stock setting refuses; nothing else is reachable anyway.
"""
import datetime
import os

import time_machine
from django.core.exceptions import ImproperlyConfigured

DB_PATH = os.environ.get("MAG_DJANGO_DB")
if not DB_PATH:
    raise ImproperlyConfigured("set MAG_DJANGO_DB to the SQLite file to serve (build one with: "
                               ".venv-labelstudio/bin/python -m envs.django_suite labelstudio PATH --seed N)")

OFFLINE = {"LABEL_STUDIO_SENTRY_DSN": "", "LABEL_STUDIO_FRONTEND_SENTRY_DSN": "",
           "LABEL_STUDIO_COLLECT_ANALYTICS": "false", "LABEL_STUDIO_LATEST_VERSION_CHECK": "false",
           "LABEL_STUDIO_FEATURE_FLAGS_OFFLINE": "true", "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
           "LABEL_STUDIO_SSRF_PROTECTION_ENABLED": "false",
           # uploads, exports and the generated secret key: in the folder beside the database
           "LABEL_STUDIO_BASE_DATA_DIR": DB_PATH + ".data", "LABEL_STUDIO_DJANGO_DB": "sqlite",
           "LABEL_STUDIO_DATABASE_NAME": DB_PATH, "LABEL_STUDIO_LOG_LEVEL": "WARNING"}
os.environ.update(OFFLINE)

# "Today" in the data (the seed command's EPOCH). tick=False: the clock does not move at all, so what an
# episode writes gets the same time on every run.
SANDBOX_NOW = datetime.datetime(2026, 4, 6, 9, 0, tzinfo=datetime.timezone.utc)
time_machine.travel(SANDBOX_NOW, tick=False).start()

# Label Studio's settings, then ours. Its settings module reads django.conf.settings while it is being
# imported (Sentry's set-up, the versions it collects): those reads must find Label Studio's module, half
# imported as it would be under its own manage.py, not this one, which has none of its names yet.
os.environ["DJANGO_SETTINGS_MODULE"] = "core.settings.label_studio"
from core.settings.label_studio import *  # noqa: E402,F401,F403

os.environ["DJANGO_SETTINGS_MODULE"] = __name__

ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [*INSTALLED_APPS, "studio"]  # noqa: F405 -- the seed command
# the same password hash on every build of a seed (and no PBKDF2 seconds per user): studio/hashers.py
PASSWORD_HASHERS = ["studio.hashers.FixedSaltMD5PasswordHasher"]
