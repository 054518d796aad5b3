"""Generate takeover_client's typed layer from Takeover's OpenAPI schema, or check it.

    python manage.py spectacular --file var/openapi.yaml
    python client/generate.py var/openapi.yaml            # writes models/ and api/
    python client/generate.py --check var/openapi.yaml    # exit 1 and a diff if they differ

`make test` runs the check, so a schema change (a renamed field, a new operation) that the
client does not follow fails the build; `make client-api` regenerates. Output:

- `src/takeover_client/models/`: one frozen dataclass per object component of the schema
  (request bodies and problems aside), named as in the schema; one `Literal` per enum. A
  component answered by one part of the API (`GROUPS`) lives in that part's module, the
  rest in `common.py`; `takeover_client.models` has them all.
- `src/takeover_client/api/`: one method per operation, named by its operationId (a
  trailing `_create` dropped on a POST to an action, `tokens_revoke_create` is
  `tokens_revoke`), path parameters positional, query, header and body fields keyword-only
  (optional ones default to UNSET: not sent), returning the documented model; one module
  of operations per part of the API, which `Api` (synchronous) and `AsyncApi` (each method
  returns an awaitable of the same model) both inherit.

A development tool, not part of the installed package.
"""

from __future__ import annotations

import argparse
import difflib
import keyword
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "src" / "takeover_client"
PREFIX = "/api/v1"
HEADER = (
    '"""{what}\n\nGenerated from the OpenAPI schema by client/generate.py: do not edit by hand."""'
    "\n"
)
SKIPPED_HEADERS = {"X-Takeover-Tenant"}  # the client's own option, on every request
# The parts of the API, by the schema's tags: one module of operations each. Models: what
# an operation answers with in `models/resources.py`, the rest (enums, nested objects) in
# `models/common.py`.
GROUPS = {
    "runs": [
        "runs",
        "replays",
        "force-replay-requests",
        "settings",
        "me",
        "actions",
        "queue",
        "bulk",
        "idempotency-conflicts",
    ],
    "admin": ["approvals", "approval-requests", "ledger", "tools", "tokens", "principals", "audit"],
}
GROUP_OF = {tag: group for group, tags in GROUPS.items() for tag in tags}


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def is_request_body(name: str) -> bool:
    return name.endswith("InRequest")


def is_problem(name: str) -> bool:
    return name.startswith("Problem")


def python_name(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return name + "_" if keyword.iskeyword(name) or name in {"id_"} else name


class Types:
    def __init__(self, components: dict[str, Any]) -> None:
        self.components = components

    def enum(self, name: str) -> bool:
        return "enum" in self.components.get(name, {})

    def annotation(self, schema: dict[str, Any], *, models: str = "") -> str:
        """The Python annotation of a schema; `models` prefixes component classes."""
        nullable = schema.get("nullable", False)
        if "$ref" in schema:
            base = self.named(ref_name(schema["$ref"]), models)
        elif "allOf" in schema and len(schema["allOf"]) == 1:
            base = self.annotation(schema["allOf"][0], models=models)
        elif "oneOf" in schema or "anyOf" in schema:
            options = [
                self.annotation(s, models=models)
                for s in schema.get("oneOf") or schema["anyOf"]
                if ref_name(s.get("$ref", "")) != "NullEnum"
            ]
            base = " | ".join(dict.fromkeys(options))
        elif "enum" in schema:
            base = "Literal[" + ", ".join(repr(v) for v in schema["enum"] if v is not None) + "]"
        else:
            kind = schema.get("type")
            if kind == "string":
                base = "datetime" if schema.get("format") == "date-time" else "str"
                if schema.get("format") == "binary":
                    base = "bytes | tuple[str, bytes]"
            elif kind == "integer":
                base = "int"
            elif kind == "number":
                base = "float"
            elif kind == "boolean":
                base = "bool"
            elif kind == "array":
                base = f"list[{self.annotation(schema.get('items', {}), models=models)}]"
            elif kind == "object":
                base = "dict[str, Any]"
            else:
                base = "Any"
        if nullable and base != "Any" and "None" not in base:
            base += " | None"
        return base

    def named(self, name: str, models: str) -> str:
        if name == "NullEnum":
            return "None"
        return f"{models}{name}"


def docstring(text: str, indent: str) -> str:
    text = (text or "").strip().replace("\\", "\\\\").replace('"""', "'''")
    if not text:
        return ""
    first = text.split("\n\n", 1)[0].replace("\n", " ")
    lines = textwrap.wrap(first, width=94 - len(indent), break_on_hyphens=False)
    return indent + '"""' + ("\n" + indent).join(lines) + '"""\n'


def operations_of(document: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(group, path, method, operation) for every operation of API v1."""
    return [
        (GROUP_OF[op.get("tags", ["?"])[0]], path, method, op)
        for path, item in document["paths"].items()
        if path.startswith(PREFIX + "/")
        for method, op in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]


def model_groups(document: dict[str, Any]) -> dict[str, str]:
    """Each emitted component's module: `resources` for what an operation answers with,
    `common` (the default) for enums and nested components."""
    placed = {}
    for _, _, _, op in operations_of(document):
        for status, response in op["responses"].items():
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            if status.startswith("2") and schema and "$ref" in schema:
                placed[ref_name(schema["$ref"])] = "resources"
    return placed


def parent_of(name: str, objects: list[str], components: dict[str, Any]) -> str | None:
    """The component `name` extends, as the server's serializers do (`ToolCreatedOut` is
    `ToolOut` and a secret): the largest other one whose properties, the same and equally
    required, come first in `name`'s. The model then inherits its fields."""

    def fields(n: str) -> list[tuple[str, str, bool]]:
        schema = components[n]
        required = set(schema.get("required", []))
        return [(f, repr(p), f in required) for f, p in schema.get("properties", {}).items()]

    own = fields(name)
    candidates = [
        other
        for other in objects
        if other != name
        and 0 < len(fields(other)) < len(own)
        and own[: len(fields(other))] == fields(other)
    ]
    return max(candidates, key=lambda o: (len(fields(o)), o), default=None)


def is_page(schema: dict[str, Any]) -> bool:
    """A page of a list operation, which `_model.Page` describes but for its results."""
    next_ = schema.get("properties", {}).get("next", {})
    return (
        list(schema.get("properties", {})) == ["results", "next"]
        and next_.get("description") == "Pass as `cursor` for the next page; null at the end."
    )


def depth(name: str, parents: dict[str, str | None]) -> int:
    return 0 if parents[name] is None else 1 + depth(parents[name], parents)


def qualified(annotation: str, group: str, home_of: dict[str, str]) -> str:
    """`annotation` with the components of the other module by that module's name
    (`common.ActorOut`): one import of the module rather than a list of its names."""

    def name(match: re.Match) -> str:
        home = home_of.get(match[0], group)
        return match[0] if home == group else f"{home}.{match[0]}"

    return re.sub(r"\b[A-Z]\w*\b", name, annotation)


def render_models(document: dict[str, Any]) -> dict[str, str]:
    components = document["components"]["schemas"]
    types = Types(components)
    placed = model_groups(document)
    bodies: dict[str, list[str]] = {"common": [], "resources": []}
    names: dict[str, list[str]] = {group: [] for group in bodies}
    enums = {
        name: [v for v in schema["enum"] if v is not None]
        for name, schema in sorted(components.items())
        if "enum" in schema
        and name != "NullEnum"
        and not is_problem(name)
        and not is_request_body(name)
    }
    # An enum that begins with all of another's values names that one (`did` is `will` and
    # one more), which comes first.
    base_of = {}
    for name, values in enums.items():
        prefixes = [
            other
            for other, known in enums.items()
            if 1 < len(known) < len(values) and values[: len(known)] == known
        ]
        base_of[name] = max(prefixes, key=lambda other: len(enums[other]), default=None)
    while len(names["common"]) < len(enums):
        for name, values in enums.items():
            base = base_of[name]
            if name in names["common"] or (base and base not in names["common"]):
                continue
            listed = [repr(v) for v in values]
            if base:
                listed[: len(enums[base])] = [base]
            bodies["common"].append(f"{name} = Literal[{', '.join(listed)}]\n")
            names["common"].append(name)
    objects = [
        name
        for name, schema in components.items()
        if schema.get("type") == "object"
        and "enum" not in schema
        and not is_problem(name)
        and not is_request_body(name)
    ]
    parents = {name: parent_of(name, objects, components) for name in objects}
    home_of = {name: placed.get(name, "common") for name in objects}
    home_of.update({name: "common" for name in names["common"]})  # the enums
    runtime: dict[str, set[str]] = {"common": set(), "resources": set()}
    for name in sorted(objects, key=lambda n: (depth(n, parents), n)):
        schema = components[name]
        parent = parents[name] or ("Page" if is_page(schema) else None)
        group = placed.get(name, "common")
        out = bodies[group]
        names[placed.get(name, "common")].append(name)
        out.append(f"\nclass {name}({parent or 'Model'}):")
        out.append(docstring(schema.get("description") or f"The `{name}` schema.", "    "))
        if parents[name] and placed.get(parent, "common") != placed.get(name, "common"):
            runtime[placed.get(name, "common")].add(parent)
        inherited = set(components[parent]["properties"]) if parents[name] else set()
        if parent == "Page":
            inherited = {"next"}
        required = set(schema.get("required", []))
        for field, prop in schema.get("properties", {}).items():
            if field in inherited:
                continue
            annotation = types.annotation(prop)
            annotation = qualified(annotation, group, home_of)
            line = f"    {python_name(field)}: {annotation}"
            if field not in required:
                line += " = None" if "None" in annotation else " | None = None"
            out.append(line)
            if prop.get("description"):
                out.append(docstring(prop["description"], "    ").rstrip("\n"))
        out.append("")
    home = {name: group for group, listed in names.items() for name in listed}
    files = {}
    for group, body in bodies.items():
        text = "\n".join(body)
        where = "(enums, nested objects)" if group == "common" else "(what operations answer)"
        others = sorted(set(re.findall(r"\b(common|resources)\.[A-Z]", text)) - {group})
        lines = [
            HEADER.format(what=f"The API's resources {where}, typed: one dataclass each."),
            "from __future__ import annotations\n",
            "from datetime import datetime",
            "from typing import TYPE_CHECKING, Any, Literal\n",
            "from .._model import Model, Page\n",
            *(f"from .{home[n]} import {n}" for n in sorted(runtime[group])),
        ]
        if others:
            lines.append("if TYPE_CHECKING:  # annotations only: `Model` resolves them by name")
            lines += [f"    from . import {module}" for module in others]
            lines.append("")
        files[f"models/{group}.py"] = "\n".join([*lines, text])
    exports = [n for listed in names.values() for n in listed]
    init = [
        HEADER.format(what="The API's resources, typed: one dataclass per schema component."),
        *(f"from .{group} import {', '.join(listed)}" for group, listed in names.items() if listed),
        "",
        f"__all__ = {sorted(exports)!r}",
        "",
    ]
    files["models/__init__.py"] = "\n".join(init)
    return files


def method_name(operation_id: str, method: str, path: str) -> str:
    if method == "post" and operation_id.endswith("_create") and re.search(r"}/[\w-]+$", path):
        return operation_id[: -len("_create")]
    return operation_id


class Operation:
    def __init__(self, types: Types, path: str, method: str, op: dict[str, Any]) -> None:
        self.types = types
        self.path = path[len(PREFIX) :]
        self.method = method.upper()
        self.name = method_name(op["operationId"], method, path)
        self.doc = op.get("description") or op.get("summary") or ""
        self.path_params: list[tuple[str, str]] = []
        # (python name, annotation, required, where: query/header/body/file, name on the wire)
        self.keywords: list[tuple[str, str, bool, str, str]] = []
        for param in op.get("parameters", []):
            if param["in"] == "header" and param["name"] in SKIPPED_HEADERS:
                continue
            annotation = types.annotation(param.get("schema", {}), models="models.")
            py = python_name(param["name"].lower().replace("-", "_"))
            if param["in"] == "path":
                self.path_params.append((py, annotation))
            else:
                self.keywords.append(
                    (py, annotation, param.get("required", False), param["in"], param["name"])
                )
        body = op.get("requestBody", {}).get("content", {})
        self.files: list[str] = []
        json_schema = body.get("application/json", {}).get("schema")
        if json_schema is not None:
            resolved = types.components[ref_name(json_schema["$ref"])]
            required = set(resolved.get("required", []))
            for field, prop in resolved.get("properties", {}).items():
                annotation = types.annotation(prop, models="models.")
                self.keywords.append(
                    (python_name(field), annotation, field in required, "body", field)
                )
        multipart = body.get("multipart/form-data", {}).get("schema")
        if multipart is not None and json_schema is not None:
            for field, prop in types.components[ref_name(multipart["$ref"])]["properties"].items():
                if prop.get("format") == "binary":
                    self.files.append(field)
                    self.keywords = [k for k in self.keywords if k[4] != field]
                    self.keywords.append(
                        (python_name(field), "bytes | tuple[str, bytes]", False, "file", field)
                    )
        self.returns: dict[int, str | None] = {}
        for status, response in op["responses"].items():
            if not status.startswith("2"):
                continue
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            self.returns[int(status)] = ref_name(schema["$ref"]) if schema else None

    def signature(self) -> str:
        params = ["self", *(f"{py}: str" for py, _ in self.path_params)]
        keywords = sorted(self.keywords, key=lambda k: not k[2])  # required first
        if keywords:
            params.append("*")
        for py, annotation, required, _, _ in keywords:
            params.append(f"{py}: {annotation}" if required else f"{py}: {annotation} = UNSET")
        results = [f"models.{r}" if r else "None" for r in dict.fromkeys(self.returns.values())]
        returns = " | ".join(results)
        return f"    def {self.name}({', '.join(params)}) -> {returns}:"

    def decorator(self) -> str:
        """`@operation(...)`: the answers' models, and the arguments that do not go where
        the method sends them by default (a GET's query, any other's body)."""
        default = "query" if self.method == "GET" else "body"
        astray = [wire for _, _, _, w, wire in self.keywords if w == "body" != default]
        if astray:
            sys.exit(f"{self.name}: `operation` cannot send {astray} there; teach it")
        args = [repr(self.method), repr(self.path)]
        places = [("header", "headers"), ("file", "files")]
        if default != "query":
            places.append(("query", "query"))
        for where, argument in places:
            listed = tuple(py for py, _, _, w, _ in self.keywords if w == where)
            if listed:
                args.append(f"{argument}={listed!r}")
        renamed = {py: wire for py, _, _, _, wire in self.keywords if py != wire}
        if renamed:
            args.append(f"wire={renamed!r}")
        returns = ", ".join(
            f"{status}: {'models.' + r if r else 'None'}" for status, r in self.returns.items()
        )
        args.append(f"returns={{{returns}}}")
        return f"    @operation({', '.join(args)})"

    def body(self) -> list[str]:
        what = f"{self.method} {PREFIX}{self.path}" + (f": {self.doc}" if self.doc else "")
        return [docstring(what, "        ").rstrip()]


def render_api(document: dict[str, Any]) -> dict[str, str]:
    types = Types(document["components"]["schemas"])
    grouped: dict[str, list[Operation]] = {group: [] for group in GROUPS}
    for group, path, method, op in operations_of(document):
        grouped[group].append(Operation(types, path, method, op))
    files = {}
    for group, operations in grouped.items():
        operations.sort(key=lambda o: o.name)
        out = [
            HEADER.format(what=f"The operations of Takeover's HTTP API v1 on {group}, typed."),
            "from __future__ import annotations\n",
            "from typing import Any, Literal\n",
            "from .. import models",
            "from .._api import operation",
            "from .._model import UNSET\n",
            f"\nclass {group.capitalize()}Operations:",
            f'    """`client.api.<operation>` for {group}: `Api` and `AsyncApi` inherit'
            ' these."""\n',
        ]
        for op in operations:
            out.append(op.decorator())
            out.append(op.signature())
            out.extend(op.body())
            out.append("")
        files[f"api/{group}.py"] = "\n".join(out)
    every = sorted(o.name for operations in grouped.values() for o in operations)
    mixins = ", ".join(f"{group.capitalize()}Operations" for group in GROUPS)
    files["api/__init__.py"] = "\n".join(
        [
            HEADER.format(
                what="Every operation of Takeover's HTTP API v1, typed: `client.api.<operation>`."
            ),
            "from .._api import AsyncBase, SyncBase",
            *(f"from .{group} import {group.capitalize()}Operations" for group in GROUPS),
            "",
            f"OPERATIONS = {every!r}\n",
            f"\nclass Api({mixins}, SyncBase):",
            '    """Every operation of the schema, synchronous; results are `models`'
            ' dataclasses."""',
            f"\n\nclass AsyncApi({mixins}, AsyncBase):",
            '    """Every operation of the schema, each returning an awaitable of the same'
            ' `models`\n    dataclass (`await client.api.<operation>(...)`)."""',
            "",
        ]
    )
    return files


def formatted(source: str, name: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", name, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        check=True,
    )
    fixed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--fix-only", "-q", "--stdin-filename", name, "-"],
        input=done.stdout,
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        check=False,
    )
    return fixed.stdout or done.stdout


# What this script once wrote, and writes no more: removed on writing, a difference on check.
FORMER = [PACKAGE / "models.py", PACKAGE / "api.py"]


def render(document: dict[str, Any]) -> dict[Path, str]:
    files = {**render_models(document), **render_api(document)}
    return {PACKAGE / name: formatted(text, Path(name).name) for name, text in files.items()}


def differences(document: dict[str, Any]) -> str:
    """A unified diff between the committed client and what the schema generates ("" when
    they agree)."""
    diff = []
    expected = render(document)
    for directory in {path.parent for path in expected}:
        for stray in sorted(directory.glob("*.py")):
            if stray not in expected:
                expected[stray] = ""
    for path in FORMER:
        if path.exists():
            expected[path] = ""
    for path, text in sorted(expected.items()):
        current = path.read_text() if path.exists() else ""
        diff += difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"{path.relative_to(HERE.parent)} (committed)",
            f"{path.relative_to(HERE.parent)} (from the schema)",
        )
    return "".join(diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schema", type=Path, help="the OpenAPI schema (YAML or JSON)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a diff")
    args = parser.parse_args(argv)
    document = yaml.safe_load(args.schema.read_text())
    if args.check:
        diff = differences(document)
        if diff:
            sys.stdout.write(diff)
            print(
                "\nThe client (takeover_client.models / .api) does not match the API schema. "
                "If the schema change is intended, run `make client-api` and commit the result.",
                file=sys.stderr,
            )
            return 1
        print("takeover_client.models and .api match the schema")
        return 0
    for path in FORMER:
        if path.exists():
            path.unlink()
            print(f"removed {path.relative_to(HERE.parent)}")
    for path, text in render(document).items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
