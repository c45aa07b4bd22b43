"""The control's clock and timers in a service: the monotonic clock, one timer thread."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from mec_common.logging import get_logger

log = get_logger(__name__)


class RealTimeScheduler:
    """``call_at`` on the monotonic clock, run by one thread; never early."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="pm-timers", daemon=True)
        self._thread.start()

    def __call__(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), callback))
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(2.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stop:
                    return
                _, _, callback = heapq.heappop(self._heap)
            try:
                callback()
            except Exception:
                log.exception("timer callback failed")
