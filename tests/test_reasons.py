"""lab.contract.reasons: every Reason is built from a declared Code, and results.json keeps the code's string."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from lab.contract import results as R
from lab.contract.reasons import Code, Reason

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "lab").rglob("*.py"), *(ROOT / "report").rglob("*.py")])


def _reason_calls() -> list[tuple[str, ast.Call]]:
    calls = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Reason":
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return calls


def test_the_lab_builds_reasons():
    # the walk below would pass on an empty list: make sure it sees the producers (toolchain, containers, driver)
    where = {w.split(":")[0] for w, _ in _reason_calls()}
    assert {"lab/host/toolchain.py", "lab/containers/build.py", "lab/host/driver.py"} <= where


def test_every_reason_is_built_from_a_declared_code():
    """`Reason("literal", ...)` is refused: the first argument is `Code.NAME` (or a variable holding a Code)."""
    literal, undeclared = [], []
    for where, call in _reason_calls():
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "code"), None)
        if isinstance(first, ast.Constant):
            literal.append(where)
        elif isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) and first.value.id == "Code":
            if first.attr not in Code.__members__:
                undeclared.append(f"{where} Code.{first.attr}")
    assert not literal, f"reason codes written as literals: {literal}"
    assert not undeclared, undeclared


def test_a_reason_written_to_results_keeps_the_code_string_and_reads_back_as_a_code(tmp_path):
    manifest = json.loads((ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke" / "manifest.json").read_text())
    rec = R.Record(id="y", title="Y", status="NOT_RUN", reason=Reason(Code.NO_CUDA, "no CUDA device"))
    path = R.save(R.Results(run=R.RunInfo(profile="smoke", started_at="t"), manifest=manifest, experiments=[rec]),
                  tmp_path)
    assert json.loads(path.read_text())["experiments"][0]["reason"] == {"code": "no_cuda", "message": "no CUDA device"}
    code = R.load(tmp_path).record("y").reason.code
    assert type(code) is Code and code is Code.NO_CUDA


@pytest.mark.parametrize("path", sorted((ROOT / "manifests" / "reference").glob("*/results.json")),
                         ids=lambda p: p.parent.name)
def test_the_committed_reference_results_load_with_their_codes_as_codes(path):
    loaded = R.load(path)
    reasons = [r.reason for r in loaded.experiments if r.reason is not None]
    assert all(type(r.code) is Code for r in reasons)
    stored = [e["reason"]["code"] for e in json.loads(path.read_text())["experiments"] if e.get("reason")]
    assert [r.code.value for r in reasons] == stored
