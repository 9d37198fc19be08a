"""envs/cms/suite.py -- the content-management suite: Wagtail, installed from PyPI and unmodified, with its
admin and the public site it serves, in a small Wagtail project (envs/cms/: settings, urls, the site's page
models and seed command in the app `town`) over a seeded SQLite file, run by the shared Django mechanism
(envs/django_suite.py). Tasks are templates in tasks/cms.json; its experts: envs/cms/experts.py. Staff log in
at /admin/login/; readers use the public pages at /.
"""
import datetime

from envs import django_suite
from envs.django_suite import DjangoSuite

SANDBOX_NOW = datetime.datetime(2026, 3, 2, 9, 0, tzinfo=datetime.timezone.utc)   # settings.SANDBOX_NOW


def load_tasks():
    return django_suite.load_tasks("cms")


class Cms(DjangoSuite):
    suite = "cms"
    ready_path = "/admin/login/"
    app = ("wagtail", "wagtail>=8.0.1,<8.1")
    # the admin's date pickers mark "today" from the browser's clock
    browser_now = SANDBOX_NOW
    # A chooser's search (page-chooser-modal.js) waits 200 ms after the last key, then sends jQuery.ajax and
    # puts the results in on success. Between the timer and the request reaching the network the page has
    # no timer pending and no request in flight: under load a settle ended there and the screenshot showed
    # the old listing (mag-v1 train, cms.retarget-redirect.2). jQuery counts its calls until their callbacks
    # have run.
    busy_js = "window.jQuery && jQuery.active > 0"
