"""`lab env`: the manifest printed, or written to --out with one line saying where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.__main__ import main


@pytest.mark.slow
def test_env_out_writes_the_file_and_says_so_without_printing_the_manifest(tmp_path, capsys) -> None:
    out = tmp_path / "env.json"
    assert main(["env", "--out", str(out), "--weights", "random"]) == 0
    printed = capsys.readouterr().out
    assert printed == f"wrote {out}\n"
    assert json.loads(out.read_text())["manifest_version"]


def test_env_writes_manifest(tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.json"
    assert main(["env", "--profile", "smoke", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("torch", "toolchain", "compiler_settings", "inductor_cache_dir", "lab", "container", "packages",
                "weights", "collect_env", "cpu", "gpu"):
        assert key in data, key
    assert data["compiler_settings"]["recompile_limit"]["name"].startswith("torch._dynamo.config.")
    assert data["weights"]["source"] == "random"
