"""A value made once per process, on first use: a daemon thread, an event loop, an HTTP
client.

gunicorn may fork after import: a thread started in the parent does not exist in the child,
and a client built there shares its sockets with it. So the value belongs to the process
that made it, and a forked child makes its own on first use."""

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make
        self.lock = threading.Lock()
        self.value: T | None = None
        self.pid: int | None = None

    def get(self) -> T:
        """This process's value, made now (once, whatever the threads racing) if need be."""
        if self.pid != os.getpid():
            with self.lock:
                if self.pid != os.getpid():
                    self.value = self.make()
                    self.pid = os.getpid()
        return self.value

    def made_here(self) -> T | None:
        """This process's value if it was made, else None; makes nothing."""
        return self.value if self.pid == os.getpid() else None

    def forget(self) -> None:
        """The next `get` makes a new value."""
        with self.lock:
            self.value, self.pid = None, None
