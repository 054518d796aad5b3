# Built concurrently: on a large runs_action table a plain CREATE INDEX would block writes
# (proposals, dispatches) for as long as it takes.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('runs', '0009_drop_covered_fk_indexes'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='action',
            index=models.Index(condition=models.Q(('acknowledged_at__isnull', True), ('state__in', ['unknown', 'needs_human', 'blocked', 'awaiting_approval'])), fields=['tenant', 'state', 'tool', 'created_at', 'id'], name='action_open_by_state'),
        ),
    ]
