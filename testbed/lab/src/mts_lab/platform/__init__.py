"""The MEC platform bench (Mp1 discovery and notification fan-out)."""
