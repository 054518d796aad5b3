"""``manage.py demo_downstream``: run the demo downstream (see ``demo.downstream``)."""

from django.core.management.base import BaseCommand

from demo.downstream import serve


class Command(BaseCommand):
    requires_system_checks = []  # it needs nothing of the project, not even a healthy one
    help = "Run the demo downstream that speaks the Takeover tool protocol, with fault injection."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address to bind")
        parser.add_argument("--port", type=int, default=8100, help="port to bind; 0 picks one")
        parser.add_argument("--quiet", action="store_true", help="no per-request log lines")

    def handle(self, *args, host, port, quiet, **options):
        serve(host, port, quiet=quiet)
