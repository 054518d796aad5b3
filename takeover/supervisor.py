"""One process supervisor for whatever starts a stack of child processes: `make run`'s
launcher (takeover/launcher.py) and the load generator of `make bench` and `make soak`
(bench/loadgen.py).

What it promises: the processes it starts die with the process that started them, however
that one dies (Ctrl-C, SIGTERM, SIGKILL, the OOM killer, a terminal closed mid-shutdown).

- Each child leads a process group of its own (a new session): a signal to the group reaches
  everything the child forked (gunicorn's workers), and the terminal's Ctrl-C reaches only
  the supervising process, which stops its children in its own order.
- A **watchdog** process, started with the first child in a session of its own, reads a pipe
  whose write end only the supervising process holds. The supervisor tells it every group
  it starts and every group it has stopped. When the pipe closes without a goodbye, because
  the supervising process died, the watchdog sends SIGTERM to every group still registered,
  SIGKILL after the grace period, and then stops the embedded PostgreSQL the supervising
  process started (if nobody else uses it).
- A **state file** (optional; `make run` keeps `var/run/launcher.json`) names the supervising
  process and its groups, so that the next start finds what an earlier one left behind
  even if the watchdog died too, and stops it (`Leftovers`).

Why not PR_SET_PDEATHSIG: it has to be set in the child between fork and exec (a
`preexec_fn`, unsafe in a process that runs threads, as the launcher does), it fires when
the forking *thread* ends rather than the process, and it reaches the direct child only,
not gunicorn's forked workers.

Nothing here imports Django: the watchdog runs as `python -m takeover.supervisor watch`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --- processes, as /proc sees them ------------------------------------------------------------


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session,
    …), or None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields after it start at the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def process_groups() -> list[tuple[int, int]]:
    """(pid, process group) of every live process (zombies excluded)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := proc_stat(int(name))) and fields[0] != "Z":
            found.append((int(name), int(fields[2])))
    return found


def _session(pid: int) -> int | None:
    fields = proc_stat(pid)
    return int(fields[3]) if fields else None


def group_members(pgid: int) -> list[int]:
    return [pid for pid, group in process_groups() if group == pgid]


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, their children, …)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := proc_stat(int(name))) and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def listener(port: int) -> str | None:
    """Who listens on TCP `port` (any address): "pid N (command line)", or None when
    nothing this user can see does."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # local address is ADDR:PORT in hex; state 0A is LISTEN.
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{name}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{name}/fd/{fd}") in wanted:
                        return f"pid {name} ({cmdline(int(name))[:120]})"
    return None


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop_groups(pgids, grace: float) -> list[int]:
    """SIGTERM to each group, SIGKILL to what is left after `grace` seconds; returns the
    groups that needed the SIGKILL."""
    pgids = [p for p in pgids if group_members(p)]
    for pgid in pgids:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(group_members(p) for p in pgids):
        time.sleep(0.1)
    killed = [p for p in pgids if group_members(p)]
    for pgid in killed:
        signal_group(pgid, signal.SIGKILL)
    return killed


# --- the supervisor ---------------------------------------------------------------------------


@dataclass
class Child:
    """A supervised process: the leader of its own process group."""

    name: str
    argv: list[str]
    process: subprocess.Popen | None = None
    reader: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        """Signal the child's whole process group (gunicorn's workers included)."""
        if self.process is not None:
            signal_group(self.process.pid, signum)

    def pids(self) -> list[int]:
        """Every live process of its group."""
        return group_members(self.process.pid) if self.process is not None else []


class Supervisor:
    """Starts children, stops them in order, and makes sure they die with us.

    `start()` takes either `log_path` (the child's output appended to that file) or
    `on_line` (each line of its output handed to the callback by a reader thread; the
    reader must keep up, or a chatty child blocks on a full pipe).
    """

    def __init__(self, *, cwd: Path = ROOT, state_file: Path | None = None, grace: float = 10):
        self.cwd = cwd
        self.state_file = state_file
        self.grace = grace
        self.children: list[Child] = []
        self.embedded_var_dir: Path | None = None
        self._watchdog: subprocess.Popen | None = None
        self._wrote_state = False
        self._lock = threading.Lock()

    # --- starting -----------------------------------------------------------------------

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict,
        log_path: Path | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> Child:
        self._ensure_watchdog()
        child = Child(name, argv)
        if on_line is not None:
            output = {"stdout": subprocess.PIPE, "text": True, "bufsize": 1, "errors": "replace"}
        else:
            output = {"stdout": open(log_path, "a")}  # noqa: SIM115 -- the child owns it
        try:
            child.process = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **output,
            )
        finally:
            if on_line is None:
                output["stdout"].close()
        if on_line is not None:
            child.reader = threading.Thread(
                target=self._pump, args=(child, on_line), name=f"pump-{name}", daemon=True
            )
            child.reader.start()
        with self._lock:
            self.children.append(child)
            self._tell(f"+ {child.pid} {name}")
            self._save_state()
        return child

    @staticmethod
    def _pump(child: Child, on_line) -> None:
        for raw in child.process.stdout:
            on_line(raw.rstrip("\n"))

    def stop_embedded_postgres_on_death(self, var_dir: Path) -> None:
        """The embedded PostgreSQL under `var_dir` was started by us: if we die, the
        watchdog stops it once our children are gone (unless another process uses it)."""
        self._ensure_watchdog()
        self.embedded_var_dir = var_dir
        with self._lock:
            self._tell(f"pg {var_dir}")
            self._save_state()

    # --- stopping -----------------------------------------------------------------------

    def stop(self, children: list[Child], grace: float | None = None, say=None) -> None:
        """SIGTERM to each child's group, then wait for all of them together; SIGKILL to a
        group whose leader is still there after `grace`, and to every group afterwards (the
        leader may be gone while a forked grandchild lingers)."""
        grace = self.grace if grace is None else grace
        for child in children:
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in children:
            if child.process is None:
                continue
            try:
                child.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                if say is not None:
                    say(f"{child.name} did not stop within {grace:g}s; killing it.")
                child.signal(signal.SIGKILL)
                child.process.wait(5)
            child.signal(signal.SIGKILL)
            self.forget(child)
        for child in children:
            if child.reader is not None:
                child.reader.join(2)

    def kill(self, child: Child) -> None:
        """SIGKILL to the child's whole group, at once."""
        child.signal(signal.SIGKILL)
        if child.process is not None:
            child.process.wait(10)
        self.forget(child)

    def forget(self, child: Child) -> None:
        """The child's group is gone: the watchdog must not signal its number again."""
        with self._lock:
            if child in self.children:
                self.children.remove(child)
                self._tell(f"- {child.pid}")
                self._save_state()

    def close(self) -> None:
        """After stopping every child: dismiss the watchdog (nothing is left for it) and
        remove the state file."""
        with self._lock:
            watchdog, self._watchdog = self._watchdog, None
            if watchdog is not None:
                with contextlib.suppress(OSError):
                    watchdog.stdin.write("bye\n")
                    watchdog.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    watchdog.wait(5)
            if self.state_file is not None and self._wrote_state:
                self.state_file.unlink(missing_ok=True)

    # --- the watchdog and the state file ------------------------------------------------

    def _ensure_watchdog(self) -> None:
        with self._lock:
            if self._watchdog is not None:
                return
            self._watchdog = subprocess.Popen(
                [sys.executable, "-m", "takeover.supervisor", "watch", str(self.grace)],
                cwd=self.cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # out of reach of the terminal's signals
                text=True,
                bufsize=1,
            )

    def _tell(self, line: str) -> None:
        if self._watchdog is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.write(line + "\n")

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        state = {
            "pid": os.getpid(),
            "cmdline": cmdline(os.getpid()),
            "watchdog": self._watchdog.pid if self._watchdog else None,
            "groups": {str(c.pid): c.name for c in self.children},
            "embedded_var_dir": str(self.embedded_var_dir) if self.embedded_var_dir else None,
        }
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n")
        temporary.replace(self.state_file)
        self._wrote_state = True


@dataclass
class Leftovers:
    """What an earlier supervising process recorded in its state file and left behind."""

    owner: int | None  # its pid, if it still runs
    groups: dict[int, tuple[str, list[int]]]  # pgid → (name, live pids)
    embedded_var_dir: Path | None
    watchdog: int | None

    @classmethod
    def read(cls, state_file: Path) -> Leftovers | None:
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return None
        owner = state["pid"] if cmdline(state["pid"]) == state.get("cmdline") else None
        groups = {}
        for pgid, name in state.get("groups", {}).items():
            # Still ours only if the members are in the session that our child opened: a
            # recycled number would not be.
            members = [pid for pid in group_members(int(pgid)) if _session(pid) == int(pgid)]
            if members:
                groups[int(pgid)] = (name, members)
        watchdog = state.get("watchdog")
        alive = watchdog and (proc_stat(watchdog) or ["Z"])[0] != "Z"
        if alive and "takeover.supervisor" not in cmdline(watchdog):
            alive = False
        var_dir = state.get("embedded_var_dir")
        return cls(owner, groups, Path(var_dir) if var_dir else None, watchdog if alive else None)

    def describe(self) -> str:
        return ", ".join(
            f"{name} (pid {', '.join(map(str, pids))})" for name, pids in self.groups.values()
        )

    def stop(self, grace: float) -> None:
        stop_groups(self.groups, grace)
        if self.watchdog:  # it would only find the same groups gone
            signal_group(self.watchdog, signal.SIGKILL)


# --- the watchdog process ---------------------------------------------------------------------


def watch(grace: float) -> None:
    """Read "+ PGID NAME", "- PGID" and "pg VAR_DIR" lines until the pipe closes. A "bye"
    first means the supervisor stopped everything itself; without it, the supervisor died:
    stop what it left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups: dict[int, str] = {}
    var_dirs: list[Path] = []
    farewell = False
    for line in sys.stdin:
        op, _, rest = line.strip().partition(" ")
        if op == "+":
            pgid, _, name = rest.partition(" ")
            groups[int(pgid)] = name
        elif op == "-":
            groups.pop(int(rest), None)
        elif op == "pg":
            var_dirs.append(Path(rest))
        elif op == "bye":
            farewell = True
    if farewell:
        return
    stop_groups(groups, grace)
    for var_dir in var_dirs:
        from takeover.embedded_db import stop_if_unused

        with contextlib.suppress(Exception):
            stop_if_unused(var_dir)


if __name__ == "__main__":
    if sys.argv[1:2] == ["watch"]:
        watch(float(sys.argv[2]))
