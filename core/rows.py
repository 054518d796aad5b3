"""Model instances from hand-written SQL, for the few reads on the hot paths where the ORM's
query compilation costs more than the query (profiled: ~0.5 ms of Python per query, against
~0.1 ms for the round trip on a local server)."""

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from psycopg.types.json import Jsonb


def columns(model, alias: str) -> str:
    """The model's columns, in field order, for a SELECT list."""
    return ", ".join(f"{alias}.{f.column}" for f in model._meta.concrete_fields)


def width(model) -> int:
    return len(model._meta.concrete_fields)


def instance(model, values):
    """An instance from `columns(model, ...)`'s values. psycopg hands jsonb over as text in
    Django's set-up (the field decodes it), and `from_db` applies no converters."""
    fields = model._meta.concrete_fields
    values = list(values)
    for i, f in enumerate(fields):
        if f.get_internal_type() == "JSONField" and isinstance(values[i], str):
            values[i] = json.loads(values[i])
    return model.from_db(connection.alias, [f.attname for f in fields], values)


def record(obj) -> Jsonb:
    """The unsaved `obj` as one jsonb parameter, for `jsonb_populate_record(NULL::<table>,
    %s)`: an INSERT composed into a bigger statement with one parameter per row, whose
    columns PostgreSQL types from the table itself. `pre_save` runs as in `Model.save()`
    (auto_now fields take the time)."""
    return Jsonb(
        {f.column: f.pre_save(obj, True) for f in obj._meta.concrete_fields},
        dumps=_dumps,
    )


def _dumps(value) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"))
