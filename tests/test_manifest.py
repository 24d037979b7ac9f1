"""lab/run/manifest.py: a run records its label, the host's load, the compile cache's state and why it fell back to the host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.__main__ import main as lab_main
from lab.contract.results import load


@pytest.mark.slow
def test_a_run_records_label_load_and_cache_state(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LAB_LABEL", raising=False)
    out = tmp_path / "run"
    assert lab_main(["run", "--profile", "smoke", "--only", "recompiles", "--out", str(out), "--label",
                     "h200 after the driver update"]) == 0
    results = json.loads((out / "results.json").read_text())
    m = results["manifest"]
    assert m["label"] == "h200 after the driver update"
    assert m["host"]["real_hostname"] and len(m["host"]["load_start"]) == 3 and len(m["host"]["load_end"]) == 3
    assert m["compile_cache"]["state"] in ("cold", "warm") and isinstance(m["compile_cache"]["entries"], int)
    assert m["cpu"]["caches"] is None or all(isinstance(v, str) for v in m["cpu"]["caches"].values())
    load(out)  # the schema accepts the new fields


def test_host_fallback_reason_reaches_the_manifest(monkeypatch):
    from lab.run.manifest import container_info

    monkeypatch.setenv("LAB_HOST_FALLBACK", "no_docker: the docker CLI is not on PATH")
    assert container_info()["fallback_reason"].startswith("no_docker:")
