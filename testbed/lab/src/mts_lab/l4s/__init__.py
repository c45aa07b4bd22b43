"""L4S and passive RTT: beds and experiments (issue 14)."""
