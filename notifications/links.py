"""Where a notification links to. Domain code names a kind and a subject (`subject_type`,
`subject_id`); the console, which owns its URLs, says which of its pages shows that subject
(`console.links`, registered when the console app starts). Without a resolver (a process
with no console) a notification simply carries no link."""

from collections.abc import Callable

_resolver: Callable[[str, object], str] | None = None


def register(resolver: Callable[[str, object], str]) -> None:
    """The console's page for a subject: `resolver(subject_type, subject_id)` → a path."""
    global _resolver
    _resolver = resolver


def path_for(subject_type: str, subject_id) -> str:
    return _resolver(subject_type, subject_id) if _resolver is not None else ""
