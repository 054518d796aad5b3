"""JSON that PostgreSQL can store, checked before anything is written (docs/design.md, "The
API's conventions").

PostgreSQL's jsonb and text refuse a NUL character (\\u0000), and a lone surrogate
(\\ud800) cannot even be encoded to UTF-8 on the way there; Python's json module builds
both without complaint. Nesting is bounded at MAX_DEPTH, which also keeps the parser's
recursion far from Python's limit (a RecursionError would be a 500). Duplicate keys are
refused rather than "last one wins", and NaN/Infinity, which are not JSON, are refused.

`loads()` is the strict parser for request bodies and JSON-in-a-form-field; `problem_in()`
finds what PostgreSQL would refuse inside one already-parsed value.
"""

import json
import re

MAX_DEPTH = 64

# Strings (to skip their brackets) and brackets; a string followed by ':' is a key.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"(?:\s*:)?|[\[\]{}]', re.DOTALL)


class JSONRefused(ValueError):
    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


def _too_deep(text: str, limit: int) -> str | None:
    """Scan without recursion; the top-level key under which nesting passes `limit`
    ("" at the top level), or None when it stays within it."""
    depth, key = 0, ""
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return key
        elif token in "]}":
            depth -= 1
        elif depth == 1 and token.endswith(":"):
            key = token[1 : token.rindex('"')]
    return None


class _Duplicated(dict):
    """An object that had a key twice (found after parsing, so the error can name the
    top-level field it sits in)."""

    duplicate = ""


def _pairs(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            marked = _Duplicated(pairs)
            marked.duplicate = key
            return marked
        seen[key] = value
    return seen


def _duplicate_in(value) -> str | None:
    if isinstance(value, _Duplicated):
        return value.duplicate
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in items:
        if (found := _duplicate_in(item)) is not None:
            return found
    return None


def _constant(name):
    raise JSONRefused(f"{name} is not JSON.")


def loads(text: str, *, field: str | None = None, limit: int = MAX_DEPTH):
    """Parse strictly. JSONRefused names `field`, or the top-level key at fault."""
    if (where := _too_deep(text, limit)) is not None:
        raise JSONRefused(f"Nested deeper than {limit} levels.", field or where or None)
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except JSONRefused as exc:
        exc.field = field
        raise
    except RecursionError as exc:  # belt and braces: the scan above should prevent it
        raise JSONRefused(f"Nested deeper than {limit} levels.", field) from exc
    except ValueError as exc:
        raise JSONRefused(f"Not valid JSON: {exc}", field) from exc
    if isinstance(value, _Duplicated):
        raise JSONRefused(f"The key {value.duplicate!r} appears twice.", field or value.duplicate)
    if isinstance(value, dict):
        for key, item in value.items():
            if (dup := _duplicate_in(item)) is not None:
                raise JSONRefused(f"The key {dup!r} appears twice in {key}.", field or key)
    elif (dup := _duplicate_in(value)) is not None:
        raise JSONRefused(f"The key {dup!r} appears twice.", field)
    return value


def bad_string(text: str) -> str | None:
    """Why PostgreSQL would refuse this string, or None."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    if any("\ud800" <= c <= "\udfff" for c in text):
        return "contains a lone surrogate, which is not valid Unicode"
    return None


def problem_in(value, depth: int = 1, limit: int = MAX_DEPTH) -> str | None:
    """The first reason PostgreSQL would refuse this parsed value, or None."""
    if depth > limit:
        return f"nested deeper than {limit} levels"
    if isinstance(value, str):
        return bad_string(value)
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return "NaN and Infinity are not JSON"
    if isinstance(value, dict):
        for key, item in value.items():
            if (why := bad_string(key)) is not None:
                return f"a key {why}"
            if (why := problem_in(item, depth + 1, limit)) is not None:
                return why
    if isinstance(value, list):
        for item in value:
            if (why := problem_in(item, depth + 1, limit)) is not None:
                return why
    return None
