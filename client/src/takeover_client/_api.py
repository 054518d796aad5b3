"""What the generated `Api` and `AsyncApi` (takeover_client.api) stand on: one call, typed."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ._model import Model, Unset
from .signing import segment


def _given(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if not isinstance(v, Unset)}


def _request(
    path: str,
    path_params: dict[str, str],
    query: dict[str, Any],
    headers: dict[str, Any],
    body: dict[str, Any] | None,
    files: dict[str, Any] | None,
) -> tuple[str, dict[str, Any]]:
    """The path and the httpx arguments of one call."""
    url = path.format(**{k: segment(str(v)) for k, v in path_params.items()})
    kwargs: dict[str, Any] = {}
    if query := _given(query):
        kwargs["params"] = {k: ",".join(v) if isinstance(v, list) else v for k, v in query.items()}
    if headers := _given(headers):
        kwargs["headers"] = {k: str(v) for k, v in headers.items()}
    files = _given(files or {})
    if files:
        # multipart/form-data: fields as text (objects as JSON), files as (name, bytes).
        kwargs["data"] = {
            k: json.dumps(v) if isinstance(v, dict | list) else str(v)
            for k, v in _given(body or {}).items()
        }
        kwargs["files"] = {k: v if isinstance(v, tuple) else (k, v) for k, v in files.items()}
    elif body is not None:
        kwargs["json"] = _given(body)
    return url, kwargs


def _result(returns: dict[int, type[Model] | None], data: Any, status: int) -> Any:
    cls = returns.get(status)
    if cls is None:
        return None
    return cls.from_dict(data)


def operation(
    method: str,
    path: str,
    *,
    returns: dict[int, type[Model] | None],
    headers: tuple[str, ...] = (),
    files: tuple[str, ...] = (),
    query: tuple[str, ...] = (),
    wire: dict[str, str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One operation of the API as a typed method. The decorated function only declares the
    arguments: path parameters positional, the rest keyword-only (UNSET ones are not sent),
    which a GET sends as the query and any other method as the body, but for those named in
    `headers`, `files` and (another method's) `query`; `wire` spells the names the API
    spells otherwise. The method answers `self._call(...)`: the model, or an awaitable of it
    on `AsyncBase`."""
    wire = wire or {}
    where = "query" if method == "GET" else "body"

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        parameters = inspect.signature(function).parameters
        groups: dict[str, list[str]] = {"path": [], "query": list(query), "body": []}
        for name, parameter in parameters.items():
            if name == "self" or name in headers or name in files or name in query:
                continue
            positional = parameter.kind is parameter.POSITIONAL_OR_KEYWORD
            groups["path" if positional else where].append(name)
        signature = inspect.signature(function)

        @functools.wraps(function)
        def call(self, *args, **kwargs):
            given = signature.bind(self, *args, **kwargs)
            given.apply_defaults()

            def named(names) -> dict[str, Any]:
                return {wire.get(name, name): given.arguments[name] for name in names}

            return self._call(
                method,
                path,
                named(groups["path"]),
                query=named(groups["query"]),
                headers=named(headers),
                body=named(groups["body"]) if groups["body"] else None,
                files=named(files) if files else None,
                returns=returns,
            )

        return call

    return decorate


class SyncBase:
    def __init__(self, client: Any) -> None:
        self._client = client

    def _call(self, method, path, path_params, *, query, headers, body, returns, files=None):
        url, kwargs = _request(path, path_params, query, headers, body, files)
        data, response = self._client.request(method, url, with_response=True, **kwargs)
        return _result(returns, data, response.status_code)

    def every(self, operation: Callable[..., Any], /, *, limit: int | None = None, **params):
        """Every item of a list operation, following `next` cursors (at most `limit`):
        `for action in client.api.every(client.api.queue_list, state=["unknown"]): ...`"""
        return _every(operation, limit, params)


def _every(operation, limit, params) -> Iterator[Any]:
    walk = _Walk(limit)
    while walk.cursor is not None:
        yield from walk.items(operation(cursor=walk.cursor, **params))


class _Walk:
    """Where `every` stands in a list: the cursor to ask for next (None: done) and how many
    items are still wanted. (A `limit` of 0 or less still yields one item, as it always has.)"""

    def __init__(self, limit: int | None) -> None:
        self.cursor: Any = Unset()
        self.left = limit

    def items(self, page: Any) -> list[Any]:
        items = page.results
        if self.left is not None:
            items = items[: max(self.left, 1)]
            self.left -= len(items)
        done = not page.next or (self.left is not None and self.left <= 0 and bool(items))
        self.cursor = None if done else page.next
        return items


class AsyncBase:
    def __init__(self, client: Any) -> None:
        self._client = client

    async def _call(self, method, path, path_params, *, query, headers, body, returns, files=None):
        url, kwargs = _request(path, path_params, query, headers, body, files)
        data, response = await self._client.request(method, url, with_response=True, **kwargs)
        return _result(returns, data, response.status_code)

    async def every(
        self, operation: Callable[..., Any], /, *, limit: int | None = None, **params
    ) -> AsyncIterator[Any]:
        """`SyncBase.every`, as an async iterator."""
        walk = _Walk(limit)
        while walk.cursor is not None:
            for item in walk.items(await operation(cursor=walk.cursor, **params)):
                yield item
