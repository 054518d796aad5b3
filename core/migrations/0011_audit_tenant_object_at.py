from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking the audit log against writes (it can hold millions of rows).
    atomic = False

    dependencies = [
        ("core", "0010_notifications_move_to_their_app"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(
                fields=["tenant", "object_id", "-at", "-id"], name="audit_tenant_object_at"
            ),
        ),
    ]
