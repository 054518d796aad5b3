"""Model instances from hand-written SQL, for the few reads on the hot paths where the ORM's
query compilation costs more than the query (profiled: ~0.5 ms of Python per query, against
~0.1 ms for the round trip on a local server)."""

import json

from django.db import connection


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


def insert_fields(model) -> list:
    """The fields an INSERT of a new row writes: every concrete field (no table here has a
    serial key)."""
    return list(model._meta.concrete_fields)


def insert_columns(model) -> str:
    return ", ".join(f.column for f in insert_fields(model))


def insert_values(obj, name: str, override: dict | None = None) -> tuple[str, dict]:
    """A SELECT list and its named parameters for inserting the unsaved `obj`, to compose
    several INSERTs into one statement (`INSERT INTO t (insert_columns) SELECT … FROM …`).

    Each parameter is cast to its column's type (a parameter in a SELECT list has no type
    of its own when the server binds it). `pre_save` runs as in `Model.save()` (auto_now
    fields take the time). `override` maps a column to a function from the field's cast
    parameter to the SQL expression to write instead."""
    override = override or {}
    exprs, params = [], {}
    for i, f in enumerate(insert_fields(type(obj))):
        param = f"{name}_{i}"
        params[param] = f.get_db_prep_save(f.pre_save(obj, True), connection)
        placeholder = f"%({param})s::{f.cast_db_type(connection)}"
        exprs.append(override[f.column](placeholder) if f.column in override else placeholder)
    return ", ".join(exprs), params
