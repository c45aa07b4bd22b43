"""Benchmarks and experiments of the PEP's relay (split TCP)."""
