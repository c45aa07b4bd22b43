"""Pipes and buffers lent to a pump only while bytes are in flight (an idle flow holds none)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class PipePool:
    """Pipes of one size, reused so that a flow holds a pipe only while data is in it."""

    def __init__(self, size: int, keep: int = 256) -> None:
        self.size = size
        self._keep = keep
        self._free: list[tuple[int, int]] = []
        self.in_use = 0

    def get(self) -> tuple[int, int]:
        self.in_use += 1
        if self._free:
            return self._free.pop()
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, self.size)
        except PermissionError:
            # Above fs.pipe-max-size without CAP_SYS_RESOURCE: take the largest allowed.
            limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
            self.size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, min(self.size, limit))
        return r, w

    def put(self, pipe: tuple[int, int], *, empty: bool) -> None:
        self.in_use -= 1
        if empty and len(self._free) < self._keep:
            self._free.append(pipe)
        else:
            os.close(pipe[0])
            os.close(pipe[1])

    def close(self) -> None:
        for r, w in self._free:
            os.close(r)
            os.close(w)
        self._free.clear()


class BufferPool:
    """User-space buffers for the copy method, lent to a pump only while data is in flight."""

    def __init__(self, size: int, keep: int = 256) -> None:
        self.size = size
        self._keep = keep
        self._free: list[memoryview] = []
        self.in_use = 0

    def get(self) -> memoryview:
        self.in_use += 1
        return self._free.pop() if self._free else memoryview(bytearray(self.size))

    def put(self, buf: memoryview) -> None:
        self.in_use -= 1
        if len(self._free) < self._keep:
            self._free.append(buf)
