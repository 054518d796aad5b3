"""Counts a person reads, bounded: past `COUNT_CAP` a count stops and reads "1,000+"."""

from django.db import connection

# Past this, a count reads "1,000+": counting 100,000 open actions on every view (and every
# live refresh) costs more than the exact number tells a person.
COUNT_CAP = 1000


class AtLeast(int):
    """A count that stopped at the cap: shown as "1,000+"."""

    def __str__(self) -> str:
        return f"{int(self):,}+"


def counts_sql(querysets) -> tuple[str, list]:
    """One statement counting each queryset, each reading at most COUNT_CAP + 1 rows."""
    parts, params = [], []
    for qs in querysets:
        sql, more = qs.order_by().values("pk")[: COUNT_CAP + 1].query.sql_with_params()
        # the ORM's own SQL, its values kept apart as parameters
        parts.append(f"(SELECT count(*) FROM ({sql}) AS counted)")  # noqa: S608
        params.extend(more)
    return "SELECT " + ", ".join(parts), params


def capped(keys, row) -> dict:
    """`counts_sql`'s row as key → count, a count past the cap as AtLeast."""
    cap = COUNT_CAP
    return {key: AtLeast(cap) if n > cap else n for key, n in zip(keys, row, strict=True)}


def capped_counts(querysets: dict) -> dict:
    """Each queryset's count, in ONE query, each reading at most COUNT_CAP + 1 rows."""
    sql, params = counts_sql(querysets.values())
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return capped(querysets, row)


def capped_sum(counts) -> int:
    counts = list(counts)
    total = sum(counts)
    return AtLeast(total) if any(isinstance(n, AtLeast) for n in counts) else total


def as_one_count(counts) -> int:
    """Disjoint capped counts as ONE capped count of their union would read: the exact sum
    up to the cap, AtLeast(cap) past it (a part that stopped at the cap is past it)."""
    counts = list(counts)
    total = sum(counts)
    if total > COUNT_CAP or any(isinstance(n, AtLeast) for n in counts):
        return AtLeast(COUNT_CAP)
    return total
