"""The RAN emulator bench (capacity, TTI lateness)."""
