"""report/site/discover.py: a hostile results.json is skipped by name, the other runs still render."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.run.manifest import REPO_ROOT

from cli_helpers import cli

FIXTURE_RUN = REPO_ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke"


def _corrupt(root: Path, name: str, edit) -> Path:
    run = root / name
    run.mkdir(parents=True)
    data = (FIXTURE_RUN / "results.json").read_bytes()
    (run / "results.json").write_bytes(edit(data))
    return run / "results.json"


def _json_edit(fn):
    def edit(data: bytes) -> bytes:
        raw = json.loads(data)
        fn(raw)
        return json.dumps(raw).encode()

    return edit


def _first_number(raw) -> None:
    for rec in raw["experiments"]:
        for m in rec["metrics"]:
            if isinstance(m["value"], float):
                m["value"] = "HUGE"
                return


@pytest.mark.slow
def test_report_skips_every_hostile_file_by_name_and_renders_the_rest(tmp_path: Path, capsys) -> None:
    """Problems 3-4: one undecodable file or one field of an unexpected type aborted the whole report."""
    runs = tmp_path / "runs"
    bad = {
        "binary": _corrupt(runs, "binary", lambda d: b"\x00\xff\xfe" + d[:100]),
        "latin1": _corrupt(runs, "latin1", lambda d: d.decode().replace('"vm"', '"v\u00e9m"').encode("latin-1",
                                                                                                   "replace")),
        "host": _corrupt(runs, "host", _json_edit(lambda r: r["manifest"].__setitem__("host", "vm"))),
        "smi": _corrupt(runs, "smi", _json_edit(lambda r: r["manifest"]["gpu"].__setitem__("nvidia_smi", "x"))),
        "huge": _corrupt(runs, "huge", lambda d: _json_edit(_first_number)(d).replace(b'"HUGE"', b"1e400")),
        "deep": _corrupt(runs, "deep", lambda d: b"[" * 100_000 + b"]" * 100_000),
        "records": _corrupt(runs, "records", _json_edit(lambda r: r.__setitem__("experiments", {"a": 1}))),
        "nan": _corrupt(runs, "nan", lambda d: _json_edit(_first_number)(d).replace(b'"HUGE"', b"NaN")),
        "nested": _corrupt(runs, "nested", _json_edit(
            lambda r: r["experiments"][0]["notes"].__setitem__("deep", json.loads("[" * 600 + "]" * 600)))),
    }
    good = runs / "good"
    good.mkdir()
    (good / "results.json").write_bytes((FIXTURE_RUN / "results.json").read_bytes())
    out = tmp_path / "site"
    rc, err = cli(capsys, "report", str(runs), "--out", str(out))
    assert rc == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == len(bad) and all(len(ln) < 500 for ln in lines), err
    for name, path in bad.items():
        assert any(str(path) in ln for ln in lines), (name, err)
    assert "field manifest.host" in err and "field manifest.gpu.nvidia_smi" in err and "not UTF-8" in err
    assert "NaN is not a JSON value" in err
    assert "Traceback" not in err and (out / "index.html").exists()
    assert len(list(out.glob("run-*.html"))) == 1
