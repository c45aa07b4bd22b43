"""Calls from other threads into a relay thread (the only way to touch its descriptors).

An eventfd, created before the relay thread makes its own descriptor table and so valid
in both, wakes the relay's epoll; the relay runs the queued calls in order and settles
their futures.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from mec_common.logging import get_logger

log = get_logger(__name__)


class CallQueue:
    def __init__(self) -> None:
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._calls: list[tuple[Callable[[], Any], Future[Any] | None]] = []
        self._lock = threading.Lock()
        self.closed = False  # no more calls are taken

    def put(self, fn: Callable[[], Any], future: Future[Any] | None) -> None:
        """Queue ``fn`` (its result or exception goes to ``future``; none: logged)."""
        if self.closed:
            raise RuntimeError("relay stopped")
        with self._lock:
            self._calls.append((fn, future))
        os.eventfd_write(self.wake_fd, 1)

    def run_pending(self) -> None:
        """In the relay thread: run what is queued."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.wake_fd)
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, future in calls:
            try:
                result = fn()
            except BaseException as exc:
                if future is None:
                    log.exception("posted call failed")
                else:
                    future.set_exception(exc)
            else:
                if future is not None:
                    future.set_result(result)

    def close(self) -> None:
        """Take no more calls and wake the relay (which then leaves its loop)."""
        self.closed = True
        os.eventfd_write(self.wake_fd, 1)

    def release(self) -> None:
        """Close the eventfd (the relay thread has ended)."""
        os.close(self.wake_fd)
