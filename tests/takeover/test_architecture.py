"""The shape of the code, held by tests: no import cycle among the project's modules, the
apps depend in one direction, and no comment cites a document the repository lacks."""

import ast
import re
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "bench",
    "takeover",
    "api",
    "console",
    "demo",
    "gateway",
    "runs",
    "approvals",
    "ledger",
    "notifications",
    "core",
]
# Who may import whom, top to bottom; a package may import only those below it. `api` and
# `console` are two faces of the same domain and know nothing of each other; `demo` speaks
# to the product through the services (set-up) and the HTTP API (its agent) only. `bench`
# (make bench, make soak) drives the whole project from outside, through the project's
# process supervisor. `notifications` tells people what happened; the engine emits and
# delivers through it, and it knows nothing of runs. `gateway` is the MCP door, beside the API.
LAYERS = [
    "bench",
    "takeover",
    ("api", "console", "demo", "gateway"),
    "runs",
    ("approvals", "ledger", "notifications"),
    "core",
]


def graph():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return grimp.build_graph(*PACKAGES, include_external_packages=False)


def cycles(g) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), with imports made
    inside functions counted like any other: a cycle hidden in a function is still one."""
    edges = {m: sorted(g.find_modules_directly_imported_by(m) & g.modules) for m in g.modules}
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(g.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_among_the_projects_modules():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    class Two:
        modules = {"a", "b", "c"}

        def find_modules_directly_imported_by(self, m):
            return {"a": {"b"}, "b": {"a"}, "c": {"a"}}[m]

    assert cycles(Two()) == [["a", "b"]]


def test_apps_depend_in_one_direction():
    g = graph()
    levels = [layer if isinstance(layer, tuple) else (layer,) for layer in LAYERS]
    illegal = []
    for i, level in enumerate(levels):
        above = [p for upper in levels[:i] for p in upper]
        siblings = level
        for importer in level:
            for imported in [*above, *(s for s in siblings if s != importer)]:
                if chain := g.find_shortest_chain(importer=importer, imported=imported):
                    illegal.append(" -> ".join(chain))
    assert illegal == []


CODE = [
    p
    for pattern in ("*.py", "*.html", "*.js", "*.css")
    for p in ROOT.glob(f"**/{pattern}")
    # Not virtualenvs (.venv, .venv-tools, ...), .git, or what runs and builds leave behind.
    if not any(
        part.startswith(".") or part in {"var", "node_modules", "build"}
        for part in p.relative_to(ROOT).parts
    )
]


def test_no_source_file_is_over_600_lines():
    """A file past 600 lines holds more than one idea: give the next one a room."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in CODE
        if "migrations" not in p.parts
        and (n := len(p.read_text(errors="replace").splitlines())) > 600
    }
    assert long == {}


DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
SURROGATE_ESCAPE = re.compile(r"\\(?:u|U0000)d[89a-f][0-9a-f]{2}", re.IGNORECASE)


def test_no_docstring_holds_a_lone_surrogate():
    """Python 3.13 cleans docstrings as it compiles them, through UTF-8: a `\\ud800` escape
    in one makes the module fail to import there ("surrogates not allowed"). Write such an
    escape with its backslash doubled in a docstring; in code, as a value, it is fine."""
    # A UTF-8 file cannot hold a surrogate itself: only an escape can write one.
    escaped = [p for p in CODE if p.suffix == ".py" and SURROGATE_ESCAPE.search(p.read_text())]
    lone = [
        f"{p.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}"
        for p in escaped
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, DOCUMENTED)
        and re.search("[\ud800-\udfff]", ast.get_docstring(node, clean=False) or "")
    ]
    assert lone == []


def test_no_comment_cites_a_document_outside_the_repository():
    cited = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in CODE
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if re.search(r"\bSPEC\b(?!TACULAR)", line)
    ]
    assert cited == []


# Comments cite the repository's own documents (docs/design.md, README), never an issue
# tracker the repository does not hold. (Another project's issue, "kombu issue #1551", is
# a citation, not a reference into this one's.) The console's two files below are being
# rewritten beside this test; they lose their citations there.
CITES_AN_ISSUE = re.compile(r"\b[Ii]ssues? \d+")
STILL_CITING = {"console/selectors.py", "tests/console/test_typing_and_phone.py"}


def test_no_comment_cites_an_issue_number():
    citing = {
        str(p.relative_to(ROOT))
        for p in CODE
        if "migrations" not in p.parts and CITES_AN_ISSUE.search(p.read_text(errors="replace"))
    }
    assert citing <= STILL_CITING, sorted(citing - STILL_CITING)


# --- every status moves through its one guarded function ------------------------------------

# The guarded moves of every declared machine (docs/design.md, "Other state machines"), and
# the one SQL statements that lease and settle a dispatch (`actions_lease_dispatch`,
# `action_settle_dispatch`) and settle a reconciled unknown (`action_settle_reconciled`).
GUARDED = {
    "action_move",
    "actions_move_batch",
    "action_settle_dispatch",
    "action_settle_reconciled",
    "actions_lease_dispatch",
    "run_move",
    "force_request_close",
    "approval_consume",
    "approval_revoke",
    "approval_request_close",
    "ledger_set_status_many",
    "delivery_move",
}
STATUS_FIELDS = {"state", "status"}
SET_STATUS_SQL = re.compile(r"\bSET\s+(state|status)\s*=", re.IGNORECASE)


def status_writes(tree) -> list[tuple[str, int]]:
    """(enclosing function, line) of every write of a `state` / `status` column: an ORM
    `.update(state=…)`, a `.save(update_fields=[…"state"…])`, or SQL that SETs one."""
    import ast

    found = []

    def visit(node, where):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            where = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            names = {k.arg for k in node.keywords}
            if node.func.attr == "update" and names & STATUS_FIELDS:
                found.append((where, node.lineno))
            if node.func.attr == "save":
                for k in node.keywords:
                    if k.arg == "update_fields" and isinstance(k.value, ast.List | ast.Tuple):
                        listed = {getattr(e, "value", None) for e in k.value.elts}
                        if listed & STATUS_FIELDS:
                            found.append((where, node.lineno))
        is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_text and SET_STATUS_SQL.search(node.value):
            found.append((where, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "<module>")
    return found


def uses_of(tree, name: str) -> set[str]:
    """The functions in which `name` is read."""
    import ast

    users = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and any(
            isinstance(n, ast.Name) and n.id == name for n in ast.walk(fn)
        ):
            users.add(fn.name)
    return users


def test_every_status_change_goes_through_its_guarded_function():
    import ast

    outside = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            for where, line in status_writes(tree):
                if where == "<module>":  # a SQL constant: judge the functions that run it
                    constant = next(
                        n.targets[0].id
                        for n in tree.body
                        if isinstance(n, ast.Assign) and n.lineno <= line <= n.end_lineno
                    )
                    where = ",".join(sorted(uses_of(tree, constant))) or "<unused>"
                if not set(where.split(",")) <= GUARDED:
                    outside.append(f"{path.relative_to(ROOT)}:{line} in {where}")
    assert outside == []


def test_the_status_scan_sees_each_kind_of_write():
    import ast

    tree = ast.parse(
        "def sneaky():\n"
        "    Run.objects.filter(pk=1).update(status='error')\n"
        "    run.save(update_fields=['status'])\n"
        "    cursor.execute('UPDATE runs_run SET status = %s')\n"
    )
    assert [where for where, _ in status_writes(tree)] == ["sneaky"] * 3


# --- the engine's house ------------------------------------------------------------------------

# What the action engine (`runs/engine/`) may import from the rest of `runs`: the moves and
# the leaves they stand on. Never a person's decisions, replay or proposing: those call the
# engine, not the other way round.
ENGINE_MAY_IMPORT = {"runs.moves", "runs.states", "runs.models", "runs.wakeup"}
ENGINE_NEVER_REACHES = {"runs.decisions", "runs.replay", "runs.propose"}


def engine_modules(g) -> set[str]:
    return {"runs.engine", *g.find_descendants("runs.engine")}


def test_the_engine_imports_only_the_moves_and_leaves_of_runs():
    g = graph()
    engine = engine_modules(g)
    outside = {
        f"{importer} -> {imported}"
        for importer in engine
        for imported in g.find_modules_directly_imported_by(importer)
        if imported.startswith("runs.") and imported not in engine | ENGINE_MAY_IMPORT
    }
    assert outside == set()


def test_nothing_the_engine_imports_leads_to_decisions_replay_or_proposing():
    g = graph()
    chains = [
        " -> ".join(chain)
        for importer in sorted(engine_modules(g))
        for imported in sorted(ENGINE_NEVER_REACHES)
        if (chain := g.find_shortest_chain(importer=importer, imported=imported))
    ]
    assert chains == []


# Console URLs are the console's: domain code names a kind and a subject, and the console
# resolves the link (`console/links.py`). `takeover/` (the settings' login URLs) wires the
# layers and may name them.
CONSOLE_URL = re.compile(r"""["']console:""")


def test_no_code_below_the_console_names_a_console_url():
    naming = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        if package not in {"console", "takeover"}
        for path in (ROOT / package).rglob("*.py")
        if CONSOLE_URL.search(path.read_text())
    }
    assert naming == set()
