"""The hand-fused step kernel by kernel, in "where the time goes": per batch and dtype, each kernel's calls, µs per
call, bytes per call, achieved TB/s and share of the step, and the fit of time = fixed latency + bytes / bandwidth.

All stored: cuda_graph_decode's `fused_kernels.{method}.{shape}` notes (lab.contract.notes.FUSED_KERNELS, written
by the profile phase from one profiled step, lab.step.fused.breakdown). The plain `fused` variant's table is the
attribution; a PDL variant's table carries the caveat that its kernels' durations overlap and do not add up.
"""

from __future__ import annotations

from typing import Any

from lab.contract import query as q
from lab.contract import notes as N
from lab.contract import units
from lab.contract.names import Experiment, method_rank, Param as P
from lab.contract.results import Results

from report.sections.steps import pct
from report.draw.style import display
from report.draw.tables import Cell, Table, fmt, is_number, num, sort_key


def fused_notes(results: Results, spec: N.NoteSpec) -> list[dict[str, Any]]:
    """Every well-formed note of `spec` (per fused method and shape) cuda_graph_decode stored: fp32 first, batches
    ascending, plain `fused` first."""
    rec = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    notes = [v for k, v in (rec.notes if rec else {}).items()
             if spec.parse(k) is not None and isinstance(v, dict) and spec.problem(v) is None]
    return sorted(notes, key=lambda n: (str(n["params"].get(P.DTYPE)) != "float32", str(n["params"].get(P.DTYPE)),
                                        sort_key(n["params"].get(P.BATCH)), method_rank(str(n[P.METHOD]))))


def _mb(nbytes: Any) -> str:
    return f"{fmt(nbytes / 1e6)} MB" if is_number(nbytes) else "—"


def fit_line(note: dict[str, Any]) -> str:
    """The fit in one sentence: why half the bytes (bf16) does not halve the time; '' where there is none."""
    f = note.get("fit")
    if not isinstance(f, dict) or not is_number(f.get("fixed_us")):
        return ""
    kernels = ", ".join(str(k) for k in f.get(N.KERNEL_ROWS, []))
    bw = f.get("bandwidth_gbps")
    rate = (f"bytes ÷ {fmt(float(bw) / 1e3)} TB/s" if isinstance(bw, (int, float)) else "a time that does not grow with the bytes")
    return (f"Fit over the layer kernels' {fmt(f.get('points'))} calls ({kernels}, least squares): time per call ≈ "
            f"{fmt(f['fixed_us'], units.US)} + {rate}; the fixed part is {pct(f.get('fixed_share'))} of their time, "
            "so halving the bytes (bf16) cannot halve it.")


def caption(note: dict[str, Any]) -> str:
    p = note["params"]
    total = (f"{fmt(note.get('kernel_us'), units.US)} of kernels in a {fmt(note.get('step_us'), units.US)} step"
             if is_number(note.get("step_us")) else f"{fmt(note.get('kernel_us'), units.US)} of kernels")
    head = (f"{display(note[P.METHOD])}, batch {fmt(p.get(P.BATCH))}, {p.get(P.DTYPE)}, {note.get('path')} path, "
            f"kernel by kernel (profiler, one step at position {fmt(note.get('position'))}, attention reading "
            f"{fmt(note.get('kv_slots'))} cache slots): {total}.")
    why = str(note.get("why") or "")
    if note.get("pdl"):
        why = f"Not additive: {why}."
    elif why:
        why = f"{'No times: ' if note.get('kernel_us') is None else ''}{why}."
    return " ".join(x for x in (head, fit_line(note), why) if x)


def table(note: dict[str, Any], collapsed: bool = False) -> Table:
    p = note["params"]
    t = Table(columns=["kernel", "calls", "µs per call", "bytes per call", "achieved TB/s", "share of the step"],
              caption=caption(note), id=f"fused-kernels-{note[P.METHOD]}-b{p.get(P.BATCH)}-{p.get(P.DTYPE)}",
              cls="kernels", collapsed=collapsed)
    for r in note[N.KERNEL_ROWS]:
        split = (f"weights {_mb(r.get('weight_bytes_per_call'))}, KV cache {_mb(r.get('kv_bytes_per_call'))}, "
                 f"activations {_mb(r.get('activation_bytes_per_call'))}")
        t.rows.append([Cell(str(r.get("kernel")), cls="kernel", title=str(r.get("function") or "library call")),
                       num(r.get("calls")), num(r.get("us_per_call"), units.US),
                       Cell(_mb(r.get("bytes_per_call")), cls="num", title=split),
                       num(r["gbps"] / 1e3 if is_number(r.get("gbps")) else None), Cell(pct(r.get("share")), cls="num")])
    step = note.get("step_us")
    kernel_us = note.get("kernel_us")
    share = kernel_us / step if is_number(kernel_us) and is_number(step) and step else None
    t.rows.append([Cell("all kernels"), num(sum(int(r.get("calls") or 0) for r in note[N.KERNEL_ROWS])), Cell(""),
                   Cell(_mb(note.get("bytes")), cls="num"), Cell(""), Cell(pct(share), cls="num")])
    return t


def tables(results: Results) -> list[Table]:
    """One table per stored note: the plain variant's open, the PDL variants' folded under their caveat."""
    return [table(n, collapsed=bool(n.get("pdl"))) for n in fused_notes(results, N.FUSED_KERNELS)]
