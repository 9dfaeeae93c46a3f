"""`manage.py bootstrap_demo`: an operator, a demo design-partner organisation with one user, and a
rate card, created once; the logins are printed the first time only."""

import secrets
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from billing.models import RateCard
from portal.models import Membership, Organisation


class Command(BaseCommand):
    help = "Create the demo operator, organisation, partner user and rate card if they do not exist."

    @transaction.atomic
    def handle(self, *args, **options):
        User = get_user_model()
        created = []
        if not User.objects.filter(username="operator").exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("operator", "operator@example.com", password)
            created.append(("operator (admin console, /admin/)", "operator", password))
        organisation, _ = Organisation.objects.get_or_create(slug="demo", defaults={"name": "Demo Lab"})
        if not User.objects.filter(username="partner").exists():
            password = secrets.token_urlsafe(12)
            partner = User.objects.create_user("partner", "partner@example.com", password)
            Membership.objects.create(user=partner, organisation=organisation)
            created.append(("design partner of Demo Lab (/jobs/)", "partner", password))
        if not RateCard.objects.exists():
            RateCard.objects.create(rate_per_gpu_hour=Decimal("2.50"), note="demo rate")
        for who, username, password in created:
            self.stdout.write(f"Created {who}: username {username}  password {password}")
        if created:
            self.stdout.write("These passwords are shown once; change them in the admin console.")
