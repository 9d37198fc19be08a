"""The sandbox's own app: what makes django-helpdesk deterministic without touching its code."""
import os
import uuid

from django.apps import AppConfig


def next_secret_key():
    """A ticket's secret key (it is in the public view's URL and on the edit form): uuid4 would differ on
    every run, so a ticket made during an episode gets the uuid of its future id -- the same on every run."""
    from helpdesk.models import Ticket
    last = Ticket.objects.order_by("-id").values_list("id", flat=True).first() or 0
    return str(uuid.UUID(int=last + 1))


def served_site(host):
    """The Site of the address this server answers at: the desk redirects a ticket search to the ticket's
    absolute URL, made from the current Site's domain (example.com out of the box; the port differs
    per server, so no Site row could hold it)."""
    from django.conf import settings
    from django.contrib.sites.models import Site
    return lambda manager, request=None: Site(id=settings.SITE_ID, domain=host, name="Acme service desk")


class DeskConfig(AppConfig):
    name = "desk"

    def ready(self):
        from django.contrib.sites.models import SiteManager
        if os.environ.get("MAG_DJANGO_HOST"):   # set by the harness's server (envs/django_suite.py)
            SiteManager.get_current = served_site(os.environ["MAG_DJANGO_HOST"])
        from helpdesk.models import Ticket
        field = Ticket._meta.get_field("secret_key")
        field.default = next_secret_key
        field.__dict__.pop("_get_default", None)   # Django caches the default's getter on first use
