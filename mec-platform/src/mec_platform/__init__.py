"""MEC platform: ETSI MEC 011 Mp1 and the platform manager."""

__version__ = "0.1.0"
