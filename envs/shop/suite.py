"""envs/shop/suite.py -- the shop: django-oscar, installed from PyPI and unmodified, in a small Django
project (envs/shop/: settings, urls, the seed commands) over a seeded SQLite file, run by the shared
Django mechanism (envs/django_suite.py). Tasks are templates in tasks/shop.json; its experts:
envs/shop/experts.py. Customers shop at /; staff work in /dashboard/ (it opens on its login form).

What differs from the other Django suites: Oscar's data is not all in the database. Product images, their
thumbnails and the search index live in a folder beside it (`<db>.files/`, settings.FILES_DIR), made from
the seeded rows by `manage.py seed_files`; the shared mechanism builds and copies that folder with the
database. Building by hand: envs/shop/shop_site/settings.py (its runbook).
"""
import datetime

from envs import django_suite
from envs.django_suite import DjangoSuite

SANDBOX_NOW = datetime.datetime(2026, 3, 2, 10, 0, tzinfo=datetime.timezone.utc)   # settings.SANDBOX_NOW


def load_tasks():
    return django_suite.load_tasks("shop")


class Shop(DjangoSuite):
    suite = "shop"
    ready_path = "/accounts/login/"
    app = ("oscar", "django-oscar>=4.2.1,<4.3")
    files = ".files"                  # settings.FILES_DIR: the database's path + this
    after_seed = (("seed_files",),)   # the pictures, their thumbnails and the search index, from the rows
    # the dashboard's chart of the last 24 hours is drawn in the browser, from the browser's clock
    browser_now = SANDBOX_NOW
    # The dashboard's text areas become TinyMCE editors (oscar/js/oscar/dashboard.js, initWYSIWYG) after the
    # page has loaded, in an iframe the settle's DOM watch does not see: until each is initialised the page
    # is still building (two builds of one seed once showed the empty box in one and the editor in the other)
    busy_js = ("[...document.querySelectorAll('form.wysiwyg textarea, textarea.wysiwyg')]"
               ".filter((t) => !t.closest('.no-widget-init'))"
               ".some((t) => !(window.tinymce && tinymce.get(t.id) && tinymce.get(t.id).initialized))")
