from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),                            # queues are managed in Django's admin
    path("", include("helpdesk.urls", namespace="helpdesk")),   # the whole desk, as the package ships it
]
