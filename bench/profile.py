"""`manage.py bench --profile DIR`: py-spy samples every process of the stack during each
measured effects phase (one request each, then two), and the bench prints where each process
group spent its CPU.

py-spy (`pip install py-spy`; not a dependency) attaches to each running process from
outside (`--nonblocking`: the process is never paused), samples only the thread holding the
GIL (`--gil`: a thread waiting on PostgreSQL or a socket, in C, is left out, so the samples
are Python's CPU), and writes collapsed stacks (`--format raw`: one
line per distinct stack, `frame;frame;...;frame count`) to `DIR/<group>-<pid>.txt`, where
a flame graph tool reads them. The summary adds each group's files up: the functions with
the most samples in total (the function and all it called, each function counted once per
stack) and on top of the stack (its own code).

PostgreSQL's side, when the server loads pg_stat_statements (`shared_preload_libraries`;
`Statements` says how otherwise): the statements of the phase with their calls, planning
and execution time per effect, from the extension's counters reset as the phase starts.
"""

from __future__ import annotations

import collections
import contextlib
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

RATE = 250  # samples per second per process: one every 4 ms, finer than an effect's CPU
# The commands' `--profile` option (bench, bench_mcp).
OPTION_HELP = (
    "a folder: py-spy samples every process during the measured phase (bench/profile.py), "
    "and the bench prints where each spent its CPU"
)

# `name (path/to/file.py:123)` → `name (file.py)`: a function's lines are one function.
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^:)]*)(?::\d+)?\)$")


def py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")  # the virtualenv's, not on PATH
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("--profile needs py-spy: pip install py-spy")
    return found


class Profile:
    """`--profile DIR` over a `with` block: py-spy on every process of `stack` (`Profiled`)
    and PostgreSQL's statements (`Statements`); `summary(n, unit)` afterwards, per `unit`
    (`n` of them in the block)."""

    def __init__(self, stack, folder: str | Path):
        self.processes, self.statements = Profiled(stack, folder), Statements()
        self._entered = contextlib.ExitStack()

    def __enter__(self) -> Profile:
        self._entered.enter_context(self.processes)
        self._entered.enter_context(self.statements)
        return self

    def __exit__(self, *exc) -> None:
        self._entered.__exit__(*exc)

    def summary(self, n: int, unit: str = "effect") -> list[str]:
        return [*self.processes.summary(), *self.statements.summary(n, unit)]


class Profiled:
    """py-spy recording each process of `stack` (gunicorn's forked workers included) while
    the `with` block runs; `summary()` afterwards."""

    def __init__(self, stack, folder: str | Path):
        self.stack, self.folder = stack, Path(folder)
        self.recorders: list[subprocess.Popen] = []
        self.files: dict[str, list[Path]] = collections.defaultdict(list)

    def __enter__(self) -> Profiled:
        binary = py_spy()
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, child in self.stack.procs.items():
            group = "workers" if name.startswith("worker") else name
            for pid in child.pids():
                out = self.folder / f"{group}-{pid}.txt"
                self.files[group].append(out)
                self.recorders.append(
                    subprocess.Popen(
                        [
                            *(binary, "record", "--pid", str(pid), "--rate", str(RATE)),
                            *("--nonblocking", "--gil", "--format", "raw", "--output", str(out)),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        return self

    def __exit__(self, *exc) -> None:
        for recorder in self.recorders:  # py-spy writes its file on SIGINT
            recorder.send_signal(signal.SIGINT)
        for recorder in self.recorders:
            try:
                recorder.wait(60)
            except subprocess.TimeoutExpired:
                recorder.kill()
                recorder.wait()

    def summary(self, top: int = 12) -> list[str]:
        lines = []
        for group, files in sorted(self.files.items()):
            total, inclusive, own = 0, collections.Counter(), collections.Counter()
            for path in files:
                if not path.exists():
                    continue
                for line in path.read_text(errors="replace").splitlines():
                    stack, _, count = line.rpartition(" ")
                    if not count.isdigit():
                        continue
                    frames = [_short(f) for f in stack.split(";")]
                    n = int(count)
                    total += n
                    own[frames[-1]] += n
                    for frame in set(frames):
                        inclusive[frame] += n
            if not total:
                continue
            lines.append(f"{group}: {total:,} samples ({', '.join(str(p) for p in files)})")
            lines.append("  total   own  function")
            ranked = sorted(inclusive.items(), key=lambda kv: -kv[1])
            for frame, n in ranked[:top]:
                lines.append(f"  {n / total:5.0%} {own[frame] / total:5.0%}  {frame}")
            lines.append("  own, highest:")
            for frame, n in own.most_common(top):
                lines.append(f"  {n / total:5.0%}  {frame}")
        return lines


class Statements:
    """pg_stat_statements over the `with` block, for the bench's database (the owner's
    connection: creating the extension and resetting it need the owner)."""

    TOP = 10

    def __init__(self):
        from django.db import connections

        self.db = connections["owner"]
        self.loaded, self.rows = False, []

    def __enter__(self) -> Statements:
        with self.db.cursor() as cursor:
            cursor.execute("SHOW shared_preload_libraries")
            self.loaded = "pg_stat_statements" in cursor.fetchone()[0]
            if self.loaded:
                cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                cursor.execute("SELECT pg_stat_statements_reset()")
        return self

    def __exit__(self, *exc) -> None:
        if not self.loaded:
            return
        with self.db.cursor() as cursor:
            cursor.execute(
                r"""
                SELECT s.calls, s.total_plan_time, s.total_exec_time,
                       regexp_replace(left(s.query, 200), '\s+', ' ', 'g')
                FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
                WHERE d.datname = current_database()
                ORDER BY s.total_plan_time + s.total_exec_time DESC
                """
            )
            self.rows = cursor.fetchall()

    def summary(self, effects: int, unit: str = "effect") -> list[str]:
        if not self.loaded:
            return [
                "postgresql: pg_stat_statements is not loaded; to see each statement's time, "
                "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements' and restart "
                "the server (the embedded one: stop it, `make bench` starts it again)"
            ]
        total = sum(plan + run for _, plan, run, _ in self.rows) or 1
        lines = [
            f"postgresql: {total / effects:.3f} ms planning and executing per {unit} "
            "(pg_stat_statements)",
            f"  calls/{unit:<6}  plan ms  exec ms  share  statement (per {unit})",
        ]
        for calls, plan, run, query in self.rows[: self.TOP]:
            lines.append(
                f"  {calls / effects:12.2f}  {plan / effects:7.3f}  {run / effects:7.3f}  "
                f"{(plan + run) / total:5.0%}  {query[:90]}"
            )
        return lines


def _short(frame: str) -> str:
    if m := _FRAME.match(frame.strip()):
        return f"{m['name']} ({m['file'].rsplit('/', 1)[-1]})"
    return frame.strip()
