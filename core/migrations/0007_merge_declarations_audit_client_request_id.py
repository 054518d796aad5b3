from django.db import migrations


class Migration(migrations.Migration):
    """Issue 13's tool declarations beside issue 9's audit client_request_id."""

    dependencies = [
        ("core", "0006_audit_client_request_id"),
        ("core", "0006_declarations"),
    ]

    operations = []
