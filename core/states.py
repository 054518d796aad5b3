"""Declared state machines. Every status in the product is a `Machine`: a transition table,
checked when its module is imported, and moved only by one guarded function that calls
`check` and writes its audit event (docs/design.md, "Other state machines").

A table names every state (a missing row fails at import), and the states a row leads to
must exist; a state with no way out is terminal. The guarded functions still make each move
a conditional UPDATE checked by row count: the table says what is legal, the UPDATE says
who got there first.
"""

from django.db import models

from .errors import IllegalTransition


class Machine:
    def __init__(self, name: str, states: type[models.TextChoices], table: dict[str, set[str]]):
        values = set(states.values)
        missing = values - set(table)
        assert not missing, f"{name}: every state needs a row; missing {sorted(missing)}"
        unknown = {t for targets in table.values() for t in targets} - values
        assert not unknown, f"{name}: unknown target states {sorted(unknown)}"
        self.name = name
        self.states = states
        self.table = {source: frozenset(targets) for source, targets in table.items()}
        self.terminal = frozenset(s for s, targets in self.table.items() if not targets)

    def can(self, source: str, target: str) -> bool:
        return target in self.table.get(source, ())

    def check(self, source: str, target: str) -> None:
        if not self.can(source, target):
            raise IllegalTransition(f"A {self.name} cannot move from {source} to {target}.")

    def sources_of(self, target: str) -> frozenset[str]:
        return frozenset(s for s, targets in self.table.items() if target in targets)
