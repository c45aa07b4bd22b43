"""Transparent mode's interception rules (nftables TPROXY), from the PEP's settings.

The PEP intercepts TCP from its allowed clients to its allowed destinations (optionally
only some ports and input interfaces) and owns one nftables table. It records what it
installed in ``<state_dir>/pep-tproxy-<table>-<netns>.json`` and removes leftovers of a
crashed run at the next start. With a MEC platform, the platform's data-plane agent may
install the rules from the PEP app's traffic rules instead (``PEP_TPROXY_INSTALL_RULES=false``).
"""

from __future__ import annotations

from pathlib import Path

from mec_common.logging import get_logger
from mec_common.tproxy import Installed, Intercept, Runner, TproxySetup, cleanup, install, remove
from mec_pep.config import PepSettings

log = get_logger(__name__)


def tproxy_setup(settings: PepSettings, port: int) -> TproxySetup:
    """Deny by default: with no allowed clients or destinations nothing is intercepted."""
    s = settings
    intercepts: tuple[Intercept, ...] = ()
    if s.allowed_clients and s.allowed_destinations:
        intercepts = (
            Intercept(
                sources=tuple(s.allowed_clients),
                destinations=tuple(s.allowed_destinations),
                ports=tuple(s.tproxy_ports),
                interfaces=tuple(s.tproxy_interfaces),
            ),
        )
    return TproxySetup(s.tproxy_nft_table, port, s.tproxy_mark, s.tproxy_table, intercepts)


class TransparentRules:
    def __init__(self, settings: PepSettings, runner: Runner | None = None) -> None:
        self.settings = settings
        self.runner = runner or Runner()
        netns = Path("/proc/thread-self/ns/net").stat().st_ino
        name = f"pep-tproxy-{settings.tproxy_nft_table}-{netns}.json"
        self.state_file: Path = settings.state_dir / name
        self.installed: TproxySetup | None = None

    def remove_leftovers(self) -> None:
        if cleanup(self.state_file, self.runner) is not None:
            log.warning("removed TPROXY rules left by a previous run")

    def apply(self, port: int) -> TproxySetup:
        setup = tproxy_setup(self.settings, port)
        install(setup, self.runner, self.state_file)
        self.installed = setup
        return setup

    def remove(self) -> None:
        if self.installed is None:
            return
        s = self.installed
        remove(Installed(s.table, s.mark, s.route_table), self.runner)
        self.state_file.unlink(missing_ok=True)
        self.installed = None
        log.info("TPROXY rules removed", table=s.table)
