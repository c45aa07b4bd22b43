"""Emulated RAN testbed: namespaces, the RAN emulator, experiments"""
