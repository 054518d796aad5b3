"""A query's SQL compiled once per shape, then run again with new values.

The ORM builds and compiles a queryset on every call. For the console's queue that was
most of the page's Python: the rows query (joins, three subqueries, the keyset predicate)
cost ~2 ms to build and compile and ~1.5 ms more to turn fifty rows into model instances,
against ~1 ms to run. Yet its *shape* (which filters are present, how many tenants and
tools) takes a handful of forms, and only the values change.

`statement(key, build, **values)` calls `build(**markers)` once per shape, where each
marker stands in for a value of the same type (a fresh random UUID for a UUID, a datetime
in year 2 for a datetime, a random 62-bit number for an int; a list or tuple of them for a
list or tuple), compiles what it returns with the ORM, and keeps the SQL with, for each
parameter, either the constant it is or the value it stands for. The shape is the caller's
`key` plus each value's name, type and length, so the same query with one tenant or three
compiles twice, and a value of an unexpected type compiles anew rather than running SQL
compiled for another. The ORM stays the one place that defines the query; the SQL is its
own, byte for byte, and so is each statement's plan.

Known quirks:
- A marker has to reach the parameters unchanged. The values a caller passes must already
  be what the ORM would bind (`uuid.UUID`, not its string; an aware datetime); a value the
  ORM transforms (a `__contains` pattern) or folds into the SQL text is refused with
  ValueError when the shape is first compiled, never silently kept as a constant.
- Values that are constants for a caller (a page size, a state filter that selects other
  constants) belong in `key`, not in `values`.
"""

import random
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connections
from django.db.models import QuerySet

# A bound on the shapes kept per process: they are few (filters present or not, a list's
# length up to an operator's tenants or a tool name's ids); past it the cache starts over.
MAX_SHAPES = 512

_lock = threading.Lock()
_statements: dict = {}
_MARKER_EPOCH = datetime(2, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Statement:
    """SQL with its parameters' origins: `(name, index)` for a value (`index` None for a
    single value), or `(None, constant)`. For a `.values()` queryset, `names` are the
    columns' names in the ORM's order and `converters` the ORM's per column (a JSON
    column's decoding, for one)."""

    sql: str
    slots: tuple
    using: str
    names: tuple = ()
    converters: tuple = ()

    def params(self, values: dict) -> list:
        params = []
        for name, at in self.slots:
            if name is None:
                params.append(at)  # a constant
            else:
                params.append(values[name] if at is None else values[name][at])
        return params

    def fetch(self, values: dict) -> list[tuple]:
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params(values))
            rows = cursor.fetchall()
        if not self.converters:
            return rows
        converted = []
        for row in rows:
            row = list(row)
            for pos, (functions, expression) in self.converters:
                value = row[pos]
                for function in functions:
                    value = function(value, expression, connection)
                row[pos] = value
            converted.append(row)
        return converted

    def dicts(self, values: dict) -> list[dict]:
        """A `.values()` queryset's rows, as the ORM would give them."""
        names = self.names
        return [dict(zip(names, row, strict=True)) for row in self.fetch(values)]


def statement(key, build, **values) -> tuple[Statement, dict]:
    """The statement of `build`'s query for these values' shape, and the values to run it
    with. `build(**values)` returns a QuerySet or `(sql, params)`."""
    shape = (key, *((name, _kind(value)) for name, value in sorted(values.items())))
    found = _statements.get(shape)
    if found is None:
        found = _compile(build, values)
        with _lock:
            if len(_statements) >= MAX_SHAPES:
                _statements.clear()
            _statements[shape] = found
    return found, values


def _kind(value):
    if isinstance(value, list | tuple):
        return (type(value), tuple(type(v) for v in value))
    return type(value)


def _marker(value):
    # bool is an int, and a marker never stands in for one: True == 1.
    if isinstance(value, uuid.UUID):
        return uuid.uuid4()
    if isinstance(value, datetime) and value.tzinfo is not None:
        return _MARKER_EPOCH + timedelta(microseconds=random.getrandbits(40))
    if isinstance(value, int) and not isinstance(value, bool):
        return random.getrandbits(62) | (1 << 61)
    raise TypeError(f"no marker for a value of type {type(value).__name__}")


def _compile(build, values: dict) -> Statement:
    markers, wanted = {}, {}
    for name, value in values.items():
        if isinstance(value, list | tuple):
            markers[name] = type(value)(_marker(v) for v in value)
            wanted.update({m: (name, i) for i, m in enumerate(markers[name])})
        else:
            markers[name] = _marker(value)
            wanted[markers[name]] = (name, None)
    built = build(**markers)
    names, converters, using = (), (), "default"
    if isinstance(built, QuerySet):
        using = built.db
        compiler = built.query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        if built._fields is not None or built.query.values_select:  # a .values() queryset
            query = built.query
            names = (*query.extra_select, *query.values_select, *query.annotation_select)
        fields = [s[0] for s in compiler.select[: compiler.col_count]]
        converters = tuple(compiler.get_converters(fields).items())
    else:
        sql, params = built
    slots, seen = [], set()
    for param in params:
        origin = wanted.get(param) if _hashable(param) else None
        if origin is None:
            slots.append((None, param))
        else:
            slots.append(origin)
            seen.add(origin)
    missing = sorted({name for name, i in wanted.values() if (name, i) not in seen})
    if missing:
        raise ValueError(
            f"{', '.join(missing)}: not bound as parameters unchanged; pass what the ORM "
            "binds, or put the value in the statement's key"
        )
    return Statement(sql, tuple(slots), using, names, converters)


def _hashable(value) -> bool:
    return isinstance(value, uuid.UUID | datetime | int | str) and not isinstance(value, bool)
