"""``manage.py bench_steps``: where the web's CPU for one effect goes, step by step, in
process and on one thread, on a database of its own (bench/steps.py). For comparing two
versions of the hot path: its figures hold still where `make bench`'s move with the machine.

    python manage.py bench_steps --effects 1000 --batches 5
"""

from bench.own_database import InOwnDatabase
from bench.steps import measure

from .bench import in_own_database


class Command(InOwnDatabase):
    help = "Where the web's CPU for one effect goes, step by step, in process."
    knobs = {"effects": 1000, "batches": 5, "history": 20_000}
    helps = {"history": "actions in the database before the measured batches (0: none)"}

    def outer(self, argv, **opts):
        in_own_database("bench_steps", "steps", argv, say=self.stdout.write).check_returncode()

    def inner(self, *, effects, batches, history, **opts):
        import logging

        from django.db import connection

        logging.getLogger().setLevel(logging.WARNING)  # no access line, no line per dispatch
        # One backend for the whole run, whose CPU is a figure: the setting's 60 s would
        # close it mid-run, and the figure would be of a backend that is gone.
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = None
        rows = measure(effects, batches, history, say=self.stdout.write)
        self.stdout.write(f"\n{effects} effects × {batches} batches, CPU ms per effect (median):")
        width = max(len(label) for label, _ in rows)
        for label, ms in rows:
            self.stdout.write(f"  {label:<{width}}  {ms:7.3f}")
