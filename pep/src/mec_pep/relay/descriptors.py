"""Each relay thread's own descriptor table.

One table holds at most ``RLIMIT_NOFILE`` descriptors (20,000 here, and the hard limit
cannot be raised without ``CAP_SYS_RESOURCE``) and a flow needs two sockets, so every
relay thread unshares its table (``unshare(CLONE_FILES)``) and the PEP holds more flows
with more threads. The price: a descriptor number means different things in a relay
thread and in the rest of the process. Hence the rules of ``flows.py`` (a flow's sockets
only in its relay thread), ``calls.py`` (other threads reach a relay through calls) and
``collector.py`` (no garbage collection in a relay thread).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import stat
from pathlib import Path

CLONE_FILES = 0x400
# Logged once by either relay when its threads keep the process's table.
SHARED_TABLE = ("relay threads share the process's descriptor table: unshare(CLONE_FILES) "
                "refused (a seccomp profile without SYS_ADMIN); all flows count against one "
                "RLIMIT_NOFILE")  # fmt: skip
_libc = ctypes.CDLL(None, use_errno=True)


def own_descriptor_table(keep: int) -> bool:
    """Give the calling thread a private copy of the descriptor table; False if the
    system refuses (EPERM): the thread then keeps the process's table.

    Descriptors that existed before (BPF maps of an extension, the relay's wake eventfd
    ``keep``) stay usable here. Copies of sockets and pipes are closed: they would keep
    another thread's connections open, or a subprocess's pipe from ever reaching EOF.

    Refused under a container runtime's default seccomp profile without ``SYS_ADMIN``
    (containerd's and Docker's ``RuntimeDefault``: seen on a Kubernetes node). A shared
    table is correct, only smaller: every relay thread's flows then count against one
    ``RLIMIT_NOFILE``.
    """
    if _libc.unshare(CLONE_FILES) != 0:
        err = ctypes.get_errno()
        if err == errno.EPERM:
            return False
        raise OSError(err, f"unshare(CLONE_FILES): {os.strerror(err)}")
    for entry in Path("/proc/thread-self/fd").iterdir():
        fd = int(entry.name)
        if fd <= 2 or fd == keep:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue  # the descriptor listdir itself used
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
            os.close(fd)
    return True


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE to the hard limit: a flow needs 2 sockets and up to 4 pipe ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard
