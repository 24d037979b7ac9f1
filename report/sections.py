"""The sections of a run's page, each built from the records as tables (no formatting in templates).

Each section says why it is empty when the experiment behind it did not run, so a reader never
wonders whether something was forgotten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lab import metrics as M
from lab import units
from lab.compare import flatten
from lab.costs import break_even_calls
from lab.names import Method, method_rank
from lab.results import Metric, Record, Results

from report.tables import Cell, Table, first, fmt, is_number, matching, metric_tables, notes_text, num, params_text, \
    pivot, sort_key, timing_cell

DYNAMO_COUNTS = (M.DYNAMO_GRAPHS, M.GRAPH_BREAKS, M.RECOMPILES, M.CUDAGRAPH_SKIPS)


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    charts: list[Any] = field(default_factory=list)  # report.charts.Chart
    empty: str = ""  # why there is nothing to show


def record(results: Results, rid: str) -> Record | None:
    for rec in results.experiments:
        if rec.id == rid:
            return rec
    return None


def why_absent(results: Results, *ids: str) -> str:
    """One sentence per experiment saying why it gave nothing to show here."""
    parts = []
    for rid in ids:
        rec = record(results, rid)
        if rec is None:
            parts.append(f"{rid} is not in this run.")
        elif rec.status != "OK" and rec.reason:
            parts.append(f"{rid} is {rec.status} ({rec.reason.code}): {rec.reason.message}")
        else:
            parts.append(f"{rid} ran but recorded none of the metrics this section shows.")
    return "\n".join(parts)


def _step_metrics(rec: Record | None) -> list[Metric]:
    return [m for m in (rec.metrics if rec else []) if m.name == M.STEP_MS.name and "method" in m.params
            and "batch" in m.params]


def _readback_false(metrics: list[Metric], **params: Any) -> Metric | None:
    """The step time for these params, preferring the run without reading tokens back."""
    found = matching(metrics, M.STEP_MS, **params)
    plain = [m for m in found if not m.params.get("readback")]
    return (plain or found or [None])[0]


# ---------------------------------------------------------------------------- environment

ENV_FIELDS: tuple[tuple[str, str], ...] = (
    ("Host", "host.hostname"), ("OS", "host.os"), ("Python", "python.version"), ("torch", "torch.version"),
    ("torch CUDA build", "torch.cuda_build"), ("cuDNN", "torch.cudnn"), ("Triton", "libraries.triton"),
    ("transformers", "libraries.transformers"), ("GPU", "gpu.nvidia_smi.gpus[0].name"),
    ("GPU driver", "gpu.nvidia_smi.gpus[0].driver_version"), ("GPU memory", "gpu.nvidia_smi.gpus[0].memory.total"),
    ("CUDA seen by torch", "gpu.torch.available"), ("Why no CUDA", "gpu.torch.why_not"),
    ("CPU", "cpu.model"), ("CPU cores usable", "cpu.usable_cores"), ("torch threads", "cpu.torch_threads"),
    ("C++ compiler", "toolchain.cxx.version"), ("Python headers", "toolchain.cxx.python_h"),
    ("Recompile limit", "compiler_settings.recompile_limit.name"),
    ("Recompile limit value", "compiler_settings.recompile_limit.value"),
    ("In a container", "container.in_container"), ("Image", "container.image"), ("Image id", "container.image_id"),
    ("Lab commit", "lab.commit"), ("Lab tree dirty", "lab.dirty"), ("Weights", "weights.source"),
    ("Model", "weights.model"), ("Packages digest", "packages.sha256"), ("Note", "fixture"),
)


def environment(results: Results) -> Section:
    flat = flatten(results.manifest)
    summary = Table(columns=["field", "value"], cls="kv")
    for label, key in ENV_FIELDS:
        if key in flat and flat[key] not in (None, "", []):
            value = flat[key]
            summary.rows.append([Cell(label, title=key), Cell(str(value) if isinstance(value, int) and not isinstance(
                value, bool) else fmt(value))])
    full = Table(columns=["manifest field", "value"], cls="kv full", caption="The whole manifest, flattened")
    for key, value in flat.items():
        full.rows.append([Cell(key), Cell(fmt(value), pre=isinstance(value, str) and "\n" in value)])
    run = results.run
    intro = (f"Profile {run.profile}, run {run.state}, started {run.started_at or '—'}, "
             f"wall {fmt(run.wall_s, 's')}, lab {results.lab_version or '—'}.")
    return Section("environment", "Host and environment", intro, [summary, full],
                   empty="" if summary else "The manifest has none of the usual fields.")


def overview(results: Results) -> Table:
    table = Table(columns=["experiment", "title", "status", "reason", "duration"], cls="overview")
    for rec in results.experiments:
        table.rows.append([
            Cell(rec.id, href=f"#exp-{rec.id}"), Cell(rec.title), Cell(rec.status, cls=f"status {rec.status}"),
            Cell(f"{rec.reason.code}: {rec.reason.message}" if rec.reason else ""), num(rec.duration_s, units.S),
        ])
    return table


# ---------------------------------------------------------------------------- ceilings

def ceilings(results: Results) -> Section:
    rec = record(results, "ceilings")
    steps = _step_metrics(record(results, "cuda_graph_decode"))
    host = Table(columns=["ceiling", "params", "value"], caption="Ceilings measured on this host")
    for name in (M.LAUNCH_US_PER_OP, M.BANDWIDTH_GBPS, M.MATMUL_TFLOPS):
        for m in matching(rec.metrics if rec else [], name):
            host.rows.append([Cell(name.name), Cell(params_text(m.params)), num(m.value, m.unit)])
    bounds = Table(columns=["dtype", "method", "batch", "kernels/step", "MB/step", "launch bound", "bandwidth bound",
                            "compute bound", "binds", "measured", "measured / bound"],
                   caption="Per method and batch: the lower bounds on a step and which one binds")
    keys = {(m.params.get("dtype"), m.params["method"], m.params["batch"]) for m in (rec.metrics if rec else [])
            if m.name == M.BOUND_MS.name and "method" in m.params and "batch" in m.params}
    for dtype, method, batch in sorted(keys, key=lambda k: (str(k[0]), method_rank(k[1]), sort_key(k[2]))):
        p = {"method": method, "batch": batch} | ({"dtype": dtype} if dtype is not None else {})
        get = lambda name: first(rec, name, **p)  # noqa: E731
        binding = get(M.BINDING)
        bound = get(M.BOUND_MS)
        measured = _readback_false(steps, **p)
        ratio = get(M.MEASURED_OVER_BOUND)
        ratio_value = ratio.value if ratio else (measured.value / bound.value if measured and bound and is_number(
            measured.value) and is_number(bound.value) and bound.value else None)
        bytes_m = get(M.BYTES_PER_STEP)
        kernels = get(M.KERNELS_PER_STEP)
        row = [Cell(fmt(dtype)), Cell(str(method)), Cell(fmt(batch), cls="num"),
               num(kernels.value if kernels else None),
               num(bytes_m.value / 1e6 if bytes_m and is_number(bytes_m.value) else None)]
        for kind, spec in (("launch", M.BOUND_LAUNCH_MS), ("bandwidth", M.BOUND_BANDWIDTH_MS),
                           ("compute", M.BOUND_COMPUTE_MS)):
            m = get(spec)
            binds = binding is not None and binding.value == kind
            row.append(num(m.value if m else None, units.MS, cls="num binds" if binds else "num"))
        row.append(Cell(fmt(binding.value) if binding else "—", cls="binds" if binding else ""))
        row.append(timing_cell(measured) if measured else Cell("—"))
        row.append(num(ratio_value, units.X if ratio_value is not None else ""))
        bounds.rows.append(row)
    empty = "" if host or bounds else why_absent(results, "ceilings")
    intro = ("A step cannot be faster than its largest bound: launches × per-launch cost, bytes ÷ bandwidth, "
             "FLOPs ÷ peak. The bound that binds is highlighted; measured ÷ bound says how far the step is from it.")
    return Section("ceilings", "Ceilings and which bound binds", intro, [t for t in (host, bounds) if t], empty=empty)


# ---------------------------------------------------------------------------- speedups

def speedups(results: Results) -> Section:
    rec = record(results, "cuda_graph_decode")
    steps = _step_metrics(rec)
    groups: dict[tuple[Any, Any], list[Metric]] = {}
    for m in steps:
        groups.setdefault((m.params.get("dtype"), m.params.get("readback")), []).append(m)
    tables = []
    for (dtype, readback), metrics in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        batches = sorted({m.params["batch"] for m in metrics}, key=sort_key)
        methods = sorted({m.params["method"] for m in metrics}, key=method_rank)
        table = Table(columns=["method"] + [f"batch {b}" for b in batches], cls="speedup",
                      caption=f"Median ms per decode step, dtype {fmt(dtype)}, "
                              f"{'reading the token back each step' if readback else 'no readback'}")
        for method in methods:
            row = [Cell(str(method))]
            for b in batches:
                here = [m for m in metrics if m.params["method"] == method and m.params["batch"] == b]
                if not here:
                    row.append(Cell("—"))
                    continue
                m = here[0]
                sp = first(rec, M.SPEEDUP_VS_EAGER, **m.params)
                eager = [e for e in metrics if e.params["method"] == Method.EAGER and e.params["batch"] == b]
                speed = sp.value if sp else (eager[0].value / m.value if eager and is_number(m.value) and m.value
                                             and is_number(eager[0].value) else None)
                cell = timing_cell(m, extra=f"{fmt(speed)}× vs eager" if speed is not None else "")
                if is_number(speed):
                    cell.cls += " good" if speed > 1.05 else (" bad" if speed < 0.95 else "")
                row.append(cell)
            table.rows.append(row)
        tables.append(table)
    intro = ("Each cell: the median step time, its speedup over eager at the same batch, and the spread "
             "(interquartile range as a share of the median). ⚠ marks a noisy measurement (IQR over 10%).")
    return Section("speedups", "Step time and speedup per method and batch", intro, tables,
                   empty="" if tables else why_absent(results, "cuda_graph_decode"))


# ---------------------------------------------------------------------------- costs

def costs(results: Results) -> Section:
    rec = record(results, "cuda_graph_decode")
    steps = _step_metrics(rec)
    setup = Table(columns=["method", "batch", "setup (compile/capture)", "step", "eager step", "saving per step",
                           "break-even steps"], caption="First-call cost of each method and the steps it takes to pay")
    for m in sorted(matching(rec.metrics if rec else [], M.SETUP_S),
                    key=lambda m: (method_rank(m.params.get("method")), sort_key(m.params.get("batch")))):
        method, batch = m.params.get("method"), m.params.get("batch")
        step = _readback_false(steps, method=method, batch=batch)
        eager = _readback_false(steps, method=Method.EAGER, batch=batch)
        saving = be = None
        if step and eager and all(is_number(x) for x in (m.value, step.value, eager.value)):
            saving = eager.value - step.value
            be = break_even_calls(max(0.0, m.value), max(0.0, eager.value), max(0.0, step.value))
        setup.rows.append([Cell(str(method)), Cell(fmt(batch), cls="num"), num(m.value, m.unit),
                           timing_cell(step) if step else Cell("—"), timing_cell(eager) if eager else Cell("—"),
                           num(saving, units.MS),
                           Cell("never (no saving)", cls="bad") if saving is not None and be is None else num(be)])
    graph_cost = pivot(record(results, "graph_cost"), ["batch"],
                       [M.CAPTURE_S, M.SAVING_MS_PER_STEP, M.BREAK_EVEN_STEPS, M.STATE_MIB, M.GRAPH_POOL_MIB])
    graph_cost.caption = "Manual CUDA graph: capture cost, memory and break-even (graph_cost)"
    compile_cost = pivot(record(results, "compile_cost"), ["phase", "target"], [M.FIRST_CALL_S, M.BREAK_EVEN_CALLS])
    compile_cost.caption = "torch.compile first call, cold vs warm cache (compile_cost)"
    steady = pivot(record(results, "compile_cost"), ["method", "target"], [M.STEADY_MS])
    steady.caption = "Steady-state call time behind the break-even (compile_cost)"
    tables = [t for t in (setup, graph_cost, compile_cost, steady) if t]
    intro = ("Setup is paid once; break-even is setup ÷ (eager step − method step), the steps after which the "
             "method has saved more than it cost.")
    return Section("costs", "Compile and capture costs, break-even", intro, tables,
                   empty="" if tables else why_absent(results, "cuda_graph_decode", "graph_cost", "compile_cost"))


# ---------------------------------------------------------------------------- dynamo

def _with_reasons(table: Table, rec: Record | None, prefix: str) -> Table:
    """Append a reasons column from notes `<prefix>.<first row key>`."""
    if rec is None or not table:
        return table
    table.columns.append("reasons")
    for row in table.rows:
        table_key = row[0].text
        text = notes_text(rec.notes.get(f"{prefix}.{table_key}"))
        row.append(Cell(text, cls="reason"))
    return table


def dynamo(results: Results) -> Section:
    cgd = record(results, "cuda_graph_decode")
    counts = _with_reasons(pivot(cgd, ["method"], list(DYNAMO_COUNTS)), cgd, "cudagraph_skip_reasons")
    counts.caption = "Compiled decode step: graphs, breaks, recompiles, CUDA-graph skips (cuda_graph_decode)"
    gb = record(results, "graph_breaks")
    breaks = _with_reasons(pivot(gb, ["function"], [M.GRAPHS, M.GRAPH_BREAKS, M.OPS]), gb, "reasons")
    breaks.caption = "torch._dynamo.explain on functions that break (graph_breaks)"
    rc = record(results, "recompiles")
    recompiles = pivot(rc, ["dynamic"], [M.COMPILES, M.GRAPHS, M.LIMIT_HIT])
    limit = first(rc, M.RECOMPILE_LIMIT)
    recompiles.caption = "One function, 12 batch sizes (recompiles)" + (
        f"; limit {limit.params.get('name', '')} = {fmt(limit.value)}" if limit else "")
    dr = record(results, "decode_recompiles")
    decode = pivot(dr, ["step", "dynamic"], [M.COMPILES, M.GRAPHS, M.LIMIT_HIT, M.OP_NODES_FIRST_GRAPH])
    decode.caption = "Growing-cache vs fixed-shape decode step, 20 calls (decode_recompiles)"
    tables = [t for t in (counts, breaks, recompiles, decode) if t]
    return Section("dynamo", "Dynamo: graphs, breaks, recompiles, skips", "", tables,
                   empty="" if tables else why_absent(results, "cuda_graph_decode", "graph_breaks", "recompiles",
                                                      "decode_recompiles"))


# ---------------------------------------------------------------------------- correctness

def correctness(results: Results) -> Section:
    cgd = record(results, "cuda_graph_decode")
    agree = pivot(cgd, ["method", "batch", "dtype"], [M.TOKENS_EQUAL, M.TOKEN_AGREEMENT, M.MAX_LOGIT_DIFF])
    for row in agree.rows:
        if row[3].text == "no":
            row[3].cls = "bad"
    agree.caption = "Decode methods against eager: tokens, agreement, largest logit difference"
    checks = Table(columns=["experiment", "check", "params", "result", "detail", "fatal"],
                   caption="Every correctness check, made outside the timed path")
    for rec in results.experiments:
        for c in rec.checks:
            checks.rows.append([Cell(rec.id, href=f"#exp-{rec.id}"), Cell(c.name), Cell(params_text(c.params)),
                                Cell("pass" if c.passed else "FAIL", cls="good" if c.passed else "bad"),
                                Cell(c.detail), Cell(fmt(c.fatal))])
    failed = sum(c.passed is False for r in results.experiments for c in r.checks)
    intro = f"{len(checks.rows)} checks, {failed} failed." if checks else ""
    tables = [t for t in (agree, checks) if t]
    return Section("correctness", "Correctness", intro, tables,
                   empty="" if tables else "No experiment in this run recorded a correctness check.")


# ---------------------------------------------------------------------------- not run / failed

def not_run(results: Results) -> Section:
    records = Table(columns=["experiment", "reason code", "what would make it run"], id="not-run-table",
                    caption="Experiments that did not run", cls="notrun")
    for rec in results.experiments:
        if rec.status == "NOT_RUN":
            records.rows.append([Cell(rec.id, href=f"#exp-{rec.id}"), Cell(rec.reason.code if rec.reason else "?",
                                                                         cls="code"),
                                 Cell(rec.reason.message if rec.reason else "")])
    parts = Table(columns=["experiment", "item", "reason code", "what would make it run"], id="skipped-table",
                  caption="Parts of experiments that did not run", cls="notrun")
    for rec in results.experiments:
        for s in rec.skipped:
            parts.rows.append([Cell(rec.id, href=f"#exp-{rec.id}"), Cell(s.item), Cell(s.code, cls="code"),
                               Cell(s.message)])
    failed = Table(columns=["experiment", "reason code", "error", "traceback"], id="failed-table",
                   caption="Experiments that failed", cls="failed")
    for rec in results.experiments:
        if rec.status == "FAILED":
            err = rec.error or {}
            message = err.get("message") or (rec.reason.message if rec.reason else "")
            where = f"{err.get('type')}: " if err.get("type") else ""
            failed.rows.append([Cell(rec.id, href=f"#exp-{rec.id}"),
                                Cell(rec.reason.code if rec.reason else "?", cls="code"),
                                Cell(where + str(message), cls="error"),
                                Cell(str(err.get("traceback") or err.get("stderr") or ""), pre=True)])
    intro = (f"{len(records.rows)} experiments NOT_RUN, {len(parts.rows)} parts skipped inside experiments, "
             f"{len(failed.rows)} FAILED. Nothing is left out: every record of the run is listed on this page.")
    return Section("not-run", "What did not run, and why", intro, [t for t in (records, parts, failed) if t],
                   empty="" if (records or parts or failed) else "Everything ran.")


# ---------------------------------------------------------------------------- every experiment

@dataclass
class ExperimentView:
    id: str
    title: str
    status: str
    reason: str
    duration: str
    tables: list[Table]
    checks: Table
    skipped: Table
    notes: str
    samples: int
    metric_count: int
    library: Table | None = None  # what libraries said while it ran (Record.library_logs)


def library_table(rec: Record) -> Table:
    """Record.library_logs as a table: warnings, torch's log records and stderr lines, with their counts."""
    table = Table(columns=["source", "from", "level", "times", "message", "where"],
                  caption="library output (kept here, not printed)")
    for e in rec.library_logs or []:
        lines = e.message.splitlines() or [""]
        more = f"and {len(lines) - 1} more lines (results.json)" if len(lines) > 1 else ""
        table.rows.append([Cell(e.source), Cell(e.origin), Cell(e.level), Cell(str(e.count), cls="num"),
                           Cell(lines[0], sub=more), Cell(e.location)])
    return table


def experiments(results: Results) -> list[ExperimentView]:
    views = []
    for rec in results.experiments:
        checks = Table(columns=["check", "params", "result", "detail"], caption="checks")
        for c in rec.checks:
            checks.rows.append([Cell(c.name), Cell(params_text(c.params)),
                                Cell("pass" if c.passed else "FAIL", cls="good" if c.passed else "bad"),
                                Cell(c.detail)])
        skipped = Table(columns=["item", "reason code", "message"], caption="parts not run")
        for s in rec.skipped:
            skipped.rows.append([Cell(s.item), Cell(s.code, cls="code"), Cell(s.message)])
        views.append(ExperimentView(
            id=rec.id, title=rec.title, status=rec.status,
            reason=f"{rec.reason.code}: {rec.reason.message}" if rec.reason else "",
            duration=fmt(rec.duration_s, units.S), tables=metric_tables(rec), checks=checks, skipped=skipped,
            notes=json.dumps(rec.notes, indent=1, default=str) if rec.notes else "", samples=len(rec.samples),
            metric_count=len(rec.metrics), library=library_table(rec)))
    return views
