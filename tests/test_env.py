"""`lab env`: the manifest printed, or written to --out with one line saying where."""

from __future__ import annotations

import json

from lab.__main__ import main


def test_env_out_writes_the_file_and_says_so_without_printing_the_manifest(tmp_path, capsys) -> None:
    out = tmp_path / "env.json"
    assert main(["env", "--out", str(out), "--weights", "random"]) == 0
    printed = capsys.readouterr().out
    assert printed == f"wrote {out}\n"
    assert json.loads(out.read_text())["manifest_version"]
