"""manage.py seed --seed N: the annotation team of a seed, through Label Studio's own API (its serializers,
its import, its counters), as the team would have made it by hand.

What a seed builds: the first user (admin@studio.test, the one who can sign in; signup is closed) and three
annotators in one organization; four projects, each a labelling config of choices over texts (support
tickets by sentiment, product reviews by topic, news headlines by section, chat messages by intent); 16 to
24 texts each, drawn from the seed; on some of them annotations by the team (a choice), some skipped.
Everything is dated at the sandbox's "today" (settings.SANDBOX_NOW: the clock stands still).
"""
import random

from django.core.management.base import BaseCommand
from organizations.models import Organization
from projects.models import Project
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from tasks.models import Annotation
from users.models import User

ADMIN, ADMIN_PASSWORD = "admin@studio.test", "admin-pass-2026"
ANNOTATORS = ["noor.haddad@studio.test", "lars.berg@studio.test", "mei.tanaka@studio.test"]
ANNOTATOR_PASSWORD = "annotator-pass-2026"

SUBJECTS = {
    "ticket": ["the invoice", "the new dashboard", "the mobile app", "the password reset", "the export",
               "the delivery", "the refund", "the onboarding call", "the API key", "the search page"],
    "review": ["the kettle", "the desk lamp", "the backpack", "the blender", "the headphones", "the mug",
               "the office chair", "the water bottle", "the keyboard", "the umbrella"],
    "headline": ["the city council", "the harbour", "the football club", "the central bank", "the museum",
                 "the university", "the rail network", "the hospital", "the film festival", "the tech firm"],
    "message": ["my order", "my subscription", "my account", "my parcel", "my card", "my booking",
                "my invoice", "my password", "my address", "my voucher"],
}
PROJECTS = [   # title, what is labelled, the choice's name, {choice: sentence templates}
    ("Support ticket sentiment", "ticket", "sentiment", {
        "Positive": ["Thanks, {s} works perfectly now.", "Great job on {s}, very quick."],
        "Negative": ["{S} is broken again and nobody answers.", "I am unhappy with {s}, it failed twice."],
        "Neutral": ["Where can I find {s}?", "Please tell me when {s} will be ready."]}),
    ("Product review topics", "review", "topic", {
        "Quality": ["{S} broke after a week.", "{S} feels solid and well made."],
        "Price": ["{S} is far too expensive for what it is.", "{S} was a bargain at this price."],
        "Shipping": ["{S} arrived three days late.", "{S} came in a crushed box."]}),
    ("News headline sections", "headline", "section", {
        "Politics": ["Vote on {s} budget delayed again", "Minister visits {s} ahead of the election"],
        "Business": ["Shares rise as {s} reports record profit", "{S} cuts costs after a weak quarter"],
        "Sport": ["{S} wins the cup final on penalties", "Record crowd cheers on {s}"]}),
    ("Chat intent detection", "message", "intent", {
        "Cancel": ["Please cancel {s} today.", "I want to stop {s} right away."],
        "Change": ["Can I change {s} to next week?", "I need to update {s}."],
        "Question": ["What is the status of {s}?", "How long does {s} usually take?"]}),
]


# The data manager's Default tab as the front end makes it on a first visit, with the "Annotated by" column
# hidden as the team keeps it: a row is opened by a click at its middle, which would land on that column's
# avatars (a pop-up, not the task).
HIDDEN = ["inner_id", "annotations_results", "annotations_ids", "predictions_score", "predictions_model_versions",
          "predictions_results", "file_upload", "storage_filename", "created_at", "updated_at", "updated_by",
          "avg_lead_time", "draft_exists"]
LABELING_HIDDEN = ["id", "completed_at", "cancelled_annotations", "total_predictions", "annotators"]
DEFAULT_TAB = {"title": "Default", "type": "list", "target": "tasks", "hiddenColumns": {
    "explore": [f"tasks:{c}" for c in ["annotators", *HIDDEN]],
    "labeling": [f"tasks:{c}" for c in LABELING_HIDDEN + HIDDEN]}, "columnsWidth": {}, "columnsDisplayType": {},
    "gridWidth": 4, "gridFitImagesToWidth": False, "semantic_search": [], "agreement_selected": {}}


def label_config(name, choices):
    """A text classification config, as Label Studio's own template writes it."""
    options = "\n    ".join(f'<Choice value="{c}"/>' for c in choices)
    return (f'<View>\n  <Text name="text" value="$text"/>\n  <Choices name="{name}" toName="text" '
            f'choice="single" showInLine="true">\n    {options}\n  </Choices>\n</View>')


def texts(rng, kind, sentences, n):
    """n distinct texts of one project: (text, the choice it reads as)."""
    out = {}
    while len(out) < n:
        choice = rng.choice(sorted(sentences))
        s = rng.choice(SUBJECTS[kind])
        text = rng.choice(sentences[choice]).format(s=s, S=s[0].upper() + s[1:])
        out.setdefault(text, choice)
    return list(out.items())


def same_secrets(rng):
    """What Label Studio draws at random while seeding (API tokens, the invite link's and the projects'
    tokens, annotations' unique ids), drawn from the seed instead: two builds of a seed, the same rows."""
    draw = lambda n: "%0*x" % (n, rng.getrandbits(4 * n))  # noqa: E731
    for token in Token.objects.order_by("user_id"):
        Token.objects.filter(pk=token.pk).update(key=draw(40))
    for model in (Organization, Project):
        for pk in model.objects.order_by("pk").values_list("pk", flat=True):
            model.objects.filter(pk=pk).update(token=draw(40))
    for pk in Annotation.objects.order_by("pk").values_list("pk", flat=True):
        Annotation.objects.filter(pk=pk).update(unique_id=draw(32))


class Command(BaseCommand):
    help = "Seed the annotation studio's database (deterministic for a given --seed)."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, seed=0, **options):
        rng = random.Random(seed)
        admin = User.objects.create_user(email=ADMIN, password=ADMIN_PASSWORD, username="admin",
                                         first_name="Ada", last_name="Moreau", is_staff=True,
                                         is_superuser=True)
        org = Organization.create_organization(created_by=admin, title="Northwind Labs")
        team = [admin]
        for email in ANNOTATORS:
            first, last = email.split("@")[0].split(".")
            user = User.objects.create_user(email=email, password=ANNOTATOR_PASSWORD, username=first,
                                            first_name=first.title(), last_name=last.title())
            org.add_user(user)
            team.append(user)
        for user in team:
            user.active_organization = org
            user.save(update_fields=["active_organization"])
        api = APIClient(SERVER_NAME="127.0.0.1")   # a host ALLOWED_HOSTS lets in
        api.force_authenticate(admin)
        for title, kind, name, sentences in PROJECTS:
            self.project(api, rng, team, title, kind, name, sentences)
        same_secrets(rng)


    def project(self, api, rng, team, title, kind, name, sentences):
        """One project: its config, its texts, annotations on about half of them and a few skips."""
        r = api.post("/api/projects/", {"title": title, "label_config": label_config(name, sorted(sentences)),
                                        "description": f"Label each {kind} by its {name}."}, format="json")
        assert r.status_code == 201, r.content
        pid = r.json()["id"]
        tasks = []
        for text, choice in texts(rng, kind, sentences, rng.randint(16, 24)):
            # meta (not shown by the app): the choice the text reads as, for the tasks' instructions
            task = {"data": {"text": text}, "meta": {"reads_as": choice}, "annotations": []}
            fate = rng.random()
            if fate < 0.5:   # labelled by one of the team: as the text reads, or (one in five) by mistake
                given = choice if rng.random() < 0.8 else rng.choice(sorted(set(sentences) - {choice}))
                result = [{"id": f"s{len(tasks)}", "from_name": name, "to_name": "text", "type": "choices",
                           "origin": "manual", "value": {"choices": [given]}}]
                task["annotations"].append({"result": result, "completed_by": rng.choice(team).id})
            elif fate < 0.6:   # skipped
                task["annotations"].append({"result": [], "was_cancelled": True,
                                            "completed_by": rng.choice(team).id})
            tasks.append(task)
        r = api.post(f"/api/projects/{pid}/import", tasks, format="json")
        assert r.status_code == 201, r.content
        r = api.post("/api/dm/views/", {"project": pid, "data": DEFAULT_TAB}, format="json")
        assert r.status_code == 201, r.content
