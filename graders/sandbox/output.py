"""Draining the worker's stdout and stderr, keeping only a bounded tail.

Both go to one pipe (so the order is the one the student would see in a terminal), drained by a
thread so that a student who prints without end neither blocks nor fills the grader's memory.
"""

from __future__ import annotations

import os
import select
import threading

CHUNK = 1 << 16


class OutputTail:
    def __init__(self, fd: int, limit: int) -> None:
        self._fd = fd
        self._limit = limit
        self._tail = bytearray()
        self._omitted = 0
        self._eof = False
        self._lock = threading.Lock()
        os.set_blocking(fd, False)
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._drain_until_eof, name="sandbox-output", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """What was printed since the last `take`. Whatever the worker wrote before its reply
        is already in the pipe, so reading what is there now catches all of it."""
        with self._lock:
            self._read_available()
            text = self._tail.decode("utf-8", "replace")
            if self._omitted:
                text = f"[... {self._omitted} earlier bytes of output omitted ...]\n{text}"
            self._tail.clear()
            self._omitted = 0
            return text

    def close(self, timeout: float) -> str:
        """Wait (up to `timeout`) for every writer to be gone, then stop and return the rest."""
        self._thread.join(timeout)
        os.write(self._wake_write, b"x")
        self._thread.join()
        text = self.take()
        for fd in (self._fd, self._wake_read, self._wake_write):
            os.close(fd)
        return text

    def _drain_until_eof(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            with self._lock:
                self._read_available()
                if self._eof or self._wake_read in ready:
                    return

    def _read_available(self) -> None:
        while not self._eof:
            try:
                chunk = os.read(self._fd, CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                self._eof = True
                return
            self._tail += chunk
            excess = len(self._tail) - self._limit
            if excess > 0:
                del self._tail[:excess]
                self._omitted += excess
