"""L4S and passive per-flow RTT (issue 14, research 001): spin and delay bits over TCP."""
