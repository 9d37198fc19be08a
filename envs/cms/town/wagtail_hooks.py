"""The council's additions to Wagtail's admin (Wagtail loads a project app's wagtail_hooks on start): a
dashboard panel of shortcuts to the site's administration -- the pages of the sidebar's Settings menu, one
click from the dashboard -- and the sandbox's script that turns off the unsaved-edits reminder's polling
(town/static/town/admin.js says why)."""
from django.templatetags.static import static
from django.utils.html import format_html
from wagtail import hooks
from wagtail.admin.ui.components import Component


class SiteAdministrationPanel(Component):
    name = "site_administration"
    template_name = "town/admin/site_administration_panel.html"
    order = 50   # above Wagtail's own panels (moderation from 100)


@hooks.register("construct_homepage_panels")
def add_site_administration_panel(request, panels):
    if request.user.is_superuser:
        panels.append(SiteAdministrationPanel())


@hooks.register("insert_global_admin_js")
def sandbox_admin_js():
    return format_html('<script src="{}"></script>', static("town/admin.js"))


@hooks.register("insert_global_admin_css")
def sandbox_admin_css():
    """No minimap beside the page editor: its bars are placed from the panels' offsets measured while the
    editor lays out, so a screenshot's column of them differed by a pixel between two runs of one seed."""
    return format_html("<style>{}</style>", ".w-minimap { display: none !important; }")
