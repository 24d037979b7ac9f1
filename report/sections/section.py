"""The sections of a run's page, each built from the records as tables (no formatting in templates).

Each section says why it is empty when the experiment behind it did not run, so a reader never
wonders whether something was forgotten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lab.contract import query as q
from lab.contract.names import Experiment, Param as P, Status
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract import units
from report.pages.compare import flatten
from report.site.provenance import mixed_sources
from lab.contract.results import Check, Record, Results

from report.draw.tables import Cell, Table, fmt, metric_tables, notes_text, num, params_text, pivot

DYNAMO_COUNTS = (M.DYNAMO_GRAPHS, M.GRAPH_BREAKS, M.RECOMPILES, M.CUDAGRAPH_SKIPS)


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    charts: list[Any] = field(default_factory=list)  # report.draw.charts.Chart
    empty: str = ""  # why there is nothing to show
    panel: Panel | None = None  # shown first, right under the answer (where the step's time goes)
    minor: bool = False  # shown after the sweeps: reference material (checks, environment, what did not run), or a
    # copy of a sweep's row

    @property
    def blank(self) -> bool:
        """Nothing to show but why (the run page puts these after the sections with content)."""
        return not self.tables and not self.charts and self.panel is None


@dataclass
class Panel:
    """A block a section opens with: charts (report.draw.charts.Chart) and tables under one heading, in order."""

    id: str
    title: str
    intro: str = ""
    blocks: list[Any] = field(default_factory=list)  # each a Chart or a Table

    @property
    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]


def noted(rec: Record | None, key: str, kind: type[Any]) -> Any:
    """The note `key` of `rec` when it is of the shape its declaration gives (dict, list, str), else that kind's empty
    value: a note of another shape or none is shown as not recorded."""
    value = rec.notes.get(key) if rec is not None else None
    return value if isinstance(value, kind) else kind()


def shown(sid: str, title: str, intro: str, tables: list[Table], empty: str, **kw: Any) -> Section:
    """A section of those of `tables` that have rows; `empty` (why there is nothing to show) only where none has."""
    tables = [t for t in tables if t]
    return Section(sid, title, intro, tables, empty="" if tables else empty, **kw)


def why_absent(results: Results, *ids: Experiment | str) -> str:
    """One sentence per experiment saying why it gave nothing to show here."""
    parts = []
    for rid in ids:
        rec = q.experiment(results, rid)
        if rec is None:
            parts.append(f"{rid} is not in this run.")
        elif rec.status != Status.OK and rec.reason:
            parts.append(f"{rid} is {rec.status} ({rec.reason.code}): {rec.reason.message}")
        else:
            parts.append(f"{rid} ran but recorded none of the metrics this section shows.")
    return "\n".join(parts)


# ---------------------------------------------------------------------------- environment

ENV_FIELDS: tuple[tuple[str, str], ...] = (
    ("Label", "label"), ("Host", "host.real_hostname"), ("Hostname seen by the lab", "host.hostname"),
    ("Host load at start (1, 5, 15 min)", "host.load_start"), ("Host load at end", "host.load_end"), ("OS", "host.os"),
    ("Python", "python.version"), ("torch", "torch.version"),
    ("torch CUDA build", "torch.cuda_build"), ("cuDNN", "torch.cudnn"), ("Triton", "libraries.triton"),
    ("transformers", "libraries.transformers"), ("GPU", "gpu.nvidia_smi.gpus[0].name"),
    ("GPU driver", "gpu.nvidia_smi.gpus[0].driver_version"), ("GPU memory", "gpu.nvidia_smi.gpus[0].memory.total"),
    ("GPU card (UUID)", "gpu.nvidia_smi.gpus[0].uuid"), ("CUDA seen by torch", "gpu.torch.available"), ("Why no CUDA", "gpu.torch.why_not"),
    ("GPU clocks (SM, memory)", "gpu.nvidia_smi.gpus[0].clocks.sm"), ("GPU power limit", "gpu.nvidia_smi.gpus[0].power.limit"),
    ("CPU", "cpu.model"), ("CPU flags", "cpu.isa"), ("CPU caches", "cpu.caches"), ("CPU cores usable", "cpu.usable_cores"),
    ("torch threads", "cpu.torch_threads"), ("Compile cache at start", "compile_cache.state"),
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
        value = flat.get(key)
        if value is None and any(k.startswith(key + ".") for k in flat):  # an object: its fields on one line
            value = ", ".join(f"{k[len(key) + 1:]} {flat[k]}" for k in flat if k.startswith(key + "."))
        if value not in (None, "", []):
            text = str(value) if isinstance(value, int) and not isinstance(value, bool) else fmt(value)
            if key == "lab.dirty" and (mixed := mixed_sources(results)):  # the manifest is the first start's
                text = f"{text} at the first start{mixed}"
            summary.rows.append([Cell(label, title=key), Cell(text)])
    full = Table(columns=["manifest field", "value"], cls="kv full", caption="The whole manifest, flattened",
                 rows=[[Cell(key), Cell(fmt(value), pre=isinstance(value, str) and "\n" in value)]
                       for key, value in flat.items()])
    run = results.run
    intro = (f"Profile {run.profile}, run {run.state}, started {run.started_at or '—'}, "
             f"wall {fmt(run.wall_s, 's')}, lab {results.lab_version or '—'}.")
    return Section("environment", "Host and environment", intro, [summary, full],
                   empty="" if summary else "The manifest has none of the usual fields.", minor=True)


def _exp(rec: Record) -> Cell:
    """The experiment's id, linked to its entry on the page."""
    return Cell(rec.id, href=f"#exp-{rec.id}")


def overview(results: Results) -> Table:
    return Table(columns=["experiment", "title", "status", "reason", "duration"], cls="overview",
                 rows=[[_exp(rec), Cell(rec.title), Cell(rec.status, cls=f"status {rec.status}"),
                        Cell(f"{rec.reason.code}: {rec.reason.message}" if rec.reason else ""),
                        num(rec.duration_s, units.S)] for rec in results.experiments])


# ---------------------------------------------------------------------------- dynamo

def _with_reasons(table: Table, rec: Record | None, note: N.NoteSpec) -> Table:
    """Append a reasons column from the declared note of each row's first cell (`note.key_for(first cell)`)."""
    if rec is None or not table:
        return table
    table.columns.append("reasons")
    for row in table.rows:
        row.append(Cell(notes_text(rec.notes.get(note.key_for(row[0].text))), cls="reason"))
    return table


def dynamo(results: Results) -> Section:
    cgd, gb, rc, dr = (q.experiment(results, e) for e in (Experiment.CUDA_GRAPH_DECODE, Experiment.GRAPH_BREAKS,
                                                          Experiment.RECOMPILES, Experiment.DECODE_RECOMPILES))
    counts = _with_reasons(pivot(cgd, [P.METHOD], list(DYNAMO_COUNTS), caption="Compiled decode step: graphs, breaks, "
                                 "recompiles, CUDA-graph skips (cuda_graph_decode)"), cgd, N.CUDAGRAPH_SKIP_REASONS)
    breaks = _with_reasons(pivot(gb, [P.FUNCTION], [M.GRAPHS, M.GRAPH_BREAKS, M.OPS], caption="torch._dynamo.explain "
                                 "on functions that break (graph_breaks)"), gb, N.FUNCTION_REASONS)
    limit = q.maybe(rc, M.RECOMPILE_LIMIT)
    recompiles = pivot(rc, [P.DYNAMIC], [M.COMPILES, M.GRAPHS, M.LIMIT_HIT], caption="One function, 12 batch "
                       "sizes (recompiles)" + (f"; limit {limit.params.get('name', '')} = {fmt(limit.value)}"
                                               if limit else ""))
    decode = pivot(dr, [P.STEP, P.DYNAMIC], [M.COMPILES, M.GRAPHS, M.LIMIT_HIT, M.OP_NODES_FIRST_GRAPH],
                   caption="Growing-cache vs fixed-shape decode step, 20 calls (decode_recompiles)")
    return shown("dynamo", "Dynamo: graphs, breaks, recompiles, skips", "", [counts, breaks, recompiles, decode],
                 why_absent(results, Experiment.CUDA_GRAPH_DECODE, Experiment.GRAPH_BREAKS, Experiment.RECOMPILES,
                            Experiment.DECODE_RECOMPILES))


# ---------------------------------------------------------------------------- correctness

def failed_checks(results: Results) -> list[tuple[Record, Check]]:
    """Every check that failed, fatal or not, with its record: the page header, the index and compare show them."""
    return [(rec, c) for rec in results.experiments for c in rec.checks if not c.passed]


def _check_cells(c: Check) -> list[Cell]:
    return [Cell(c.name), Cell(params_text(c.params)), Cell("pass" if c.passed else "FAIL",
                                                             cls="good" if c.passed else "bad"), Cell(c.detail)]


def _checks_table(pairs: list[tuple[Record, Check]], caption: str, **kw: Any) -> Table:
    return Table(["experiment", "check", "params", "result", "detail", "fatal"],
                 [[_exp(rec), *_check_cells(c), Cell(fmt(c.fatal))] for rec, c in pairs], caption, **kw)


def correctness(results: Results) -> Section:
    cgd = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    agree = pivot(cgd, [P.METHOD, P.BATCH, P.DTYPE], [M.TOKENS_EQUAL, M.TOKEN_AGREEMENT, M.MAX_LOGIT_DIFF],
                  caption="Decode methods against eager: tokens, agreement, largest logit difference")
    for row in agree.rows:
        if row[3].text == "no":
            row[3].cls = "bad"
    agree.collapsed = len(agree.rows) > 12
    every = [(rec, c) for rec in results.experiments for c in rec.checks]
    failed = failed_checks(results)
    failing = _checks_table(failed, "The checks that failed", id="failed-checks")
    checks = _checks_table(every, "Every correctness check, made outside the timed path", collapsed=bool(every))
    intro = (f"{len(every)} checks, {len(failed)} failed" + (f" ({sum(c.fatal for _, c in failed)} fatal: their "
             "experiment is FAILED; the others are facts of this host the experiment expected otherwise)."
             if failed else ".")) if every else ""
    return shown("correctness", "Correctness", intro, [failing, agree, checks],
                 "No experiment in this run recorded a correctness check.", minor=True)


# ---------------------------------------------------------------------------- not run / failed

def not_run(results: Results) -> Section:
    records = Table(columns=["experiment", "reason code", "what would make it run"], id="not-run-table",
                    caption="Experiments that did not run", cls="notrun")
    parts = Table(columns=["experiment", "item", "reason code", "what would make it run"], id="skipped-table",
                  caption="Parts of experiments that did not run", cls="notrun")
    failed = Table(columns=["experiment", "reason code", "error", "traceback"], id="failed-table",
                   caption="Experiments that failed", cls="failed")
    for rec in results.experiments:
        code = Cell(rec.reason.code if rec.reason else "?", cls="code")
        if rec.status == Status.NOT_RUN:
            records.rows.append([_exp(rec), code, Cell(rec.reason.message if rec.reason else "")])
        parts.rows += [[_exp(rec), Cell(s.item), Cell(s.code, cls="code"), Cell(s.message)] for s in rec.skipped]
        if rec.status == Status.FAILED:
            err = rec.error or {}
            message = err.get("message") or (rec.reason.message if rec.reason else "")
            where = f"{err.get('type')}: " if err.get("type") else ""
            failed.rows.append([_exp(rec), code, Cell(where + str(message), cls="error"),
                                Cell(str(err.get("traceback") or err.get("stderr") or ""), pre=True)])
    intro = (f"{len(records.rows)} experiments NOT_RUN, {len(parts.rows)} parts skipped inside experiments, "
             f"{len(failed.rows)} FAILED. Nothing is left out: every record of the run is listed on this page.")
    return shown("not-run", "What did not run, and why", intro, [records, parts, failed], "Everything ran.", minor=True)


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
    failed_checks: int = 0
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
        checks = Table(["check", "params", "result", "detail"], [_check_cells(c) for c in rec.checks], "checks")
        skipped = Table(columns=["item", "reason code", "message"], caption="parts not run",
                        rows=[[Cell(s.item), Cell(s.code, cls="code"), Cell(s.message)] for s in rec.skipped])
        views.append(ExperimentView(
            id=rec.id, title=rec.title, status=rec.status,
            reason=f"{rec.reason.code}: {rec.reason.message}" if rec.reason else "",
            duration=fmt(rec.duration_s, units.S), tables=metric_tables(rec), checks=checks, skipped=skipped,
            notes=json.dumps(rec.notes, indent=1, default=str) if rec.notes else "", samples=len(rec.samples),
            metric_count=len(rec.metrics), failed_checks=sum(not c.passed for c in rec.checks),
            library=library_table(rec)))
    return views
