"""What the host did during a run, in one sentence, and the flags a run raised about itself: beside its headline on
the front page and in `lab headline`.

- `sentence`: how far the host's CPU speed moved (the host-speed index's p95 over its p5 over every round the run
  timed, lab.contract.hostspeed.spread_ratio) and which methods followed it at batch 1 in fp32, by their stored
  `host_sensitivity` interval (lab.contract.hostspeed.follows). A run without the index says so.
- `flags`: the host overloaded at the start (the manifest's `host.overloaded`), a fresh process's warm-up that did not
  settle (the `warmup.{when}` notes), an instrument that was not clean (a failed check of sentinel or sentinel_end:
  the paired in-run/fresh verdict, or an older run's in-run/sentinel check), and the host warnings the run noted.

- `section`: the run page's section: per timing of step methods, each method's host index, its sensitivity, its step
  and speedup observed and at the reference host speed, each with its stored interval; the index's cost.

Stored figures only; lab.contract and the report's own tables (the README's tables are made without torch).
"""

from __future__ import annotations

from typing import Any, Iterable

from lab.contract import query as q
from lab.contract import hostspeed
from lab.contract import metrics as M
from lab.contract import notes as N
from lab.contract.intervals import Interval, of
from lab.contract.names import Experiment, Method, Param as P
from lab.contract.results import Metric, Record, Results

from report.sections.section import Section
from report.draw.tables import Cell, Table, estimate_cell, fmt, params_text, timing_cell

INSTRUMENT = (Experiment.SENTINEL, Experiment.SENTINEL_END)
# where the B=1 fp32 sensitivities are read, in this order (inductor: the CPU profile's decode step, fp32)
SOURCES = (Experiment.CUDA_GRAPH_DECODE, Experiment.MODEL_SCALING, Experiment.PEER_GENERATE, Experiment.INDUCTOR)
NO_INDEX = "this run has no host-speed index (its lab version did not measure the host's speed)"


def index_samples(records: Iterable[Record]) -> list[float]:
    """Every round's host index the run stored (host_index_ms, all experiments, methods and shapes)."""
    return [float(x) for rec in records for m in q.all(rec, M.HOST_INDEX_MS) if isinstance(m.value, list)
            for x in m.value if isinstance(x, (int, float)) and not isinstance(x, bool)]


def _ci(rec: Record, params: dict[str, Any]) -> Interval | None:
    """The stored interval of a host_sensitivity with these params."""
    return of(*(getattr(q.maybe(rec, end, **params), "value", None) for end in (M.HOST_SENSITIVITY_CI_LOW,
                                                                                 M.HOST_SENSITIVITY_CI_HIGH)))


def _width(ci: Interval | None) -> float:
    return float("inf") if ci is None else ci.high - ci.low


def _fresh(records: list[Record]) -> dict[str, tuple[str, float, Interval | None]]:
    """Eager's and graph replay's elasticity in the fresh process (the sentinels' warm-up and kept rounds, at the
    start and at the end): per method the estimate with the narrower interval."""
    out: dict[str, tuple[str, float, Interval | None]] = {}
    for rec in (r for r in records if r.id in INSTRUMENT):
        for m in q.all(rec, M.HOST_SENSITIVITY):
            if m.value is None:
                continue
            ci = _ci(rec, m.params)
            method = str(m.params.get(P.METHOD))
            if method not in out or _width(ci) < _width(out[method][2]):
                out[method] = (f"{method}, fresh process", float(m.value), ci)
    return out


def _sensitivities(records: list[Record]) -> list[tuple[str, float, Interval | None]]:
    """(method, elasticity, interval) at batch 1 in fp32 without readback, from the first source that has them; for
    eager and graph replay the fresh process's instead where its interval is narrower (its tens of warm-up rounds
    against the timing's few)."""
    fresh, found = _fresh(records), _timed(records)
    out = [fresh[m] if m in fresh and _width(fresh[m][2]) < _width(ci) else (m, v, ci) for m, v, ci in found]
    return out + [v for m, v in fresh.items() if m not in {f[0] for f in found}]


def _timed(records: list[Record]) -> list[tuple[str, float, Interval | None]]:
    for source in SOURCES:
        for rec in (r for r in records if r.id == source):
            found: dict[str, tuple[float, Interval | None]] = {}
            for m in rec.metrics:
                p = m.params
                if (m.name != M.HOST_SENSITIVITY.name or m.value is None or p.get(P.BATCH) != 1
                        or p.get(P.DTYPE, "float32") != "float32" or p.get(P.READBACK, False)):
                    continue
                label = f"{p.get(P.METHOD)}" + (f", {p[P.STEP]} step" if P.STEP in p else "")
                if label not in found:  # a sweep's first case (its first size) speaks for it
                    found[label] = (float(m.value), _ci(rec, p))
            if found:
                return [(label, value, ci) for label, (value, ci) in found.items()]
    return []


def sentence(records: Iterable[Record]) -> str:
    """'the host's CPU speed varied 1.9× (p5–p95) during this run; eager (0.90 [0.84, 0.96]) followed it, graph
    (0.00 [0.00, 0.00]) did not': the index's range, then each B=1 fp32 method by its elasticity's interval (the
    figures for eager and graph replay, the baseline and the control; the others by name, their figures in the run
    page's host section)."""
    recs = list(records)
    samples = index_samples(recs)
    if not samples:
        return NO_INDEX
    ratio = hostspeed.spread_ratio(samples)
    text = ("the host's CPU speed could not be told from one index sample" if ratio is None else
            f"the host's CPU speed varied {ratio:.1f}× (p5–p95) during this run")
    groups: dict[bool | None, list[str]] = {True: [], False: [], None: []}
    for method, value, ci in _sensitivities(recs):
        shown = method.split(",")[0] in (Method.EAGER, Method.GRAPH)
        figure = f"{value:.2f}" + ("" if ci is None else f" [{ci.low:.2f}, {ci.high:.2f}]")
        groups[hostspeed.follows(ci)].append(f"{method} ({figure})" if shown else method)
    said = ((True, "{} followed it"), (False, "{} did not"), (None, "for {} the rounds cannot tell"))
    parts = [words.format(", ".join(groups[verdict])) for verdict, words in said if groups[verdict]]
    return text + ("; " + ", ".join(parts) if parts else "") + " (host_sensitivity at batch 1, fp32)" * bool(parts)


def _warmup_flags(rec: Record) -> list[str]:
    out = []
    for key, value in rec.notes.items():
        parts = N.WARMUP.parse(key)
        if parts is None or not isinstance(value, dict):
            continue
        moved = value.get("host_moved")
        why = f"; the host index moved {moved:.2f}×" if isinstance(moved, (int, float)) else ""
        if value.get("out_of_budget"):
            out.append(f"unsteady warm-up ({parts[P.WHEN]}): the {value.get('budget_s')} s budget ran out{why}")
        elif value.get("warmup_steady") is False or value.get("drifting"):
            out.append(f"unsteady warm-up ({parts[P.WHEN]}){why}")
    return out


def flags(records: Iterable[Record], manifest: dict[str, Any]) -> list[str]:
    """The flags the run raised about itself, each in a few words with its numbers."""
    recs = list(records)
    out = []
    host = manifest.get("host") or {}
    if isinstance(host, dict) and host.get("overloaded") is True:
        load = host.get("load_start")
        out.append("host overloaded at the start" + (f" (load {load[0]:.1f})" if isinstance(load, list) and load
                                                       and isinstance(load[0], (int, float)) else ""))
    for rec in recs:
        instrument = rec.id in INSTRUMENT
        if instrument:
            out += _warmup_flags(rec)
            out += [f"instrument not clean: {c.name} ({c.detail})" if c.detail else f"instrument not clean: {c.name}"
                    for c in rec.checks if not c.passed and "steady" not in c.name]
        warnings = rec.notes.get(N.HOST_WARNINGS.key)  # the instrument's, or an experiment's own (gemm_bound's)
        if isinstance(warnings, list):  # the instrument's about a warm-up are said by its flag above, from this note
            out += [f"host: {w}" if instrument else f"host ({rec.id}): {w}" for w in warnings
                    if isinstance(w, str) and not (instrument and w.startswith("the fresh process ("))]
    return out


def _within(rec: Record, name: str, params: dict[str, Any]) -> Metric | None:
    """The metric `name` whose params are all among `params` with the same values (launch_overhead's speedup carries
    the method alone, its step time the method and n_ops)."""
    return next((m for m in rec.metrics if m.name == name and m.params
                 and all(k in params and params[k] == v for k, v in m.params.items())), None)


def _with_interval(rec: Record, spec: M.MetricSpec, params: dict[str, Any]) -> Cell:
    m = _within(rec, spec.name, params)
    if m is None or spec.interval is None:
        return estimate_cell(m, None)
    low, high = (getattr(_within(rec, name, m.params), "value", None) for name in spec.interval)
    return estimate_cell(m, (low, high))


def _index_cell(m: Metric) -> Cell:
    xs = [float(x) for x in m.value if isinstance(x, (int, float))] if isinstance(m.value, list) else []
    if not xs:
        return Cell("—")
    return Cell(f"{fmt(sorted(xs)[len(xs) // 2], 'ms')}", cls="num", sub=f"{fmt(min(xs))}-{fmt(max(xs))} over "
                                                                            f"{len(xs)} rounds")


def host_table(rec: Record) -> Table:
    """One timing record's methods: index, sensitivity, step and speedup observed and at the reference."""
    table = Table(columns=["shape", "method", "host index (median of rounds)", "host_sensitivity [95%]",
                           "median step", "step at the reference", "speedup vs eager [95%]",
                           "speedup at the reference [95%]"], id=f"host-{rec.id}",
                  caption=f"{rec.id}: each method's rounds against the host-speed index taken around them")
    for m in q.all(rec, M.HOST_INDEX_MS):
        p = m.params
        speedup = M.SPEEDUP_VS_EAGER if _within(rec, M.SPEEDUP_VS_EAGER.name, p) is not None else M.SPEEDUP
        table.rows.append([Cell(params_text({k: v for k, v in p.items() if k != P.METHOD})),
                           Cell(str(p.get(P.METHOD, "—"))), _index_cell(m),
                           _with_interval(rec, M.HOST_SENSITIVITY, p), timing_cell(q.maybe(rec, M.STEP_MS, **p)),
                           _with_interval(rec, M.STEP_MS_AT_REFERENCE, p),
                           _with_interval(rec, speedup, p), _with_interval(rec, M.SPEEDUP_AT_REFERENCE, p)])
    return table


def section(results: Results) -> Section | None:
    """The run page's host section (None: the run stored no host index, an earlier lab version's)."""
    recs = [r for r in results.experiments if q.all(r, M.HOST_INDEX_MS)]
    if not recs:
        return None
    costs = [f"{r.id} {params_text(m.params)}: {m.value:.1%}" for r in recs for m in r.metrics
             if m.name == M.HOST_INDEX_COST.name and isinstance(m.value, (int, float))]
    said = sentence(results.experiments)
    intro = [said[:1].upper() + said[1:] + ".",
             "The host-speed index is a fixed pure-Python loop timed just before and after each method's turn in "
             "every round (lab.measure.hostspeed); host_sensitivity is the elasticity of the method's step on it (1: "
             "it follows the host's CPU wholly, 0: not at all); the reference host speed is the 10th percentile of a "
             "timing's rounds' index, and the step and speedup there come from the same fit.",
             "The index's own cost, its time over the timed turns': " + ("; ".join(costs) if costs else "—") + "."]
    return Section("host", "The host's speed: what it did to each method", "\n".join(intro),
                   [host_table(r) for r in recs])
