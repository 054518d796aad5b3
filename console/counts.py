"""Counts a person reads, bounded: past `COUNT_CAP` a count stops and reads "1,000+"."""

from django.db import connection

# Past this, a count reads "1,000+": counting 100,000 open actions on every view (and every
# live refresh) costs more than the exact number tells a person.
COUNT_CAP = 1000


class AtLeast(int):
    """A count that stopped at the cap: shown as "1,000+"."""

    def __str__(self) -> str:
        return f"{int(self):,}+"


def capped_counts(querysets: dict) -> dict:
    """Each queryset's count, in ONE query, each reading at most COUNT_CAP + 1 rows."""
    cap, parts, params = COUNT_CAP, [], []
    for qs in querysets.values():
        sql, more = qs.order_by().values("pk")[: cap + 1].query.sql_with_params()
        # the ORM's own SQL, its values kept apart as parameters
        parts.append(f"(SELECT count(*) FROM ({sql}) AS counted)")  # noqa: S608
        params.extend(more)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return {key: AtLeast(cap) if n > cap else n for key, n in zip(querysets, row, strict=True)}


def capped_sum(counts) -> int:
    counts = list(counts)
    total = sum(counts)
    return AtLeast(total) if any(isinstance(n, AtLeast) for n in counts) else total
