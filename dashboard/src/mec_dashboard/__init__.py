"""Live web dashboard of the MEC host (docs/dashboard.md)."""

__version__ = "0.1.0"
