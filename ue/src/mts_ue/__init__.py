"""The UE-side package of the suite: SIGMA (``mts_ue.sigma``), its loader and grant reader."""
