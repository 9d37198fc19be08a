"""The council site's app: its page models, snippets, templates and seed command, and what makes Wagtail
deterministic in the sandbox (town/sandbox.py)."""
import uuid

from django.apps import AppConfig


class TownConfig(AppConfig):
    name = "town"
    default_auto_field = "django.db.models.AutoField"

    def ready(self):
        from wagtail.models import Page

        from town.sandbox import sandbox_uuid4
        uuid.uuid4 = sandbox_uuid4   # Wagtail calls uuid.uuid4() at the moment it needs one
        field = Page._meta.get_field("translation_key")   # ... but a field's default was bound at import
        field.default = sandbox_uuid4
        field.__dict__.pop("_get_default", None)   # Django caches the default's getter on first use
