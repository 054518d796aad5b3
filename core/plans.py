"""Predicates written so that a prepared statement's generic plan can still use a partial index.

The application's connection prepares what it runs five times (takeover/settings.py), and
after five more executions PostgreSQL may keep one generic plan for every set of parameters.
A generic plan cannot prove a partial index's predicate from a bound parameter: with
`state IN ($1, $2, $3)` the open-queue index is out of reach, and the queue's count and rows
became a sequential scan of every action of every tenant (seconds at ten million rows; a
50-row tenant paid the same). Written into the SQL as constants, the states prove the
predicate in every plan; the tenant, the tool and the time stay parameters.
"""

import re

from django.db.models import BooleanField, F, Func

# A state name is a short identifier: nothing here can close a quote.
_CONSTANT = re.compile(r"[a-z][a-z0-9_]*")


class InConstants(Func):
    """`field IN ('a', 'b')` with the values in the statement itself (not parameters)."""

    template = "%(expressions)s IN (%(constants)s)"
    output_field = BooleanField()

    def __init__(self, field: str, values):
        values = sorted({str(v) for v in values})
        if not values or not all(_CONSTANT.fullmatch(v) for v in values):
            raise ValueError(f"not a set of identifiers: {values!r}")
        super().__init__(F(field), constants=", ".join(f"'{v}'" for v in values))
