"""`manage.py migrate` as the owner of the tables, by default.

The application's own role ("default") owns nothing and may not create tables; migrations
run on the "owner" connection unless `--database` says otherwise. After migrating,
core/dbroles.py grants the application's role what it needs (post_migrate).
"""

from django.core.management.commands.migrate import Command as MigrateCommand


class Command(MigrateCommand):
    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.set_defaults(database="owner")
