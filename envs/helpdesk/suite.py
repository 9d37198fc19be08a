"""envs/helpdesk/suite.py -- the service desk: django-helpdesk, installed from PyPI and unmodified, in a
small Django project (envs/helpdesk/: settings, urls, the seed command) over a seeded SQLite file, run by
the shared Django mechanism (envs/django_suite.py). Tasks are templates in tasks/helpdesk.json; its
experts: envs/helpdesk/experts.py. Staff log in at /login/; customers use the public pages at /.
"""
import datetime

from envs import django_suite
from envs.django_suite import DjangoSuite

SANDBOX_NOW = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.timezone.utc)   # settings.SANDBOX_NOW


def load_tasks():
    return django_suite.load_tasks("helpdesk")


class Helpdesk(DjangoSuite):
    suite = "helpdesk"
    ready_path = "/login/"
    app = ("helpdesk", "django-helpdesk>=2.6.1,<2.7")
    # the ticket list renders its dates in the browser, relative to the browser's today
    browser_now = SANDBOX_NOW
