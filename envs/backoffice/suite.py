"""envs/backoffice/suite.py -- the back office: Django's real admin (the app in envs/backoffice/) over
a seeded SQLite file, run by the shared Django mechanism (envs/django_suite.py: a server and a database
file per worker, a fresh copy of the seed's database per episode, task templates and evaluators). Tasks
are templates in tasks/backoffice.json; its experts: envs/backoffice/experts.py.
"""
from envs import django_suite
from envs.django_suite import DjangoSuite


def load_tasks():
    return django_suite.load_tasks("backoffice")


class Backoffice(DjangoSuite):
    suite = "backoffice"
    ready_path = "/admin/login/"
