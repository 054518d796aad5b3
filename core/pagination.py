"""Keyset pagination over (created_at, id): stable under inserts, no OFFSET."""

import base64
import binascii
import uuid
from datetime import datetime

from django.db.models import Q

from core.errors import ValidationFailed

PAGE_SIZE = 50


def encode_cursor(at: datetime, pk) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{pk}".encode()).decode().rstrip("=")


MAX_BIGINT = 2**63 - 1


def decode_cursor(cursor: str, *, name: str = "cursor") -> tuple[datetime, str | int]:
    """(aware datetime, UUID string or integer id); anything else is a 400 naming the
    parameter, so that a crafted cursor never reaches the database (where "zzz" is no uuid:
    a 500). Which of the two the list's rows have is checked by `after`."""
    try:
        if len(cursor) > 200:
            raise ValueError("too long")
        padded = cursor + "=" * (-len(cursor) % 4)
        at, pk = base64.urlsafe_b64decode(padded.encode("ascii")).decode().split("|", 1)
        at = datetime.fromisoformat(at)
        if at.tzinfo is None:
            raise ValueError("naive datetime")
        if pk.isascii() and pk.isdigit() and int(pk) <= MAX_BIGINT:
            return at, int(pk)
        return at, str(uuid.UUID(pk))
    except (ValueError, binascii.Error, UnicodeError, OverflowError) as exc:
        raise ValidationFailed("Bad cursor.", {name: ["Not a cursor this API issued."]}) from exc


def _pk_of(qs, pk, name: str):
    """The cursor's id as the list's rows spell theirs: a cursor of one list (UUID ids)
    presented to another (integer ids) is a 400, not a query PostgreSQL refuses."""
    integer = qs.model._meta.pk.get_internal_type() in {"AutoField", "BigAutoField"}
    if integer != isinstance(pk, int):
        raise ValidationFailed("Bad cursor.", {name: ["Not a cursor of this list."]})
    return pk


def after(qs, cursor, *, field="created_at", newest_first=True):
    """Rows strictly after the cursor (field value, id) in the page's order.

    Written as `field <= c AND (field < c OR id < i)` rather than a bare OR, so that
    PostgreSQL starts the index range at `c` instead of filtering from the beginning.
    """
    if cursor is None:
        return qs
    at, pk = cursor
    pk = _pk_of(qs, pk, "cursor")
    if newest_first:
        return qs.filter(Q(**{f"{field}__lte": at}), Q(**{f"{field}__lt": at}) | Q(pk__lt=pk))
    return qs.filter(Q(**{f"{field}__gte": at}), Q(**{f"{field}__gt": at}) | Q(pk__gt=pk))


def keyset(qs, cursor, *, newest_first=True, field="created_at", size=PAGE_SIZE):
    """(rows, next_cursor) for one page ordered by (field, id), after a decoded cursor."""
    order = (f"-{field}", "-pk") if newest_first else (field, "pk")
    qs = after(qs.order_by(*order), cursor, field=field, newest_first=newest_first)
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = encode_cursor(getattr(rows[-1], field), rows[-1].pk) if more else None
    return rows, next_cursor


def keyset_page(qs, cursor: str | None, *, newest_first=True, field="created_at", size=PAGE_SIZE):
    """The API's pages: a malformed cursor is a 400 naming `cursor`."""
    decoded = decode_cursor(cursor) if cursor else None
    return keyset(qs, decoded, newest_first=newest_first, field=field, size=size)
