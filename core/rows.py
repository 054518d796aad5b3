"""Model instances from hand-written SQL, for the few reads on the hot paths where the ORM's
query compilation costs more than the query (profiled: ~0.5 ms of Python per query, against
~0.1 ms for the round trip on a local server)."""

import datetime
import functools
import json

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from psycopg.types.json import Jsonb


def columns(model, alias: str) -> str:
    """The model's columns, in field order, for a SELECT list."""
    return ", ".join(f"{alias}.{f.column}" for f in model._meta.concrete_fields)


def width(model) -> int:
    return len(model._meta.concrete_fields)


@functools.cache
def _layout(model) -> tuple[tuple[str, ...], tuple[int, ...], bool]:
    """The model's attribute names in `columns` order, where its JSON fields are, and
    whether it builds its instances as Django's Model does."""
    fields = model._meta.concrete_fields
    return (
        tuple(f.attname for f in fields),
        tuple(i for i, f in enumerate(fields) if f.get_internal_type() == "JSONField"),
        model.__init__ is Model.__init__ and model.from_db.__func__ is Model.from_db.__func__,
    )


def instance(model, values):
    """An instance from `columns(model, ...)`'s values. psycopg hands jsonb over as text in
    Django's set-up (the field decodes it), and `from_db` applies no converters.

    Built as `from_db` builds one, less its per-field `setattr`s (a tenth of a ledger hit's
    CPU went to building its six instances): a fresh instance caches no related object,
    so its attributes can go straight into its `__dict__`. A model with init signal
    receivers, or its own `__init__` or `from_db`, gets `from_db` itself."""
    attnames, json_at, plain = _layout(model)
    values = list(values)
    for i in json_at:
        if isinstance(values[i], str):
            values[i] = json.loads(values[i])
    if not plain or pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db(connection.alias, attnames, values)
    obj = model.__new__(model)
    state = obj._state = ModelState()
    state.adding, state.db = False, connection.alias
    obj.__dict__.update(zip(attnames, values, strict=True))
    return obj


def record(obj) -> Jsonb:
    """The unsaved `obj` as one jsonb parameter, for `jsonb_populate_record(NULL::<table>,
    %s)`: an INSERT composed into a bigger statement with one parameter per row, whose
    columns PostgreSQL types from the table itself. `pre_save` runs as in `Model.save()`
    (auto_now fields take the time)."""
    return Jsonb(_row(obj, obj._meta.concrete_fields), dumps=_dumps)


def _row(obj, fields) -> dict:
    return {f.column: f.pre_save(obj, True) for f in fields}


class _Encoder(DjangoJSONEncoder):
    def default(self, o):
        # Full microseconds: DjangoJSONEncoder keeps milliseconds only, and timestamps
        # order the audit log and the keyset pages.
        if isinstance(o, datetime.datetime):
            return o.isoformat()
        return super().default(o)


# One encoder for every row: `json.dumps(cls=...)` would build one per call (stateless and
# safe to share across threads: each `encode` makes its own C encoder).
_encode = _Encoder(separators=(",", ":")).encode
_encode_other = _Encoder().default  # orjson's `default`: one value it does not write


def _dumps(obj) -> bytes | str:
    """A row as JSON: orjson (profiled: the stdlib encoder, with a Python `default` for
    every UUID and timestamp, took a twentieth of the web's CPU per proposal), which writes
    UUIDs, timestamps (full microseconds, as `isoformat`) and enums itself and hands the
    rest (a Decimal, a duration, a lazy string) to Django's encoder. What orjson refuses
    (an integer past 64 bits, which a tool's JSON may hold) the stdlib encoder writes."""
    try:
        return orjson.dumps(obj, default=_encode_other)
    except orjson.JSONEncodeError:
        return _encode(obj)


def insert_many(model, objs: list) -> list:
    """INSERT the unsaved `objs` as ONE jsonb parameter (`jsonb_populate_recordset`): the
    same short statement whatever their number, which psycopg converts once and the server
    prepares once. `bulk_create` writes a statement per batch size instead, with a
    parameter per field per row (profiled: a fifth of a worker's CPU on the batch claim's
    attempts and audit rows). A serial primary key is left to the table's default and set
    on the objects from RETURNING, in the order given (as `bulk_create` does)."""
    if not objs:
        return objs
    meta = model._meta
    serial = meta.pk.get_internal_type() in {"AutoField", "BigAutoField", "SmallAutoField"}
    fields = [f for f in meta.concrete_fields if not (serial and f.primary_key)]
    names = ", ".join(f.column for f in fields)
    rows_param = Jsonb([_row(obj, fields) for obj in objs], dumps=_dumps)
    sql = (
        f"INSERT INTO {meta.db_table} ({names}) "  # noqa: S608 -- names from the model
        f"SELECT {names} FROM jsonb_populate_recordset(NULL::{meta.db_table}, %s)"
    )
    with connection.cursor() as cursor:
        if serial:
            cursor.execute(f"{sql} RETURNING {meta.pk.column}", [rows_param])
            for obj, (pk,) in zip(objs, cursor.fetchall(), strict=True):
                obj.pk = pk
        else:
            cursor.execute(sql, [rows_param])
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias
    return objs
