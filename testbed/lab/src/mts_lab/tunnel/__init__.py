"""The multipath tunnel: the two-namespace bed, the benchmark (docs/tunnel.md)."""
