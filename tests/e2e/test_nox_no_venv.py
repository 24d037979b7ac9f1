"""`nox -s gpu_lab --no-venv` on a host without network and without Docker (the H200's situation).

nox runs with this interpreter; PATH holds no docker (only a python3), pip's index points at a
closed port and proxies too, so any download would fail the session. The session must install
nothing, fall back to the host saying why, and record the reason in the manifest. Only `toolchain`
runs (the gpu profile's other experiments need CUDA; the point is the session, not the lab).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_lab_runs_offline_without_a_virtualenv(tmp_path: Path) -> None:
    pytest.importorskip("nox")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    closed = "http://127.0.0.1:9"
    env = {"HOME": str(tmp_path), "PATH": str(bin_dir), "PIP_NO_INDEX": "1", "PIP_INDEX_URL": f"{closed}/simple",
           "http_proxy": closed, "https_proxy": closed, "HTTP_PROXY": closed, "HTTPS_PROXY": closed,
           "PYTHONDONTWRITEBYTECODE": "1", **({"TMPDIR": os.environ["TMPDIR"]} if "TMPDIR" in os.environ else {})}
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "gpu_lab", "--no-venv",
                           "--", "--only", "toolchain", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "nothing installed" in log and "pip install" not in log
    assert "running on the host, not in a container: no_docker" in log
    results = json.loads((out / "results.json").read_text())
    assert [(r["id"], r["status"]) for r in results["experiments"]] == [("toolchain", "OK")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["container"]["fallback_reason"].startswith("no_docker")
    assert "Creating virtual environment" not in log
