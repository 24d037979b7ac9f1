"""The front page: one row per run a performance engineer reads in five seconds, newest first, then the headline
figures of every run side by side. Every number is a stored one (report.sections.steps, report.sections.costs pick which)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract import units
from lab.contract.names import Experiment, Method, is_eager, Param as P, Status
from lab.contract.results import Metric, Results

from report.sections import host
from report.sections.costs import phase_figures, stale_break_even
from report.site.discover import Run
from report.site.hosts import machine
from report.site.provenance import tree_state
from report.sections.runstatus import Status as RunStatus, status
from report.sections.section import failed_checks
from report.sections.instrument import flags as sentinel_flags
from report.sections.steps import Bound, Case, StepRow, cases, own_mbu, pct, row_bound, step_rows
from report.sections.sweeps import headline as peer_headline
from report.draw.tables import Cell, Table, fmt, num, sort_key

DECODE_CORE = "decode_core"  # compile_cost's target: the split decode step's compiled core


def device_name(results: Results) -> str:
    m = machine(results)
    return m.gpu if m.gpu != "?" else f"CPU: {m.cpu}"


def device_text(results: Results) -> str:
    """The device with its driver (GPU) or its usable cores (CPU)."""
    m = machine(results)
    cores = (results.manifest.get("cpu") or {}).get("usable_cores") or "?"
    return f"{m.gpu} (driver {m.driver})" if m.gpu != "?" else f"CPU: {m.cpu} ({cores} cores)"


def counts(results: Results) -> dict[str, int]:
    return {s: sum(r.status == s for r in results.experiments) for s in Status}


@dataclass
class Line:
    """One batch and dtype of a run: eager against the fastest correct method, with stored figures."""

    case: Case
    mbu: Metric | None
    bound: Bound
    setup: Metric | None
    break_even: Metric | None
    capture: list[StepRow] = field(default_factory=list)  # graph replay, compile + graph: what capture buys here
    stale: str = ""  # why the stored break-even is known wrong (report.sections.costs.stale_break_even)

    @property
    def gains(self) -> list[tuple[str, str, str]]:
        """(method, 'its stored speedup over eager [95% interval]', what to know) for graph replay and compile + graph
        as measured at this batch and dtype (no interval stored, tokens not equal to eager's: said)."""
        return [(r.label, r.speedup_text or "—", ", ".join(n for n, said in (("no interval stored", r.speedup and r.ci is None),
                                                                              ("tokens differ", r.correct is False)) if said))
                for r in self.capture]

    @property
    def key(self) -> str:
        return f"B={fmt(self.case.batch)} {self.case.dtype}"

    @property
    def failed_source(self) -> bool:
        """The figures come from a FAILED experiment (the cases that passed were measured; badged, not hidden)."""
        return self.case.best.status == Status.FAILED or self.case.eager.status == Status.FAILED

    @property
    def mbu_text(self) -> str:
        """'MBU 23.2%': the fastest method's own, from its own step time (never eager's beside another method)."""
        return f"MBU {pct(self.mbu.value)}" if self.mbu is not None else ""


@dataclass
class FrontRow:
    run: Run
    file: str
    host: str
    label: str
    device: str
    torch: str
    lines: list[Line] = field(default_factory=list)
    compile: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    peer: str | None = None  # the lab's best step beside transformers' best generate (peer_generate's conclusion)
    sentinel: list[str] = field(default_factory=list)  # failed sentinel checks, with their numbers
    status: RunStatus | None = None  # incomplete, with what was asked for and not recorded (report.sections.runstatus)
    tree: str = ""  # the lab's commit and whether its tree was clean (tree_state)
    host_state: str = ""  # what the host's speed did, in one sentence (report.sections.host.sentence)
    flags: list[str] = field(default_factory=list)  # what the run flagged about itself (report.sections.host.flags)

    @property
    def started(self) -> str:
        """The start time to the minute, UTC (the ISO text as recorded is on the run's page)."""
        text = self.run.results.run.started_at or ""
        return text[:16].replace("T", " ") + (" UTC" if text.endswith(("+00:00", "Z")) else "") if text else "—"


CAPTURE = (Method.GRAPH, Method.COMPILE_GRAPH)  # the lab's question: what does capturing the step buy over eager?


def lines(results: Results) -> list[Line]:
    out = []
    cgd = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    rows = step_rows(results)
    for c in cases(rows):
        best = c.best
        p = {P.METHOD: best.method, P.BATCH: c.batch, P.DTYPE: c.dtype}
        setup = q.maybe(cgd, M.SETUP_S, **p) if best.source == Experiment.CUDA_GRAPH_DECODE and not is_eager(best.method) else None
        be = q.maybe(cgd, M.BREAK_EVEN_STEPS, **p) if setup is not None else None
        capture = [r for m in CAPTURE for r in rows if (r.source, r.batch, r.dtype, r.method) ==
                   (best.source, c.batch, c.dtype, m)]
        out.append(Line(c, own_mbu(results, best), row_bound(results, best), setup, be,
                        capture, stale_break_even(cgd, best.method, c.batch, c.dtype) if be is not None else ""))
    return out


def compile_summary(results: Results) -> list[str]:
    """compile_cost's decode core at full depth: first call and stored break-even, cold and warm."""
    rec = q.experiment(results, Experiment.COMPILE_COST)
    out = []
    for phase, (fc, be) in phase_figures(rec, DECODE_CORE).items():
        if fc is None and be is None:
            continue
        pay = "—" if be is None else ("never pays" if be.value is None else f"{fmt(be.value)} calls")
        out.append(f"compile, {phase} cache: {fmt(fc.value, units.S) if fc else '—'} → {pay}")
    return out


def front_row(run: Run, file: str) -> FrontRow:
    r = run.results
    return FrontRow(run=run, file=file, host=machine(r).hostname, label=str(r.manifest.get("label") or ""),
                    device=device_name(r), torch=str((r.manifest.get("torch") or {}).get("version", "?")),
                    lines=lines(r), compile=compile_summary(r), counts=counts(r),
                    failed=[f"{rec.id}: {c.name}" for rec, c in failed_checks(r)], peer=peer_headline(r),
                    status=status(r), sentinel=sentinel_flags(r), tree=tree_state(r),
                    host_state=host.sentence(r.experiments), flags=host.flags(r.experiments, r.manifest))



# ---------------------------------------------------------------------------- side by side

Getter = Callable[[Results], Any]


def _host_figures() -> list[tuple[str, Getter]]:
    def ceil(spec: M.MetricSpec, **params: Any) -> Getter:
        return lambda r: q.maybe(q.experiment(r, Experiment.CEILINGS), spec, **params)

    def cc(which: int, phase: str) -> Getter:  # 0: the first call, 1: the break-even (costs.phase_figures)
        return lambda r: phase_figures(q.experiment(r, Experiment.COMPILE_COST), DECODE_CORE)[phase][which]

    return [
        ("host", lambda r: machine(r).hostname + (f" · {r.manifest['label']}" if r.manifest.get("label") else "")),
        ("device", device_name), ("torch", lambda r: (r.manifest.get("torch") or {}).get("version")),
        ("profile", lambda r: r.run.profile), ("started", lambda r: r.run.started_at), ("lab", tree_state),
        ("cost of one eager launch", ceil(M.LAUNCH_US_PER_OP, mode=Method.EAGER)),
        # host_dispatch names its field after the metric the sentinel measured it as
        ("one eager launch, fresh process (µs)", lambda r: (r.manifest.get("host_dispatch") or {}).get(
            M.LAUNCH_US_PER_OP.name)),
        ("cost of one replayed graph node", ceil(M.LAUNCH_US_PER_OP, mode="graph_node")),
        ("copy bandwidth", ceil(M.BANDWIDTH_GBPS)),
        ("matmul peak, float32", ceil(M.MATMUL_TFLOPS, dtype="float32")),
        ("matmul peak, bfloat16", ceil(M.MATMUL_TFLOPS, dtype="bfloat16")),
        ("compile decode core, cold", cc(0, "cold")), ("compile decode core, warm", cc(0, "warm")),
        ("break-even calls, cold", cc(1, "cold")), ("break-even calls, warm", cc(1, "warm")),
        ("OK / NOT_RUN / FAILED", lambda r: " / ".join(str(v) for v in counts(r).values())),
        ("failed checks", lambda r: len(failed_checks(r))),
        ("sentinel checks failed", lambda r: len(sentinel_flags(r))),
    ]


def _cell(value: Any) -> Cell:
    if isinstance(value, Metric):
        if value.value is None and value.name == M.BREAK_EVEN_CALLS.name:
            return Cell("never", cls="num")
        return num(value.value, value.unit)
    return Cell("—" if value is None else str(value), cls="num" if isinstance(value, (int, float)) else "")


def side_by_side(rows: list[FrontRow]) -> Table:
    """Every run's headline figures in one table: a column per run (newest first), a row per figure."""
    table = Table(columns=["figure"] + [r.run.name for r in rows], id="side-by-side", cls="side",
                  caption="Headline figures of every run, side by side")
    per_run = _host_figures()
    table.rows += [[Cell(label)] + [_cell(get(r.run.results)) for r in rows] for label, get in per_run[:5]]
    keys = sorted({(line.case.batch, line.case.dtype) for r in rows for line in r.lines},
                  key=lambda k: (k[1] != "float32", k[1], sort_key(k[0])))
    for batch, dtype in keys:
        here = [next((line for line in r.lines if (line.case.batch, line.case.dtype) == (batch, dtype)), None)
                for r in rows]
        tag = f"B={fmt(batch)} {dtype}"
        figures: list[tuple[str, Callable[[Line], Any]]] = [
            ("eager step", lambda ln: ln.case.eager.step), ("fastest correct method", lambda ln: ln.case.best.label),
            ("its step", lambda ln: ln.case.best.step), ("its speedup", lambda ln: ln.case.best.speedup_text or None),
            ("its MBU", lambda ln: pct(ln.mbu.value) if ln.mbu else None),
            ("its binding bound", lambda ln: ln.bound.text.removesuffix("-bound") or None),
        ]
        table.rows += [[Cell(f"{label}, {tag}")] + [_cell(get_line(ln) if ln else None) for ln in here]
                       for label, get_line in figures]
    table.rows += [[Cell(label)] + [_cell(get(r.run.results)) for r in rows] for label, get in per_run[5:]]
    return table
