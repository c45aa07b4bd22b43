"""MELD on the emulated RAN: the bed MELD and RAPID share, the experiment, the map-update bench."""
