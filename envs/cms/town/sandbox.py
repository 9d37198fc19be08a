"""What makes Wagtail deterministic in the sandbox without touching its code (settings.py says why each
part is needed): uuids drawn from a seeded generator, and an editing-session ping that writes nothing.

Wagtail draws uuid4 for a page's translation key (new and copied pages), for the id that groups the log
entries of one admin action, and for preview slugs. Here every request draws them from a generator seeded
by the request and the database's state, so one episode replayed on a fresh copy of its seed's database
draws the same uuids; two requests can share a seed only when the first one stored no uuid (every write
of a page or a log entry changes the state). Outside requests (the seed command) the generator is seeded
by whoever calls `seed_uuids`.
"""
import random
import threading
import uuid

from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

_local = threading.local()   # runserver serves requests in threads: one generator per thread
_unseeded = random.Random("sandbox")   # a management command that never called seed_uuids


def sandbox_uuid4():
    """uuid.uuid4's stand-in: a version-4 uuid from this thread's seeded generator."""
    rng = getattr(_local, "rng", None) or _unseeded
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def seed_uuids(key):
    _local.rng = random.Random(key)


def database_state():
    """Ids that grow with every write that can store a uuid: pages and log entries."""
    from wagtail.models import ModelLogEntry, Page, PageLogEntry
    return [m.objects.order_by("-pk").values_list("pk", flat=True).first()
            for m in (Page, PageLogEntry, ModelLogEntry)]


class SeededUUIDMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/static/"):   # no uuids there; spare the queries
            return self.get_response(request)
        seed_uuids(f"{request.method} {request.get_full_path()} {database_state()}")
        try:
            return self.get_response(request)
        finally:
            _local.rng = None


@require_POST
def quiet_ping(request, app_label, model_name, object_id, session_id):
    """The page editor pings its editing session every 10 s (Wagtail's view stores the time and lists who
    else edits the page). Here: the answer of a ping with nobody else editing, and no write, so nothing
    changes in the database or on the screen between two steps of an episode."""
    from wagtail.admin.ui.editing_sessions import EditingSessionsList
    return JsonResponse({
        "session_id": session_id,
        "ping_url": request.path,
        "release_url": reverse("wagtailadmin_editing_sessions:release", args=(session_id,)),
        "other_sessions": [],
        "html": EditingSessionsList(None, []).render_html(),
    })


@require_POST
def quiet_release(request, session_id):
    """Leaving the editor releases its session (a beacon sent while the next page loads): kept as a
    no-op, so the write cannot race with that page."""
    return JsonResponse({})
