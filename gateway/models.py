"""What the MCP gateway keeps: the `requestState`s already used (single use, docs/mcp.md)."""

import uuid

from django.db import models


class RequestStateUse(models.Model):
    """One sealed `requestState` that came back and was honoured. Its nonce is unique, so a
    replayed state is refused by the database itself, however many requests race. Rows are
    worth keeping only while the state could still verify (its seal expires): older ones
    are deleted as new ones are written (`gateway.approvals.use_request_state`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    nonce = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    principal = models.ForeignKey("core.Principal", on_delete=models.CASCADE, related_name="+")
    action_id = models.UUIDField()
    used_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
