"""pyproject.toml's pytest settings: a failing test shows its failure, not torch's debug logs; the slow marker is used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.run.manifest import REPO_ROOT


FAILING_TEST = """
import torch

def test_fails_after_compiling():
    torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(3))
    assert False, "the failure the reader should see"
"""


@pytest.mark.slow
def test_a_failing_test_shows_its_failure_not_torch_debug_logs(tmp_path: Path) -> None:
    """Problem 11: a failure carried ~950 lines of torch's DEBUG trace logging (pytest captured torch.__trace)."""
    test = tmp_path / "test_fails.py"
    test.write_text(FAILING_TEST)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                          str(REPO_ROOT / "pyproject.toml"), "--rootdir", str(REPO_ROOT), str(test)],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert "1 failed" in out.stdout and "the failure the reader should see" in out.stdout
    assert "DEBUG" not in out.stdout and "torch.__trace" not in out.stdout, out.stdout[-3000:]


def test_slow_tests_are_marked_and_the_quick_command_is_documented() -> None:
    """The `slow` marker was declared but never used: `-m "not slow"` must leave the heavy tests out."""
    slow = [p.name for p in (REPO_ROOT / "tests").rglob("test_*.py") for _ in
            range(p.read_text().count("@pytest.mark.slow\n"))]
    assert len(slow) >= 10 and len(set(slow)) >= 5, slow
    assert 'nox -s tests -- -m "not slow"' in (REPO_ROOT / "README.md").read_text()
