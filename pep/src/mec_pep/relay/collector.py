"""Cyclic garbage collection kept out of the relay threads.

The defect this prevents. CPython (3.11 here) runs an automatic collection synchronously
in whichever thread's allocation takes generation 0 over its threshold, and that thread
runs the finalizers of every unreachable object the collection finds, whoever made it. A
socket's finalizer closes its descriptor *by number* (``close(fd)``). Every relay thread
has a private descriptor table (``unshare(CLONE_FILES)``, ``descriptors.py``): the
numbers of the process's other sockets and pipes (uvicorn's, pika's, a test's) were
closed in it at start and are reused there by the relay's own epoll, listeners, pipes
and flow sockets. So the garbage of another thread collected in a relay thread closes one
of the relay's descriptors: seen on a CI run, the relay's epoll was closed (EBADF) and the
relay thread died. Relay garbage collected in another thread would, likewise, close a descriptor of
the process's table.

The guard. While a data plane runs, automatic collection is off (``gc.disable()`` is
process-wide) and one thread that shares the process's descriptor table, ``pep-gc``, runs
the collections the interpreter would have run: generation 0 once its count passes the
threshold, an older generation when its count passes its own (the counts and thresholds
are the interpreter's, so ``gc.set_threshold`` still applies). The count is sampled, so a
burst of objects made and freed between two samples is not seen, where the interpreter
would have collected in the middle of it; so generation 0 is also collected when it has
waited ``YOUNG_WAIT_S``, and garbage waits at most that long. The interpreter's extra
rule for a full collection (it waits until the survivors pending promotion reach 25 % of
the old generation) is not visible from Python; here a full collection instead waits
for at least ``FULL_SPACING`` times the duration of the previous one, so collecting a
large flow table never takes more than ~2 % of a core. A relay thread thus never runs a
finalizer through the garbage collector.

What the guard does not cover: an object freed by reference counting runs its finalizer
in the thread that drops the last reference. The relay closes every descriptor it owns
explicitly, never through a finalizer, and the only foreign objects a relay thread drops
are the calls posted to it (``DataPlane``), which hold no descriptors.
"""

from __future__ import annotations

import gc
import threading
import time

from mec_common.logging import get_logger

log = get_logger(__name__)

POLL_S = 0.05  # how often the collector thread looks at the counts
YOUNG_WAIT_S = 1.0  # generation 0 collected at least this often (when not empty)
FULL_SPACING = 50.0  # a full collection waits >= this many times the last one's duration


class GarbageCollector:
    """The process's cyclic garbage collection, run in ``pep-gc`` while any user holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._was_enabled = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_full = 0.0  # monotonic time before which no full collection runs
        self._next_young = time.monotonic() + YOUNG_WAIT_S  # generation 0 due by then

    @property
    def active(self) -> bool:
        return self._thread is not None

    def acquire(self) -> None:
        """Take collection away from every other thread (before any relay thread starts)."""
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
            self._was_enabled = gc.isenabled()
            gc.disable()
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="pep-gc", daemon=True
            )
            self._thread.start()

    def release(self) -> None:
        """The last user gone (its relay threads stopped): automatic collection as before."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._thread is None:
                return
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self._was_enabled:
                gc.enable()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_S):
            if gc.isenabled():  # something turned automatic collection back on
                gc.disable()
                log.warning("automatic garbage collection was re-enabled; disabled again")
            try:
                self.collect_due()
            except Exception:
                log.exception("garbage collection failed")

    def collect_due(self) -> int | None:
        """Collect the oldest generation whose count passed its threshold; its number."""
        threshold = gc.get_threshold()
        count = gc.get_count()
        now = time.monotonic()
        if threshold[0] == 0:  # gc.set_threshold(0): collection is off
            return None
        if count[0] <= threshold[0] and not (count[0] > 0 and now >= self._next_young):
            return None
        generation = 1 if count[1] > threshold[1] else 0
        if count[2] > threshold[2] and now >= self._next_full:
            generation = 2
        started = time.perf_counter()
        gc.collect(generation)
        self._next_young = now + YOUNG_WAIT_S
        if generation == 2:
            self._next_full = now + FULL_SPACING * (time.perf_counter() - started)
        return generation


collector = GarbageCollector()
