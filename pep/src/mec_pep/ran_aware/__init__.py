"""MELD and RAPID for the PEP's flows, in the kernel through a BPF congestion control.

- ``kernel``: registers ``meld_reno``/``meld_cubic`` (pep/bpf/meld.bpf.c) and talks to
  their pinned maps; ``bpf``: the bpf(2) calls behind it.
- ``feed``: the RNIS consumer that keeps the per-UE radio map fresh; ``radio``: the
  message → map translation (MELD's thresholds, in bytes).
- ``rapid``: RAPID's per-flow windows (WAN leg) and rates (RAN leg).
- ``extension``: the PEP hooks, modes, state, metrics; ``api``: the REST routes.

See docs/meld-rapid.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mec_pep.flows import PepContext, PepExtension


def create_extension(context: PepContext) -> PepExtension:
    """Called by the PEP at start (see ``mec_pep.flows``)."""
    from mec_pep.ran_aware.extension import RanAwareExtension

    return RanAwareExtension(context)
