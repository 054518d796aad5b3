# Built concurrently: on a large runs_action table a plain CREATE INDEX would block writes
# (proposals, dispatches) for as long as it takes.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('runs', '0004_queue_claims'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='action',
            index=models.Index(condition=models.Q(('state__in', ['awaiting_approval', 'queued', 'dispatching', 'unknown', 'needs_human'])), fields=['state', 'tenant', 'created_at'], name='action_unsettled'),
        ),
    ]
