"""The lab: everything that measures the suite, none of which is installed into a service image.

One home per kind of work, by the component it measures:

- ``mts_lab.<component>.experiment``: an experiment (``make experiment-*``), on the emulated RAN.
- ``mts_lab.<component>.bench``: a benchmark (``make bench-*``).
- ``mts_lab.meld.bed``: the MELD/RAPID bed (emulated RAN, RNIS adapter, PEP) the MELD and
  RAPID experiments share; ``mts_lab.line``: the three-namespace line of the PEP's tests and bench.
- ``mts_lab.pathmgr.simulate`` / ``study`` / ``montecarlo``: the path manager's simulation study.
- ``mts_lab.traffic``: the one content server and downloader (and UDP probe) every experiment uses.
- ``mts_lab.run``: ``make run``, the whole system on the emulated RAN.
- ``mts_lab.results``: how every bench and experiment leaves its JSON, PNG and table.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
"""The repository root (the lab runs from a checkout: it reads configs and writes docs/results)."""
