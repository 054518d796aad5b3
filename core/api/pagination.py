"""Keyset pagination over (created_at, id): stable under inserts, no OFFSET."""

import base64
import binascii
from datetime import datetime

from django.db.models import Q

from core.errors import ValidationFailed

PAGE_SIZE = 50


def encode_cursor(at: datetime, pk) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, pk = base64.urlsafe_b64decode(padded.encode()).decode().split("|", 1)
        return datetime.fromisoformat(at), pk
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ValidationFailed(
            "Bad cursor.", {"cursor": ["Not a cursor this API issued."]}
        ) from exc


def keyset_page(qs, cursor: str | None, *, newest_first=True, field="created_at", size=PAGE_SIZE):
    """Return (rows, next_cursor) for `qs` ordered by (field, pk)."""
    if newest_first:
        qs = qs.order_by(f"-{field}", "-pk")
    else:
        qs = qs.order_by(field, "pk")
    if cursor:
        at, pk = decode_cursor(cursor)
        op = "lt" if newest_first else "gt"
        qs = qs.filter(Q(**{f"{field}__{op}": at}) | Q(**{field: at, f"pk__{op}": pk}))
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = encode_cursor(getattr(rows[-1], field), rows[-1].pk) if more else None
    return rows, next_cursor
