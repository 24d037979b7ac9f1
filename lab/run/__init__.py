"""The run wing: a run directory, its manifest, the runner that records every experiment, child processes."""
