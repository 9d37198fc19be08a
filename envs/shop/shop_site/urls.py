"""The shop's URLs: Oscar's whole site as the package ships it (storefront at /, staff dashboard at
/dashboard/), plus the product images. runserver --insecure serves the static files, not the media:
with DEBUG off, Django's static() helper adds nothing, so the media route is spelled out."""
from django.apps import apps
from django.conf import settings
from django.urls import include, path, re_path
from django.views.static import serve

urlpatterns = [
    re_path(r"^media/(?P<path>.*)$", serve, {"document_root": settings.MEDIA_ROOT}),
    path("", include(apps.get_app_config("oscar").urls[0])),
]
