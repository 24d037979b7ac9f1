"""Example targets for `python -m lab diagnose` (see docs/diagnose.md for the TARGET form)."""
