"""The relay: the PEP's data plane threads, split by role.

- ``loop.py``: one relay thread, its epoll loop and a flow's life (accept, handshake,
  connect, relay, close, timeouts); ``Shared`` (what all relay threads share),
  ``RelayCounters``.
- ``conn.py``: ``Conn``, the relay's state of one flow, and its ``Stage``.
- ``handshake.py``: the SOCKS5 and TLV handshakes as state machines that yield the
  destination (no sockets).
- ``pump.py``: one ``Pump`` per direction, the ``Mover`` that splices (or copies) and
  counts; ``pools.py``: the pipes and buffers it borrows while bytes are in flight.
- ``legs.py``: the options of the legs' and listeners' sockets; ``listeners.py``: one
  thread's listeners.
- ``calls.py``: calls from other threads into a relay thread.
- ``descriptors.py``: each relay thread's own descriptor table; ``collector.py``: why
  and how garbage is collected outside the relay threads.

``mec_pep.dataplane.DataPlane`` is the only way in from other threads; extensions see
flows through the hooks of ``mec_pep.flows``.
"""

from mec_pep.relay.conn import Conn, Stage
from mec_pep.relay.loop import Relay, RelayCounters, Shared

__all__ = ["Conn", "Relay", "RelayCounters", "Shared", "Stage"]
