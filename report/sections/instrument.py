"""The instrument checked: the run's own eager (and graph) step beside the fresh-process sentinel's at the start
and the end of the run, and the host's dispatch facts the manifest holds (CPU model and clock, load at the start
and end, the clean cost of one eager launch). Stored figures and the stored checks' verdicts only."""

from __future__ import annotations

from typing import Any

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract import units
from lab.contract.names import Experiment, Method, Param as P
from lab.contract.results import Check, Metric, Record, Results

from report.sections.section import Section
from report.draw.tables import Cell, Table, fmt, interval_text, num, timing_cell

METHODS = (Method.EAGER, Method.GRAPH)
# The sentinel table's verdict columns: the ratio shown, the checks judging it (by a word of their name), the metric
# whose stored 95% interval is shown beside it
VERDICTS: tuple[tuple[M.MetricSpec, str, M.MetricSpec | None], ...] = (
    (M.IN_RUN_OVER_SENTINEL, "fresh-process sentinel", None), (M.SENTINEL_DRIFT, "moved", None),
    (M.IN_RUN_OVER_FRESH, "interleaved", M.IN_RUN_OVER_FRESH), (M.IN_RUN_CHANGE, "where it started", M.IN_RUN_CHANGE))
DISPATCH_FIELDS = (("CPU", "cpu_model", ""), ("CPU clock", "cpu_mhz", "MHz"),
                   ("host load at the start (1, 5, 15 min)", "load_start", ""),
                   ("host load at the end", "load_end", ""),
                   # host_dispatch names its field after the metric the sentinel measured it as
                   ("one eager launch, fresh process (µs per op)", M.LAUNCH_US_PER_OP.name, units.US))


def _sentinel(results: Results, method: str, when: str) -> Metric | None:
    found = (q.maybe(q.experiment(results, rid), M.SENTINEL_STEP_MS, method=method, when=when)
             for rid in (Experiment.SENTINEL, Experiment.SENTINEL_END))
    return next((m for m in found if m is not None), None)


def in_run(results: Results, method: str) -> Metric | None:
    """The run's own step the sentinel judges: cuda_graph_decode at batch 1, fp32, no readback."""
    return q.maybe(q.experiment(results, Experiment.CUDA_GRAPH_DECODE), M.STEP_MS, method=method, batch=1, dtype="float32", readback=False)


def sentinel_checks(results: Results) -> list[tuple[Record, Check]]:
    return [(rec, c) for rid in (Experiment.SENTINEL, Experiment.SENTINEL_END) if (rec := q.experiment(results, rid)) is not None
            for c in rec.checks]


def flags(results: Results) -> list[str]:
    """The failed sentinel checks, each with its numbers (the front page's flag)."""
    return [f"{c.name}: failed ({c.detail})" if c.detail else f"{c.name}: failed"
            for _, c in sentinel_checks(results) if not c.passed]


def _interval_cell(m: Metric | None) -> Cell:
    cell = timing_cell(m)  # '—' where none
    sp = m.spread if m is not None else None
    if sp is not None and sp.ci_low is not None and sp.ci_high is not None:
        cell.sub = f"95% {interval_text((sp.ci_low, sp.ci_high))}" + (f" · {cell.sub}" if cell.sub else "")
    return cell


def _ci(rec: Record | None, spec: M.MetricSpec, **params: Any) -> str:
    """'95% [0.98, 1.03]' from the interval stored beside `spec` ("" where none)."""
    text = interval_text(q.interval(rec, spec, **params))
    return f"95% {text}" if text else ""


def sentinel_table(results: Results) -> Table:
    begin, end = q.experiment(results, Experiment.SENTINEL), q.experiment(results, Experiment.SENTINEL_END)
    table = Table(columns=["method", "sentinel at the start", "in this run (cuda_graph_decode)", "sentinel at the end",
                           "in-run ÷ sentinel", "end ÷ start (drift)", "in-run ÷ fresh, paired",
                           "its change over the run"], id="sentinel-table",
                  caption="The run's own step at batch 1, fp32, beside the same step timed in a fresh process with "
                          "nothing else loaded, at the start and at the end of the run. The last columns are the "
                          "verdict: the run's own eager and two fresh processes alternating rounds (paired, with its "
                          "95% interval) at the end and, beneath, at the start; then the end's over the start's, "
                          "against the same two processes: what the run did to its own process. The ratios across "
                          "minutes measure the host as much as the lab: data, and a host warning where the host moved")
    for method in METHODS:
        start, stop = _sentinel(results, method, "start"), _sentinel(results, method, "end")
        if start is None and stop is None:
            continue
        row = [Cell(str(method)), _interval_cell(start), _interval_cell(in_run(results, method)), _interval_cell(stop)]
        paired, began = q.maybe(end, M.IN_RUN_OVER_FRESH, method=method), q.maybe(begin, M.IN_RUN_OVER_FRESH, method=method)
        for shown, named, spec in VERDICTS:
            m = q.maybe(end, shown, method=method)
            verdict = [c for _, c in sentinel_checks(results) if c.params.get(P.METHOD) == method and named in c.name]
            bad = any(not c.passed for c in verdict)
            sub = "; ".join(f"{'pass' if c.passed else 'FAIL'}: {c.name}" for c in verdict)
            ci = _ci(end, spec, method=method) if m is not None and spec is not None else ""
            if m is paired and began is not None:
                inside = _ci(begin, M.IN_RUN_OVER_FRESH, method=method)
                ci += f"; at the start {fmt(began.value, units.X)}" + (f" ({inside})" if inside else "")
            row.append(num(m.value if m else None, units.X if m else "", cls="num bad" if bad else "num",
                           sub=" · ".join(t for t in (ci, sub) if t)))
        table.rows.append(row)
    return table


def dispatch_table(results: Results) -> Table:
    facts: dict[str, Any] = results.manifest.get("host_dispatch") or {}
    table = Table(columns=["host dispatch", "value"], id="dispatch-table", cls="kv",
                  caption="The host's dispatch speed (the manifest's host_dispatch): what an eager step's launches "
                          "cost on this host, whatever the GPU")
    if not isinstance(facts, dict):
        return table
    table.rows = [[Cell(label, title=f"host_dispatch.{key}"), Cell(fmt(facts[key], unit))]
                  for label, key, unit in DISPATCH_FIELDS if facts.get(key) not in (None, "", [])]
    where = facts.get("placement")
    if isinstance(where, dict):
        table.rows.append([Cell("where the run ran (LAB_CPU_BIND)", title="host_dispatch.placement"),
                           Cell(placement_text(where))])
    return table


def _cpus(cpus: Any) -> str:
    """[0, 1, 2, 3, 8] as "0-3, 8"."""
    if not isinstance(cpus, list) or not all(isinstance(c, int) for c in cpus):
        return "?"
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def placement_text(where: dict[str, Any]) -> str:
    """The manifest's host_dispatch.placement in one line: the binding, the CPUs allowed, the NUMA nodes and the
    GPU's."""
    nodes = where.get("numa_nodes") or {}
    parts = [f"bind {where.get('bind') or 'none'}", f"CPUs {_cpus(where.get('allowed'))}"]
    if isinstance(nodes, dict) and nodes:
        parts.append(f"{len(nodes)} NUMA node(s)" + (f", the GPU on node {where['gpu_node']}"
                                                    if where.get("gpu_node") is not None else ""))
    return "; ".join(parts)


def instrument(results: Results) -> Section | None:
    """None for a run with neither a sentinel nor the host's dispatch facts (an earlier lab version's)."""
    sentinel, dispatch = sentinel_table(results), dispatch_table(results)
    if not sentinel and not dispatch:
        return None
    failed = flags(results)
    lines = failed[:] if failed else (["The run's own eager step is within the sentinel's tolerance: the instrument "
                                       "did not move what it measured."] if sentinel else [])
    notes = [rec.notes.get(N.HOST_WARNINGS.key) for rid in (Experiment.SENTINEL, Experiment.SENTINEL_END)
             if (rec := q.experiment(results, rid)) is not None]
    lines += [f"Host warning: {w}." for v in notes if isinstance(v, list) for w in v if isinstance(w, str)]
    lines.append("The sentinel is a child process that imports torch, builds the run's GPT-2 and times eager and "
                 "graph replay at batch 1 in fp32, before and after every other experiment (sentinel, sentinel_end); "
                 "it and a second one take turns with the run's own eager at both ends, the same two processes.")
    return Section("instrument", "The instrument: in-run eager against the fresh-process sentinel", "\n".join(lines),
                   [t for t in (sentinel, dispatch) if t])
