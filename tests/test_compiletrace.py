"""Compile traces: torch's structured trace captured in-process, summarised (recompile and break reasons), kept
small (metadata, pruned tlparse pages), registered in the record; tlparse's absence is a listed skip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from lab.measure import compiletrace as T
from lab.contract import profiles
from lab.contract.catalogue import BY_ID
from lab.contract.reasons import Code
from lab.contract.results import Record
from lab.run.context import Context


def _breaks_and_recompiles(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("", end="")  # a graph break
    return y + 1


def _ctx(tmp_path: Path) -> Context:
    rec = Record(id="model_scaling", title="", status="OK")
    return Context(BY_ID["model_scaling"], profiles.get("smoke"), None, rec, None, None, out_dir=tmp_path)


def _compile_twice() -> None:
    torch._dynamo.reset()
    fn = torch.compile(_breaks_and_recompiles, backend="eager", dynamic=False)
    fn(torch.ones(3))
    fn(torch.ones(5))  # a second shape: a recompile


def test_trace_is_summarised_kept_small_and_registered(tmp_path: Path, monkeypatch) -> None:
    ctx = _ctx(tmp_path)
    monkeypatch.setattr(T, "tlparse_path", lambda: None)
    with T.traced(ctx, "probe item"):
        _compile_twice()
    info = ctx.record.notes["compile_traces"]["probe item"]
    folder = tmp_path / info["path"]
    assert info["path"] == "traces/model_scaling/probe-item" and not info["tlparse"]
    summary = json.loads((folder / "summary.json").read_text())
    assert info["compile_count"] == len(summary["per_compile"]) >= 3 and info["recompile_count"] >= 1
    assert info["graph_break_count"] >= 1 and any("print" in b or "builtin" in b
                                                  for c in summary["per_compile"] for b in c["graph_breaks"])
    reasons = [r for c in summary["per_compile"] for r in c["recompile_reasons"]]
    assert any("size mismatch" in r or "expected 3" in r for r in reasons), reasons
    assert all("metrics" in c and c["status"] in ("ok", "break") for c in summary["per_compile"])
    lines = gzip.decompress((folder / "metadata.jsonl.gz").read_bytes()).decode().splitlines()
    assert lines and all(len(line) <= 2 * T.MAX_SMALL_PAYLOAD + 200 for line in lines)
    assert [s.code for s in ctx.record.skipped] == [Code.NO_TLPARSE]  # said once, with how to get it
    with T.traced(ctx, "again"):
        _compile_twice()
    assert [s.code for s in ctx.record.skipped] == [Code.NO_TLPARSE]
    import torch._logging._internal as internal

    assert internal.LOG_TRACE_HANDLER is not None and all(
        getattr(h, "root_dir", None) is None for h in internal.trace_log.handlers)  # torch's own handler is back


@pytest.mark.parametrize("planted", ["traces", "traces/model_scaling/probe-item/summary.json"])
def test_a_trace_is_never_written_through_a_link_left_in_the_run_folder(tmp_path: Path, monkeypatch,
                                                                        planted: str) -> None:
    """Issue 30, the write rule: a resumed run folder holding `traces -> elsewhere` (or a link for one of the
    trace's files) wrote the trace outside it."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    (run / planted).parent.mkdir(parents=True)
    outside.mkdir()
    (outside / "victim.json").write_text("mine")
    (run / planted).symlink_to(outside if planted == "traces" else outside / "victim.json")
    ctx = _ctx(run)
    monkeypatch.setattr(T, "tlparse_path", lambda: None)
    with T.traced(ctx, "probe item"):
        _compile_twice()
    assert sorted(p.name for p in outside.iterdir()) == ["victim.json"] and (outside / "victim.json").read_text() == \
        "mine"
    if planted == "traces":  # not written: a note says why, the measurement stands
        assert "a symbolic link in the run folder" in ctx.record.notes["compile_trace_errors"]["probe item"]
    else:  # the link is replaced by the trace's own file
        assert not (run / planted).is_symlink() and json.loads((run / planted).read_text())["per_compile"]


def test_nothing_is_kept_outside_a_run(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.out_dir = None
    with T.traced(ctx, "x"):
        _compile_twice()
    assert "compile_traces" not in ctx.record.notes and not any(tmp_path.iterdir())


@pytest.mark.skipif(T.tlparse_path() is None, reason="tlparse is not installed (pip install tlparse)")
def test_tlparse_pages_are_kept_within_the_cap(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with T.traced(ctx, "with tlparse"):
        _compile_twice()
    info = ctx.record.notes["compile_traces"]["with tlparse"]
    folder = tmp_path / info["path"] / "tlparse"
    assert info["tlparse"] and (folder / "index.html").is_file()
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) <= T.MAX_TLPARSE_BYTES
    assert not ctx.record.skipped


def test_prune_keeps_the_index_first_and_respects_both_caps(tmp_path: Path) -> None:
    files = {"index.html": 10, "a/compilation_metrics_1.html": 20, "a/inductor_output_code_x.html": 500,
             "a/dynamo_output_graph_2.txt": 30, "b/compilation_metrics_3.html": 40}
    for name, size in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x" * size)
    kept, dropped = T._prune(tmp_path, max_bytes=75, max_file=100)
    assert kept == ["index.html", "a/compilation_metrics_1.html", "b/compilation_metrics_3.html"]
    assert {d.split(" ")[0] for d in dropped} == {"a/inductor_output_code_x.html", "a/dynamo_output_graph_2.txt"}
    assert not (tmp_path / "a" / "inductor_output_code_x.html").exists()
