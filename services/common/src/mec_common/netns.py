"""Run a function inside a named network namespace (``/run/netns/<name>``), in a thread.

A thread that joined the namespace with setns(2) makes its sockets there; they stay in
that namespace and can be used from any thread afterwards, and threads it starts inherit
it (tests run a relay inside a namespace this way; the L4S objects attach tc programs).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a thread inside network namespace ``netns`` and return its result."""
    result: list[Any] = []

    def target() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append((True, fn()))
        except BaseException as exc:
            result.append((False, exc))

    thread = threading.Thread(target=target, name=f"netns-{netns}")
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
