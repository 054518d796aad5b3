from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    # The audit log can hold millions of rows: dropped without locking it against writes.
    # audit_tenant_object_at (0011) serves every read by object: each names its tenant.
    atomic = False

    dependencies = [
        ("core", "0013_drop_covered_fk_indexes"),
    ]

    operations = [
        RemoveIndexConcurrently(model_name="auditevent", name="audit_object"),
    ]
