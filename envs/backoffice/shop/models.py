"""A small business: customers buy products through orders; support tickets follow up."""
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone


def today():
    """The sandbox's date (settings.SANDBOX_NOW: its clock stands still)."""
    return timezone.now().date()


phone_validator = RegexValidator(r"^[0-9+\- ]{7,20}$",
                                 "Enter 7-20 characters: digits, spaces, '+' or '-'.")


class Customer(models.Model):
    name = models.CharField(max_length=100)
    email = models.EmailField()
    phone = models.CharField(max_length=20, validators=[phone_validator])
    company = models.CharField(max_length=100, blank=True)
    city = models.CharField(max_length=60)
    created = models.DateField(default=today)
    is_vip = models.BooleanField("VIP", default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Product(models.Model):
    CATEGORIES = [("hardware", "Hardware"), ("software", "Software"), ("accessories", "Accessories"),
                  ("supplies", "Office supplies"), ("services", "Services")]
    sku = models.CharField("SKU", max_length=20, unique=True)
    name = models.CharField(max_length=100)
    category = models.CharField(max_length=20, choices=CATEGORIES)
    price = models.DecimalField(max_digits=10, decimal_places=2, validators=[MinValueValidator(0)])
    stock = models.IntegerField(default=0, validators=[MinValueValidator(0)])
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["sku"]

    def __str__(self):
        return f"{self.name} ({self.sku})"


class Order(models.Model):
    STATUSES = [("new", "New"), ("paid", "Paid"), ("shipped", "Shipped"), ("cancelled", "Cancelled")]
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="orders")
    created = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=10, choices=STATUSES, default="new")
    paid = models.BooleanField(default=False)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"Order #{self.pk} ({self.customer})"

    def clean(self):
        # The one business rule the change form enforces beyond field validators, so that
        # agents meet a form-level error, not just per-field ones.
        if self.status == "shipped" and not self.paid:
            raise ValidationError("A shipped order must be paid.")


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    # PROTECT: a product that was ever sold cannot be deleted (the admin shows why); deactivate it.
    product = models.ForeignKey(Product, on_delete=models.PROTECT)
    quantity = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    unit_price = models.DecimalField(max_digits=10, decimal_places=2, blank=True,
                                     help_text="Leave empty to use the product's price.")

    def __str__(self):
        return f"{self.quantity} x {self.product}"

    def clean(self):
        if self.unit_price is None and self.product_id:
            self.unit_price = self.product.price


class Ticket(models.Model):
    STATUSES = [("open", "Open"), ("closed", "Closed")]
    PRIORITIES = [("low", "Low"), ("normal", "Normal"), ("high", "High")]
    subject = models.CharField(max_length=200)
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="tickets")
    assigned_to = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                    blank=True, limit_choices_to={"is_staff": True})
    status = models.CharField(max_length=10, choices=STATUSES, default="open")
    priority = models.CharField(max_length=10, choices=PRIORITIES, default="normal")
    created = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return self.subject

    def save(self, *args, **kwargs):
        # closed_at follows status; the seed sets it itself, so now() is reached only live.
        if self.status == "closed" and self.closed_at is None:
            self.closed_at = timezone.now()
        elif self.status == "open":
            self.closed_at = None
        super().save(*args, **kwargs)
