"""lab.contract.notes: the notes the report reads back are declared, checked when written, and read by declaration."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.contract import notes as N
from lab.contract import profiles
from lab.contract.catalogue import BY_ID
from lab.contract.reasons import Code
from lab.contract.results import Record
from lab.run import runner
from lab.run.context import Context

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "manifests" / "reference").glob("*/results.json")) + \
    [ROOT / "tests" / "fixtures" / "report_runs" / "cpu-smoke" / "results.json"]


def _ctx(experiment: str) -> Context:
    record = Record(experiment, experiment, "OK")
    return Context(BY_ID[experiment], profiles.get("smoke"), None, record, SimpleNamespace(experiments=[]), None)


def test_keys_are_made_and_read_by_the_declaration() -> None:
    assert N.ERRORS.key_for(variant="static", batch=8) == "errors.static.b8"
    assert N.BREAK_REASONS.key_for("host-checked", 2) == "break_reasons.host-checked.b2"
    assert N.PARAMETERS.parse("parameters.gpt2-124M") == {"size": "gpt2-124M"}
    assert N.PARAMETERS.parse("parametersXgpt2") is None and N.ERRORS.parse("errors.static") is None
    assert N.CROSSOVERS.entry_for(batch=1, fill=0.5) == "batch 1, fill 0.5"
    assert N.declared("context_scaling", "crossovers") is N.CROSSOVERS
    assert N.declared("cuda_graph_decode", "crossovers") is None  # declared for its writer only
    assert N.declared("graph_buckets", "config") is None  # graph_buckets' config is read by no one


def test_context_note_refuses_a_declared_note_of_the_wrong_shape() -> None:
    ctx = _ctx("context_scaling")
    with pytest.raises(ValueError, match="context_scaling noted 'crossovers', which is declared object"):
        ctx.note("crossovers", ["batch 1"])
    with pytest.raises(ValueError, match="entry 'b1 f0.5' does not follow the declared key pattern"):
        ctx.note("crossovers", {"b1 f0.5": {"how": "", "fixed_over_best_growing": {}}})
    with pytest.raises(ValueError, match="entry 'batch 1, fill 0.5' lacks the declared field\\(s\\) how"):
        ctx.note("crossovers", {"batch 1, fill 0.5": {"fixed_over_best_growing": {}}})
    with pytest.raises(ValueError, match="is declared text"):
        ctx.note("conclusion_rule", 3)
    assert ctx.record.notes == {}
    good = {"batch 1, fill 0.5": {"how": "crossed", "fixed_over_best_growing": {"64": 0.9}}}
    ctx.note("crossovers", good)
    ctx.note("anything else", {"free": ["evidence"]})  # a note nothing reads back keeps any shape
    assert ctx.record.notes == {"crossovers": good, "anything else": {"free": ["evidence"]}}


def test_a_misshapen_note_written_into_the_record_directly_fails_the_experiment(fake) -> None:
    def run(ctx) -> None:
        ctx.record.notes["reasons.f"] = "not a list"
        ctx.note("reasons.g", ["a break"])

    fake("graph_breaks", run)
    profile = profiles.get("smoke")
    record = runner.run_experiment(BY_ID["graph_breaks"], profile, None, SimpleNamespace(experiments=[]), None)
    assert record.status == "FAILED" and record.reason.code is Code.EXCEPTION
    assert record.reason.message.startswith("graph_breaks noted 'reasons.f', which is declared list")
    assert record.notes["reasons.f"] == "not a list"  # kept: nothing measured is lost


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_the_committed_results_write_their_declared_notes_in_the_declared_shape(path: Path) -> None:
    data = json.loads(path.read_text())
    found = set()
    for rec in data["experiments"]:
        assert N.problems(rec["id"], rec.get("notes") or {}) == [], rec["id"]
        found |= {spec.key for k in rec.get("notes") or {} if (spec := N.declared(rec["id"], k)) is not None}
    # a declaration that stops matching what the experiments write is found here, not by an empty report table
    if path.parent.name == "cpu-smoke":
        assert {"conclusion_rule", "crossovers", "ladders", "parameters.{size}", "reasons.{function}"} <= found
    if path.parent.name == "h200-2026-12-02-gpu":
        assert {"config", "cudagraph_skip_reasons.{method}"} <= found


def _spelled_note_reads(path: Path) -> list[str]:
    """`.notes.get(<text>)` or `.notes[<text>]` with the key written out (a literal or an f-string)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "notes" and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "notes":
            key = node.slice
        if isinstance(key, (ast.Constant, ast.JoinedStr)):
            found.append(f"{path.name}:{node.lineno}")
    return found


def _undeclared_note_writes(path: Path) -> list[str]:
    """`.note(key, value)` whose key is not `<notes module>.<a NoteSpec>.key` or `.key_for(...)`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "note"
                and len(node.args) == 2):
            continue
        key = node.args[0]
        spec = key.func.value if isinstance(key, ast.Call) and isinstance(key.func, ast.Attribute) \
            and key.func.attr == "key_for" else key.value if isinstance(key, ast.Attribute) and key.attr == "key" else None
        if not (isinstance(spec, ast.Attribute) and isinstance(spec.value, ast.Name) and spec.value.id in ("N", "notes")
                and isinstance(getattr(N, spec.attr, None), N.NoteSpec)):
            found.append(f"{path.relative_to(path.parents[1]).as_posix()}:{node.lineno}")
    return found


def _sources() -> list[Path]:
    return [p for wing in ("lab", "report") for p in sorted((ROOT / wing).rglob("*.py"))
            if p.parent.name != "contract"]


def test_notes_are_written_and_read_only_through_their_declarations(tmp_path: Path) -> None:
    spelled = [hit for path in _sources() for hit in _spelled_note_reads(path)]
    assert not spelled, f"notes read by a key written out (declare it in lab/contract/notes.py): {spelled}"
    written = [hit for path in _sources() for hit in _undeclared_note_writes(path)]
    assert len(_sources()) > 100 and not written, f"notes written by an undeclared key (lab/contract/notes.py): {written}"
    sample = tmp_path / "x" / "sample.py"  # the walks find what they look for
    sample.parent.mkdir()
    sample.write_text('a = rec.notes.get("ladders")\nb = rec.notes[f"errors.{v}"]\nc = rec.notes.get(N.LADDERS.key)\n'
                      'ctx.note("ladders", {})\nctx.note(f"top.{m}", [])\nctx.note(N.NOPE.key, 1)\n'
                      'ctx.note(N.LADDERS.key, {})\nctx.note(notes.TOP.key_for(m), [])\nindex.note()\n')
    assert _spelled_note_reads(sample) == ["sample.py:1", "sample.py:2"]
    assert _undeclared_note_writes(sample) == ["x/sample.py:4", "x/sample.py:5", "x/sample.py:6"]


@pytest.mark.parametrize("path", COMMITTED + [ROOT / "tests" / "fixtures" / "report_runs" / "h200-fixture" / "results.json"],
                         ids=lambda p: p.parent.name)
def test_every_note_a_run_wrote_is_declared_for_its_writer(path: Path) -> None:
    specs = [v for v in vars(N).values() if isinstance(v, N.NoteSpec)]
    undeclared = [(rec["id"], k) for rec in json.loads(path.read_text())["experiments"] for k in rec.get("notes") or {}
                  if not any(s.written_by(rec["id"]) and s.parse(k) is not None for s in specs)]
    assert not undeclared, undeclared
