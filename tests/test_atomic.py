"""lab/atomic.py: result files are written whole and readable by others (not mkstemp's 0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lab.contract import profiles
from lab.run import runner

from cli_helpers import one_graph

SMOKE = profiles.get("smoke")


def test_result_files_are_readable_by_others(tmp_path: Path, fake) -> None:
    """Problem 10: results.json and manifest.json were created 0600 (mkstemp's mode)."""
    fake("graph_breaks", one_graph)
    old = os.umask(0o022)
    try:
        runner.run(SMOKE, tmp_path / "run", only=["graph_breaks"])
        from lab.atomic import write_json_atomic

        write_json_atomic(tmp_path / "env.json", {"a": 1})
    finally:
        os.umask(old)
    for path in (tmp_path / "run" / "results.json", tmp_path / "run" / "manifest.json", tmp_path / "env.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
