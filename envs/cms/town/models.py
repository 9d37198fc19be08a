"""The council site's content types, as a Wagtail project defines them (compare Wagtail's bakerydemo):
a home page, plain standard pages, a news section of dated articles by an author, tagged and filed
under categories, and an events section. Authors and categories are snippets, edited in the admin's
Snippets menu and chosen in the page editor."""
from django import forms
from django.core.paginator import Paginator
from django.db import models
from modelcluster.contrib.taggit import ClusterTaggableManager
from modelcluster.fields import ParentalKey, ParentalManyToManyField
from taggit.models import TaggedItemBase
from wagtail.admin.panels import FieldPanel
from wagtail.fields import RichTextField
from wagtail.models import Page
from wagtail.models.pages import PageBase
from wagtail.search import index
from wagtail.snippets.models import register_snippet

RICH_TEXT = ["bold", "italic", "h2", "h3", "ol", "ul", "link"]   # the toolbar of every body field
ARTICLES_PER_PAGE = 5   # the news listing pages through older articles


@register_snippet
class Author(models.Model):
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=100, blank=True)
    email = models.EmailField(blank=True)

    panels = [FieldPanel("name"), FieldPanel("role"), FieldPanel("email")]

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


@register_snippet
class Category(models.Model):
    name = models.CharField(max_length=80)
    slug = models.SlugField(max_length=80, unique=True)

    panels = [FieldPanel("name"), FieldPanel("slug")]

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"

    def __str__(self):
        return self.name


class LabelHashedPageBase(PageBase):
    """The site's page types hash by their label, not by their address in memory. Wagtail's move view puts
    the allowed parent types in a set, and the page chooser's title lists them in the set's order: hashed
    by address, that order (and the screenshot) changed from one server start to the next."""

    def __hash__(cls):
        return hash(cls._meta.label_lower)


class HomePage(Page, metaclass=LabelHashedPageBase):
    intro = models.TextField(blank=True)
    body = RichTextField(blank=True, features=RICH_TEXT)

    content_panels = Page.content_panels + [FieldPanel("intro"), FieldPanel("body")]
    subpage_types = ["town.StandardPage", "town.NewsIndexPage", "town.EventIndexPage"]
    max_count = 1


class StandardPage(Page, metaclass=LabelHashedPageBase):
    intro = models.TextField(blank=True)
    body = RichTextField(blank=True, features=RICH_TEXT)

    content_panels = Page.content_panels + [FieldPanel("intro"), FieldPanel("body")]
    search_fields = Page.search_fields + [index.SearchField("intro"), index.SearchField("body")]
    parent_page_types = ["town.HomePage", "town.StandardPage"]
    subpage_types = ["town.StandardPage"]


class NewsIndexPage(Page, metaclass=LabelHashedPageBase):
    intro = models.TextField(blank=True)

    content_panels = Page.content_panels + [FieldPanel("intro")]
    parent_page_types = ["town.HomePage"]
    subpage_types = ["town.NewsPage"]

    def get_context(self, request, *args, **kwargs):
        context = super().get_context(request, *args, **kwargs)
        articles = NewsPage.objects.child_of(self).live().order_by("-date", "-id")
        context["articles"] = Paginator(articles, ARTICLES_PER_PAGE).get_page(request.GET.get("page"))
        return context


class NewsPageTag(TaggedItemBase):
    content_object = ParentalKey("town.NewsPage", on_delete=models.CASCADE, related_name="tagged_items")


class NewsPage(Page, metaclass=LabelHashedPageBase):
    date = models.DateField("post date")
    author = models.ForeignKey(Author, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    intro = models.CharField(max_length=250, blank=True)
    body = RichTextField(blank=True, features=RICH_TEXT)
    tags = ClusterTaggableManager(through=NewsPageTag, blank=True)
    categories = ParentalManyToManyField(Category, blank=True)

    content_panels = Page.content_panels + [
        FieldPanel("date"),
        FieldPanel("author"),
        FieldPanel("intro"),
        FieldPanel("body"),
        FieldPanel("categories", widget=forms.CheckboxSelectMultiple),
        FieldPanel("tags"),
    ]
    search_fields = Page.search_fields + [index.SearchField("intro"), index.SearchField("body")]
    parent_page_types = ["town.NewsIndexPage"]
    subpage_types = []


class EventIndexPage(Page, metaclass=LabelHashedPageBase):
    intro = models.TextField(blank=True)

    content_panels = Page.content_panels + [FieldPanel("intro")]
    parent_page_types = ["town.HomePage"]
    subpage_types = ["town.EventPage"]

    def get_context(self, request, *args, **kwargs):
        context = super().get_context(request, *args, **kwargs)
        context["events"] = EventPage.objects.child_of(self).live().order_by("start_date", "id")
        return context


class EventPage(Page, metaclass=LabelHashedPageBase):
    start_date = models.DateField("date")
    location = models.CharField(max_length=120)
    intro = models.CharField(max_length=250, blank=True)
    body = RichTextField(blank=True, features=RICH_TEXT)

    content_panels = Page.content_panels + [
        FieldPanel("start_date"), FieldPanel("location"), FieldPanel("intro"), FieldPanel("body"),
    ]
    search_fields = Page.search_fields + [index.SearchField("intro"), index.SearchField("location")]
    parent_page_types = ["town.EventIndexPage"]
    subpage_types = []
