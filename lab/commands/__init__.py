"""One module per command of `python -m lab` (see lab/__main__.py)."""
