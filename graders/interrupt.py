"""Ctrl-C ends every `grade` command at any moment with one line and exit status 130.

Python turns SIGINT into a KeyboardInterrupt raised in the main thread wherever it is. Where
that is a finalizer (a `weakref.finalize` callback, a `__del__`, a garbage-collection callback:
the worker client and torch run such code all through a grade), Python prints the exception as
"ignored" and carries on, and the command would finish and write its results as if never
interrupted. So the handler also records the interrupt: the command asks `stop_if_interrupted`
before it writes anything and when it returns, and a guard thread ends the process should the
unwinding not end it within `GRACE_S` (a cleanup stuck on a worker), or should the
KeyboardInterrupt have been lost where nothing asks again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
MESSAGE = "grade: interrupted (Ctrl-C); what had not finished was not written"
# Time the command has, after Ctrl-C, to stop its workers and remove its scratch folders.
GRACE_S = 10.0



class _Interrupt:
    """The Ctrl-C of one command: whether it came, whether the command has ended, the line said."""

    def __init__(self):
        self.requested = threading.Event()
        self.finished = threading.Event()
        self.reported = threading.Lock()

    def on_sigint(self, signum, frame):
        if self.requested.is_set() or self.finished.is_set():
            # A second Ctrl-C: the first is being handled, and the guard bounds how long. Or
            # the command has ended: its status stands, and nothing may raise on the way out.
            return
        self.requested.set()
        threading.Thread(target=self.guard, name="interrupt-guard", daemon=True).start()
        raise KeyboardInterrupt

    def guard(self):
        if not self.finished.wait(GRACE_S):
            self.report()
            os._exit(EXIT_INTERRUPTED)

    def report(self):
        """The one line, once, whoever gets there first (the command or the guard)."""
        if self.reported.acquire(blocking=False):
            sys.stdout.flush()
            print(f"\n{MESSAGE}", file=sys.stderr, flush=True)


_current: _Interrupt | None = None  # the command running in this process, if any


def stop_if_interrupted():
    """Raise KeyboardInterrupt if Ctrl-C came, even where its first KeyboardInterrupt was lost:
    called before a command writes its results."""
    if _current is not None and _current.requested.is_set():
        raise KeyboardInterrupt


def run_command(command, *args) -> int:
    """`command(*args)`'s exit status, or EXIT_INTERRUPTED with the one line after Ctrl-C. SIGINT
    is handled so in the main thread only, where Python delivers signals."""
    global _current
    if threading.current_thread() is not threading.main_thread():
        return command(*args)
    interrupt, outer = _Interrupt(), _current
    previous = signal.signal(signal.SIGINT, interrupt.on_sigint)
    _current = interrupt
    try:
        status = command(*args)
        stop_if_interrupted()  # a KeyboardInterrupt lost in a finalizer ends the same way
        return status
    except KeyboardInterrupt:
        interrupt.report()
        return EXIT_INTERRUPTED
    finally:
        interrupt.finished.set()
        _current = outer
        signal.signal(signal.SIGINT, previous)
