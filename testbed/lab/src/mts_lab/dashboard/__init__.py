"""The dashboard in a real browser: the headless Chromium both its test and its bench use."""
