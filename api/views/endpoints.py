"""How an API view is declared: `endpoint` makes it a view (`api_view`) and an operation
of the schema (`extend_schema`) at once; the kinds of operation the API has many of (a list
page, a POST of a body, a decision about one object) are built on it."""

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view

from api import schema
from api.schema import errors_for, ok


def endpoint(method: str, operation_id: str | None, *responses: dict, **options):
    """An API view answering `method` (`api_view`) and that operation in the schema
    (`extend_schema`): its id (None: the generated one), the union of `responses` (`ok(...)`,
    `errors_for(...)`), and `request`, `parameters`, ... as `extend_schema` takes them. A
    view answering several methods stacks one `endpoint` per method."""

    def wrap(view):
        func, below = getattr(view, "endpoint", (view, ()))
        union = {key: value for answers in responses for key, value in answers.items()}
        operations = (
            (method, {"operation_id": operation_id, "responses": union, **options}),
            *below,
        )
        wrapped = api_view([m for m, _ in operations])(func)
        for m, kw in reversed(operations):
            wrapped = extend_schema(methods=[m], **kw)(wrapped)
        wrapped.endpoint = (func, operations)
        return wrapped

    return wrap


def page_endpoint(operation_id: str, item, *filters):
    """A GET answering one keyset page of `item`s (`page`), filtered by the query parameters
    `filters`, then `cursor`."""
    return endpoint(
        "GET",
        operation_id,
        ok(200, schema.page_of(item)),
        errors_for(),
        parameters=[*filters, schema.CURSOR],
    )


def post_endpoint(operation_id: str | None, answer, body, *errors: int, status: int = 200):
    """A POST of a `body` (None: none), answered with `answer`: its own `errors`, and those of
    any body (411 a length that could not be read, 413 too large, 415 neither JSON nor, where
    accepted, multipart)."""
    return endpoint(
        "POST",
        operation_id,
        ok(status, answer),
        errors_for(*errors, 411, 413, 415),
        request=body,
    )


def decision_endpoint(operation_id: str | None, answer, body, *, status: int = 200):
    """A POST deciding about one object: 404 when the caller may not see it, 409 when its
    state forbids the decision."""
    return post_endpoint(operation_id, answer, body, 404, 409, status=status)
