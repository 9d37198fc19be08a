"""The sandbox's additions to Wagtail's admin (Wagtail loads a project app's wagtail_hooks on start): the script
that turns off the unsaved-edits reminder's polling (town/static/town/admin.js says why) and a style sheet that
keeps screenshots deterministic (no minimap). docs/environments.md lists every change to the stock admin."""
from django.templatetags.static import static
from django.utils.html import format_html
from wagtail import hooks


@hooks.register("insert_global_admin_js")
def sandbox_admin_js():
    return format_html('<script src="{}"></script>', static("town/admin.js"))


@hooks.register("insert_global_admin_css")
def sandbox_admin_css():
    """No minimap beside the page editor: its bars are placed from the panels' offsets measured while the
    editor lays out, so a screenshot's column of them differed by a pixel between two runs of one seed."""
    return format_html("<style>{}</style>", ".w-minimap { display: none !important; }")
