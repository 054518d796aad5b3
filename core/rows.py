"""Model instances from hand-written SQL, for the few reads on the hot paths where the ORM's
query compilation costs more than the query (profiled: ~0.5 ms of Python per query, against
~0.1 ms for the round trip on a local server)."""

import datetime
import functools
import json

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, connection, router
from django.db.models import DateField, DateTimeField, Field, Model
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


@functools.cache
def _plan(model) -> tuple[tuple, frozenset] | None:
    """How `new` builds the model's instances: per field, its name, its attname, its
    relation (None for a plain field) and its default; and every name a keyword may use.
    None for a model `new` leaves to Django (its own `__init__`, a parent model, a field
    without a column of its own or generated, a relation over several columns), and for
    every model when database routers are set (they choose a related object's database)."""
    meta = model._meta
    if model.__init__ is not Model.__init__ or meta.parents or meta.abstract or router.routers:
        return None
    fields, names = [], set()
    for f in meta.fields:
        related = f.is_relation and (f.many_to_one or f.one_to_one)
        if f.column is None or f.generated or (related and len(f.related_fields) != 1):
            return None
        fields.append((f.name, f.attname, f if related else None, f.get_default))
        names |= {f.name, f.attname}
    return tuple(fields), frozenset(names)


def new(model, /, **values):
    """`model(**values)`, unsaved, as Django builds it, at about a third of the CPU (profiled:
    building a proposal's six unsaved instances took a tenth of the web's CPU per effect,
    most of it in `Model.__init__`'s general path and the relation descriptors' checks).

    A value is set straight into the instance's `__dict__`, a related object as its key
    plus the cached object (and, one to one, the reverse cache), a field not given takes
    its default: what `Model.__init__` does for a fresh instance. Anything else goes to
    Django itself, which answers it (or refuses it) as ever: a model `_plan` leaves out,
    init signal receivers, a keyword that is no field (a property), a field given by both
    its names, a related object of another model or from another database. As with
    Django's, an unsaved related object takes the new instance's database."""
    plan = _plan(model)
    if (
        plan is None
        or not values.keys() <= plan[1]
        or pre_init.has_listeners(model)
        or post_init.has_listeners(model)
    ):
        return model(**values)
    obj = model.__new__(model)
    state = obj._state = ModelState()
    attrs, cache = obj.__dict__, state.fields_cache
    for name, attname, relation, default in plan[0]:
        if relation is not None and name in values:
            value = values[name]
            if attname in values:
                return model(**values)
            if value is None:
                attrs[attname] = cache[name] = None
                continue
            if not isinstance(value, relation.remote_field.model._meta.concrete_model):
                return model(**values)
            # The descriptor's database choice without routers: the first related object's
            # (else the default), told to an unsaved related object too; two apart refused.
            if state.db is None:
                state.db = value._state.db or DEFAULT_DB_ALIAS
            if value._state.db is None:
                value._state.db = state.db
            elif value._state.db != state.db:
                return model(**values)
            ((_, target),) = relation.related_fields
            attrs[attname] = getattr(value, target.attname)
            cache[name] = value
            if not relation.remote_field.multiple:  # one to one: the other side knows
                relation.remote_field.set_cached_value(value, obj)
        elif attname in values:
            attrs[attname] = values[attname]
        else:
            attrs[attname] = default()
    return obj


def related(obj, **objects) -> None:
    """Cache, on `obj` read by `instance`, the related objects read in the same row (each
    under its field's name, its key already in `obj`): what `obj.<name> = value` does
    there, without the descriptor's checks for an assignment that changes the key."""
    cache = obj._state.fields_cache
    for name, value in objects.items():
        attname = obj._meta.get_field(name).attname
        assert obj.__dict__[attname] == (None if value is None else value.pk), name
        cache[name] = value


def jsonb(value) -> Jsonb:
    """A jsonb parameter written by orjson (`_dumps`), not psycopg's default `json.dumps`."""
    return Jsonb(value, dumps=_dumps)


def record(obj) -> Jsonb:
    """The unsaved `obj` as one jsonb parameter, for `jsonb_populate_record(NULL::<table>,
    %s)`: an INSERT composed into a bigger statement with one parameter per row, whose
    columns PostgreSQL types from the table itself. `pre_save` runs as in `Model.save()`
    (auto_now fields take the time)."""
    return jsonb(_row(obj, _columns(type(obj))))


@functools.cache
def _columns(model, without_serial_pk: bool = False) -> tuple[tuple[str, str, Field | None], ...]:
    """Per concrete field of `model` (less a serial primary key, the table's to fill, when
    asked), its column, its attname, and the field itself when its `pre_save` does more
    than read the attribute (an auto_now timestamp, a file)."""
    fields = model._meta.concrete_fields
    if without_serial_pk:
        fields = [f for f in fields if not (f.primary_key and _serial(model))]
    return tuple((f.column, f.attname, None if _reads_only(f) else f) for f in fields)


def _serial(model) -> bool:
    return model._meta.pk.get_internal_type() in {"AutoField", "BigAutoField", "SmallAutoField"}


def _reads_only(field: Field) -> bool:
    pre_save = type(field).pre_save
    if pre_save in (DateField.pre_save, DateTimeField.pre_save):
        return not (field.auto_now or field.auto_now_add)
    return pre_save is Field.pre_save


def _row(obj, columns) -> dict:
    """The columns of `obj` (`_columns`) as `Model.save()` would write them: what each
    field's `pre_save` answers for a new row."""
    return {
        column: getattr(obj, attname) if field is None else field.pre_save(obj, True)
        for column, attname, field in columns
    }


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
    meta, serial = model._meta, _serial(model)
    columns = _columns(model, without_serial_pk=True)
    names = ", ".join(column for column, _, _ in columns)
    rows_param = jsonb([_row(obj, columns) for obj in objs])
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
