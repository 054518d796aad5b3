"""``manage.py seed_demo``: the demo tenant, its operators, principal and tools (idempotent).

``make run`` does the same on start-up (``demo.setup.demo_setup``); this command is for a
stack started some other way (compose, a Procfile) that should carry the demo data too.
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from demo.setup import demo_setup


class Command(BaseCommand):
    help = "Create (or refresh) the demo tenant, operators, agent principal and tools."

    def add_arguments(self, parser):
        parser.add_argument(
            "--downstream-url",
            default="http://127.0.0.1:8100",
            help="where the demo downstream listens (manage.py demo_downstream)",
        )

    def handle(self, *args, downstream_url, **options):
        seeded = demo_setup(downstream_url=downstream_url, var_dir=Path(settings.VAR_DIR))
        self.stdout.write(
            "Demo data: " + (", ".join(seeded.created) if seeded.created else "already there")
        )
        for login in seeded.logins:
            password = login.password or "(changed since the demo set it)"
            self.stdout.write(f"  {login.username} ({login.role}): {password}")
        self.stdout.write(f"  agent token: {seeded.agent_token_file}")
