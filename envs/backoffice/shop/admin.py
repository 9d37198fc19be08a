"""The back office is Django's stock admin, configured with the features enterprise UIs have:
searchable, filterable lists, inline editing, bulk actions, date drill-down, validated forms."""
from django.contrib import admin, messages
from django.db.models import DecimalField, F, Sum
from django.utils import timezone

from .models import Customer, Order, OrderLine, Product, Ticket

admin.site.site_header = "Acme Back Office"
admin.site.site_title = "Acme Back Office"
admin.site.index_title = "Administration"


@admin.register(Customer)
class CustomerAdmin(admin.ModelAdmin):
    list_display = ["name", "email", "phone", "company", "city", "is_vip", "created"]
    list_filter = ["is_vip", "city"]
    search_fields = ["name", "email", "company"]   # also what the autocomplete widgets search
    ordering = ["name"]


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "category", "price", "stock", "active"]
    list_editable = ["price", "stock"]   # edit many rows at once, then one Save at the bottom
    list_filter = ["category", "active"]
    search_fields = ["sku", "name"]
    ordering = ["sku"]
    actions = ["deactivate"]

    @admin.action(description="Deactivate selected products")
    def deactivate(self, request, queryset):
        n = queryset.update(active=False)
        self.message_user(request, f"{n} product(s) deactivated.", messages.SUCCESS)


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    extra = 1
    autocomplete_fields = ["product"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "created", "status", "paid", "total"]
    list_display_links = ["id", "customer"]
    list_filter = ["status", "paid"]
    search_fields = ["id", "customer__name", "customer__email", "note"]
    list_select_related = ["customer"]
    date_hierarchy = "created"
    ordering = ["-created"]
    autocomplete_fields = ["customer"]
    inlines = [OrderLineInline]
    actions = ["mark_paid"]

    def get_queryset(self, request):
        # Annotated rather than a Python property so that the Total column is sortable.
        line_total = F("lines__quantity") * F("lines__unit_price")
        return super().get_queryset(request).annotate(
            total=Sum(line_total, output_field=DecimalField(max_digits=12, decimal_places=2)))

    @admin.display(ordering="total")
    def total(self, obj):
        # SQLite sums decimals as floats (3835.37000000000); show cents, as an invoice would.
        return None if obj.total is None else round(obj.total, 2)

    @admin.action(description="Mark selected orders as paid")
    def mark_paid(self, request, queryset):
        # Cancelled orders stay unpaid: paying them is a mistake the back office refuses.
        payable = queryset.exclude(status="cancelled")
        skipped = queryset.count() - payable.count()
        payable.filter(status="new").update(status="paid")
        n = payable.update(paid=True)
        self.message_user(request, f"{n} order(s) marked as paid.", messages.SUCCESS)
        if skipped:
            self.message_user(request, f"{skipped} cancelled order(s) skipped.", messages.WARNING)


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ["id", "subject", "customer", "assigned_to", "status", "priority", "created"]
    # The short id column is a link too: a long subject wraps in its column, and a wrapped inline
    # link's box centre can fall between its lines, where a click would miss it.
    list_display_links = ["id", "subject"]
    list_filter = ["status", "priority", "assigned_to"]
    search_fields = ["subject", "customer__name"]
    list_select_related = ["customer", "assigned_to"]
    date_hierarchy = "created"
    ordering = ["-created"]
    autocomplete_fields = ["customer"]
    readonly_fields = ["closed_at"]   # set by the status change itself
    actions = ["close_tickets"]

    @admin.action(description="Close selected tickets")
    def close_tickets(self, request, queryset):
        n = queryset.filter(status="open").update(status="closed", closed_at=timezone.now())
        self.message_user(request, f"{n} ticket(s) closed.", messages.SUCCESS)
