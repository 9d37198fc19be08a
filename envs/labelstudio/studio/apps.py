from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    verbose_name = "the annotation studio's sandbox"
