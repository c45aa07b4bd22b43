"""Split-connection TCP PEP with MELD/RAPID through a BPF congestion control"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mec-pep")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"
