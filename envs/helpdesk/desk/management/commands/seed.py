"""Fill a freshly migrated database with one deterministic service desk.

  MAG_DJANGO_DB=/tmp/hd.sqlite3 python manage.py seed --seed 0

Everything comes from random.Random(seed) and a fixed epoch (settings.SANDBOX_NOW): every timestamp
is set by travelling the frozen clock to it (a ticket's `created` is auto_now_add and cannot be set
otherwise), secret keys are made from ids, passwords hashed with a fixed salt. So the same seed
gives the same rows, byte for byte. Names come from the word lists below, so no Faker dependency.
"""
import datetime
import random
import uuid

import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from helpdesk.models import FollowUp, KBCategory, KBItem, Queue, Ticket, TicketChange

EPOCH = settings.SANDBOX_NOW
ADMIN_PASSWORD = "admin-pass-2026"
AGENT_PASSWORD = "agent-pass-2026"
N_AGENTS, N_TICKETS = 5, 48

FIRST = ["Ada", "Ben", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira",
         "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera"]
LAST = ["Adams", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt", "Tanaka", "Weber"]
CLIENTS = ["northwind.example", "blueharbor.example", "cedarfinch.example", "orbitlog.example",
           "greenleaf.example", "lumenlabs.example"]
QUEUES = {   # slug -> (title, ticket titles: one ticket each at most, so a title names one ticket)
    "it": ("IT Support", [
        "Laptop will not boot after update", "VPN drops every hour", "Printer on floor 3 is jammed",
        "Cannot open shared drive", "Email stuck in outbox", "New monitor flickers",
        "Password expired on portal",
        "Wi-Fi slow in meeting room B", "Software licence request", "Phone not syncing calendar",
        "Keyboard missing keys", "Access to the CRM", "Webcam not detected", "Backup failed last night"]),
    "billing": ("Billing", [
        "Invoice shows the wrong address", "Charged twice for March", "Refund for cancelled order",
        "VAT number missing on invoice", "Change of billing contact", "Payment card declined",
        "Credit note request", "Quote for 50 seats", "Late payment fee dispute", "Annual plan renewal",
        "Invoice copy needed", "Currency on invoice is wrong", "Discount not applied", "Direct debit setup"]),
    "facilities": ("Facilities", [
        "Heating off in room 204", "Broken chair in open space", "Parking badge not working",
        "Leak under kitchen sink", "Lights flicker on floor 2", "Desk booking for new hire",
        "Coffee machine out of order", "Window will not close", "Door code for storage room",
        "Noise from ventilation", "Replace whiteboard markers", "Lift stuck on level 1"]),
    "hr": ("HR Requests", [
        "Update my home address", "Payslip for February missing", "Holiday balance looks wrong",
        "Parental leave request", "Employment letter for bank", "Expense claim not paid",
        "Onboarding for new starter", "Change of bank details", "Training budget approval",
        "Sick note submission"]),
}
COMMENTS = ["Looking into it now.", "Could you send a screenshot, please?", "Forwarded to the second line.",
            "Waiting for the supplier to reply.", "A fix is scheduled for tomorrow.", "Thanks, that helps."]
RESOLUTIONS = ["Replaced the part and tested it.", "Reissued the document.", "Settings corrected.",
               "Refund processed.", "Explained the steps to the requester."]
KB = {   # category slug -> (title, [(item title, question, answer)])
    "accounts": ("Accounts and access", [
        ("Reset your password", "How do I reset my portal password?",
         "Open the portal's login page, choose **Forgot password** and follow the link we email you."),
        ("Set up the VPN", "How do I connect to the VPN from home?",
         "Install the client from the software centre and sign in with your usual account."),
        ("Request access to a shared drive", "How do I get access to a team's shared drive?",
         "Open a ticket in IT Support naming the drive and your manager.")]),
    "billing": ("Billing questions", [
        ("Get a copy of an invoice", "Where can I find an old invoice?",
         "Every invoice is in the customer portal under **Billing > Invoices**."),
        ("Change your billing contact", "How do I change who receives our invoices?",
         "Reply to any invoice email with the new contact's name and address."),
        ("Pay by bank transfer", "Can we pay by bank transfer?",
         "Yes: the bank details are printed at the foot of every invoice.")]),
}


def at(moment):
    """Travel the frozen clock to `moment` while the rows made in the block are saved."""
    return time_machine.travel(moment, tick=False)


def make_users(rng):
    admin = User.objects.create_superuser("admin", "admin@acme.test", ADMIN_PASSWORD,
                                          first_name="Alex", last_name="Morgan")
    agents = []   # distinct first names: an agent's username is their first name
    for first, last in zip(rng.sample(FIRST, N_AGENTS), rng.sample(LAST, N_AGENTS)):
        agents.append(User.objects.create_user(first.lower(), f"{first.lower()}@acme.test", AGENT_PASSWORD,
                                               first_name=first, last_name=last, is_staff=True))
    return admin, agents


def make_ticket(rng, queue, title, staff, k, created):
    """One ticket with its history: opened by a client's email at `created`, maybe assigned and
    answered, maybe resolved or closed, all at seeded moments before EPOCH."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    status = rng.choices([Ticket.OPEN_STATUS, Ticket.REOPENED_STATUS, Ticket.RESOLVED_STATUS,
                          Ticket.CLOSED_STATUS], weights=[50, 10, 20, 20])[0]
    due = EPOCH + datetime.timedelta(days=rng.randrange(-10, 21), hours=8) if rng.random() < 0.5 else None
    with at(created):
        ticket = Ticket.objects.create(
            title=title, queue=queue, submitter_email=f"{first}.{last}@{rng.choice(CLIENTS)}".lower(),
            description=f"Hello, {title[0].lower() + title[1:]}. Can you help? -- {first} {last}",
            priority=rng.choices([1, 2, 3, 4, 5], weights=[5, 20, 50, 20, 5])[0], due_date=due,
            assigned_to=rng.choice(staff) if rng.random() < 0.75 else None,
            secret_key=str(uuid.UUID(int=k)))
        FollowUp.objects.create(ticket=ticket, title="Ticket Opened", comment=ticket.description, public=True)
    moment = created
    for _ in range(rng.randrange(0, 3)):
        moment += datetime.timedelta(minutes=rng.randrange(30, 2 * 24 * 60))
        with at(min(moment, EPOCH)):
            FollowUp.objects.create(ticket=ticket, title="Comment", comment=rng.choice(COMMENTS),
                                    public=rng.random() < 0.6, user=ticket.assigned_to or staff[0])
    if status in (Ticket.OPEN_STATUS, Ticket.REOPENED_STATUS) and rng.random() < 0.15:
        ticket.on_hold = True   # waiting on the customer
        ticket.save()
    if status != Ticket.OPEN_STATUS:
        moment += datetime.timedelta(minutes=rng.randrange(30, 24 * 60))
        with at(min(moment, EPOCH)):
            label = dict(Ticket.STATUS_CHOICES)[status]
            if status in (Ticket.RESOLVED_STATUS, Ticket.CLOSED_STATUS):
                ticket.resolution = rng.choice(RESOLUTIONS)
            f = FollowUp.objects.create(ticket=ticket, title=label, comment=ticket.resolution or "Reopened.",
                                        public=True, user=ticket.assigned_to or staff[0], new_status=status)
            TicketChange.objects.create(followup=f, field="Status", old_value="Open", new_value=label)
            ticket.status = status
            ticket.save()
    return ticket


class Command(BaseCommand):
    help = "Seed a migrated database with a deterministic service desk."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=0)

    @transaction.atomic
    def handle(self, *args, seed, **options):
        if User.objects.exists():
            raise CommandError("the database is already seeded (seed a freshly migrated file)")
        rng = random.Random(seed)
        with at(EPOCH - datetime.timedelta(days=400)):
            admin, agents = make_users(rng)
            queues = [Queue.objects.create(title=title, slug=slug, email_address=f"{slug}@acme.test",
                                           allow_public_submission=True)
                      for slug, (title, _) in QUEUES.items()]
            for slug, (title, items) in KB.items():
                cat = KBCategory.objects.create(name=title, title=title, slug=slug, public=True,
                                                description=f"Answers to common {title.lower()}.")
                for k, (item_title, question, answer) in enumerate(items):
                    KBItem.objects.create(category=cat, title=item_title, question=question, answer=answer,
                                          order=k, votes=rng.randrange(0, 9),
                                          recommendations=rng.randrange(0, 5))
        pool = [(q, t) for q, (_, titles) in zip(queues, QUEUES.values()) for t in titles]
        createds = sorted(EPOCH - datetime.timedelta(minutes=rng.randrange(2 * 24 * 60, 60 * 24 * 60))
                          for _ in range(N_TICKETS))   # ids in order of creation, as in a real desk
        for k, (created, (queue, title)) in enumerate(zip(createds, rng.sample(pool, N_TICKETS)), 1):
            make_ticket(rng, queue, title, agents, k, created)
        self.stdout.write(f"seeded: {User.objects.count()} users, {Ticket.objects.count()} tickets, "
                          f"{FollowUp.objects.count()} follow-ups")
