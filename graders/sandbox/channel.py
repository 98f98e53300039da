"""The grader's ends of a worker's pipes: requests and replies with deadlines, and its output.

Two ways to put a deadline on a pipe:

- `PollingChannel` / `output.OutputTail` (instructor grading, POSIX): non-blocking pipes
  waited on with `select.poll`, in the calling thread.
- `ThreadedChannel` / `ThreadedOutputTail` (a self-check, on any platform): plain blocking
  reads and writes, each pipe served by a thread of its own, waited for with timeouts.
  Windows has neither `select.poll` on pipes nor non-blocking pipes before Python 3.12;
  threads and queues are everywhere. The worker of a self-check writes `marker` to its output
  before every reply, so that the output of a request is complete when its reply is read,
  as with the non-blocking read of `OutputTail`.
"""

from __future__ import annotations

import os
import queue
import threading
import time

import torch

from .protocol import message_buffers, receive_message, send_message, write_message

# How long the output of a request may trail its reply (the marker is written before the
# reply, so this only runs out when the student's code closed or replaced the worker's fd 2).
OUTPUT_SYNC_TIMEOUT_S = 2.0
# What an empty pipe takes without blocking the writer, on every platform (a page: Windows's
# default; Linux and macOS hold more).
EMPTY_PIPE_HOLDS_BYTES = 4096
# How long closing waits for the threads once the worker is dead.
CLOSE_TIMEOUT_S = 5.0
CHUNK = 1 << 16


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class PollingChannel:
    """Non-blocking pipes, waited on with select.poll (the protocol's `deadline`)."""

    def __init__(self, request_fd: int, reply_fd: int, *, max_bytes: int, max_header_bytes: int) -> None:
        os.set_blocking(request_fd, False)
        os.set_blocking(reply_fd, False)
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.max_bytes, self.max_header_bytes = max_bytes, max_header_bytes

    def send(self, header: dict, tensors: dict[str, torch.Tensor], deadline: float) -> None:
        send_message(self.request_fd, header, tensors, deadline=deadline)

    def receive(self, deadline: float) -> tuple[dict, dict[str, torch.Tensor]]:
        return receive_message(self.reply_fd, max_bytes=self.max_bytes, max_header_bytes=self.max_header_bytes,
                               deadline=deadline)

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd):
            os.close(fd)


class ThreadedChannel:
    """Blocking pipes served by a writer and a reader thread. A timeout leaves the thread
    blocked until the worker is killed (its pipes then break); `close` after the kill."""

    def __init__(self, request_fd: int, reply_fd: int, *, max_bytes: int, max_header_bytes: int) -> None:
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self._requests: queue.Queue = queue.Queue()
        self._sent: queue.Queue = queue.Queue()
        self._replies: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write, name="worker-requests", daemon=True)
        self._reader = threading.Thread(target=self._read, args=(max_bytes, max_header_bytes),
                                        name="worker-replies", daemon=True)
        self._writer.start()
        self._reader.start()

    def send(self, header: dict, tensors: dict[str, torch.Tensor], deadline: float) -> None:
        buffers = message_buffers(header, tensors)
        if sum(memoryview(buffer).nbytes for buffer in buffers) <= EMPTY_PIPE_HOLDS_BYTES:
            # The worker read every earlier request before it replied, so the pipe is empty
            # and takes this one whole without blocking: no hand-over to the writer thread.
            write_message(self.request_fd, buffers)
            return
        self._requests.put(buffers)
        try:
            error = self._sent.get(timeout=_remaining(deadline))
        except queue.Empty:
            raise TimeoutError from None
        if error is not None:
            raise error

    def receive(self, deadline: float) -> tuple[dict, dict[str, torch.Tensor]]:
        try:
            outcome, value = self._replies.get(timeout=_remaining(deadline))
        except queue.Empty:
            raise TimeoutError from None
        if outcome == "error":
            self._replies.put((outcome, value))  # the channel is broken for every later read too
            raise value
        return value

    def close(self) -> None:
        self._requests.put(None)
        for thread, fd in ((self._writer, self.request_fd), (self._reader, self.reply_fd)):
            thread.join(CLOSE_TIMEOUT_S)
            if not thread.is_alive():  # else a process still holds the pipe: leave the fd to the thread
                os.close(fd)

    def _write(self) -> None:
        while (buffers := self._requests.get()) is not None:
            try:
                write_message(self.request_fd, buffers)
            except BaseException as error:  # noqa: BLE001 - a broken pipe: the worker is gone
                self._sent.put(error)
            else:
                self._sent.put(None)

    def _read(self, max_bytes: int, max_header_bytes: int) -> None:
        while True:
            try:
                message = receive_message(self.reply_fd, max_bytes=max_bytes, max_header_bytes=max_header_bytes)
            except BaseException as error:  # noqa: BLE001 - EOF, a malformed message: the caller decides
                self._replies.put(("error", error))
                return
            self._replies.put(("ok", message))


class ThreadedOutputTail:
    """The worker's stdout and stderr, drained by a thread with blocking reads; keeps a bounded
    tail of each request's output. The output of one request ends at the next `marker`."""

    def __init__(self, fd: int, limit: int, marker: bytes) -> None:
        self._fd, self._limit, self._marker = fd, limit, marker
        self._pending = bytearray()  # read, not yet attributed to a request
        self._omitted = 0
        self._finished: list[tuple[bytes, int]] = []  # (text, bytes omitted) of requests whose marker came
        self._eof = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._drain, name="worker-output", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """The output of the request whose reply was just read."""
        with self._changed:
            self._changed.wait_for(lambda: self._finished or self._eof, OUTPUT_SYNC_TIMEOUT_S)
            if self._finished:
                return _render(*self._finished.pop(0))
            return self._take_pending()

    def close(self, timeout: float) -> str:
        """Wait (up to `timeout`) for every writer to be gone; return everything not taken."""
        self._thread.join(timeout)
        with self._changed:
            text = "".join(_render(*entry) for entry in self._finished) + self._take_pending()
            self._finished.clear()
        if not self._thread.is_alive():
            os.close(self._fd)
        return text

    def _take_pending(self) -> str:
        text = _render(bytes(self._pending), self._omitted)
        self._pending.clear()
        self._omitted = 0
        return text

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, CHUNK)
            except OSError:
                chunk = b""
            with self._changed:
                if not chunk:
                    self._eof = True
                    self._changed.notify_all()
                    return
                self._pending += chunk
                while (end := self._pending.find(self._marker)) >= 0:
                    self._finished.append(_bounded(bytes(self._pending[:end]), self._omitted, self._limit))
                    del self._pending[:end + len(self._marker)]
                    self._omitted = 0
                # Bounded without a marker in sight; what stays can still hold a marker's start.
                excess = len(self._pending) - max(self._limit, len(self._marker))
                if excess > 0:
                    del self._pending[:excess]
                    self._omitted += excess
                self._changed.notify_all()


def _bounded(data: bytes, omitted: int, limit: int) -> tuple[bytes, int]:
    excess = max(0, len(data) - limit)
    return data[excess:], omitted + excess


def _render(data: bytes, omitted: int) -> str:
    text = data.decode("utf-8", "replace")
    return f"[... {omitted} earlier bytes of output omitted ...]\n{text}" if omitted else text


def new_marker() -> bytes:
    """A marker no student prints by chance."""
    return b"\x00grader-output-end:" + os.urandom(12).hex().encode() + b"\x00"

