"""RAPID on the emulated RAN (thesis Table 5.3), on the MELD bed."""
