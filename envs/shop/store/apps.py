"""The sandbox's own app: the seed commands (store/management/commands/) and what makes django-oscar
deterministic without touching its code (store/hashers.py, store/templates/oscar/base.html)."""
from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "store"
