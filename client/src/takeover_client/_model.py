"""The base of the typed results in `takeover_client.models`: a frozen dataclass built from
the API's JSON by its annotations, which keeps that JSON as it came (`to_dict()`)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from datetime import datetime
from typing import Any, ClassVar, Literal


class Unset:
    """The type of UNSET: an optional argument not given (None is sent as JSON null)."""

    _instance: ClassVar[Unset | None] = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = Unset()


@typing.dataclass_transform(kw_only_default=True, frozen_default=True)
@dataclasses.dataclass(frozen=True, kw_only=True)
class Model:
    """A component of the OpenAPI schema. Fields are typed (datetimes parsed, nested objects
    as models); fields a newer server added are not attributes but stay in `to_dict()`. Every
    subclass is itself a frozen dataclass with keyword-only fields."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)

    _json: dict[str, Any] = dataclasses.field(
        default_factory=dict, repr=False, compare=False, init=True
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> typing.Self:
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {data!r}")
        hints = _hints(cls)
        values = {
            f.name: _convert(hints[f.name], data.get(f.name))
            for f in dataclasses.fields(cls)
            if f.name != "_json" and (f.name in data or f.default is dataclasses.MISSING)
        }
        return cls(_json=copy.deepcopy(data), **values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object as the server sent it (a copy)."""
        return copy.deepcopy(self._json)


class Page(Model):
    """One page of a list operation; each list's page names the type of its `results`."""

    results: list[Any]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    import sys

    from . import models

    # datetime, Any and Literal (here and in the class's module), and every model by name.
    names = {**globals(), **vars(sys.modules[cls.__module__]), **vars(models)}
    return typing.get_type_hints(cls, names)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(options[0], value) if len(options) == 1 else value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v) for v in value]
    if origin in (dict, Literal) or hint is Any:
        return value
    if isinstance(hint, type) and issubclass(hint, Model):
        return hint.from_dict(value)
    if hint is datetime:
        return datetime.fromisoformat(value)
    return value
