"""The site's URLs: Wagtail's admin at /admin/ (its editing-session ping answered by the sandbox's quiet
view), Django's admin at /django-admin/, the public pages everywhere else."""
from django.contrib import admin
from django.urls import include, path
from town import sandbox
from wagtail import urls as wagtail_urls
from wagtail.admin import urls as wagtailadmin_urls
from wagtail.documents import urls as wagtaildocs_urls

urlpatterns = [
    # before Wagtail's admin, so these win over its own views of the same paths
    path("admin/editing-sessions/ping/<str:app_label>/<str:model_name>/<str:object_id>/<int:session_id>/",
         sandbox.quiet_ping),
    path("admin/editing-sessions/release/<int:session_id>/", sandbox.quiet_release),
    path("admin/", include(wagtailadmin_urls)),
    path("django-admin/", admin.site.urls),
    path("documents/", include(wagtaildocs_urls)),
    path("", include(wagtail_urls)),   # Wagtail serves every page of the tree
]
