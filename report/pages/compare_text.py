"""`lab compare`'s output: plain text for a terminal, or JSON records for a program.

Every string that reaches the terminal passes through `safe` (lab.console): a control or format character from a
results file (an ESC that would recolour the terminal, a carriage return that would overwrite a
line, a bidi override) is shown as an escape (`\\x1b`), never interpreted. JSON is written with
`ensure_ascii`, so it holds no raw control character either.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from lab.atomic import clean
from lab.untrusted import safe
from report.pages.bandwidth_split import BandwidthSplit, Rates, SplitRow
from report.pages.compare import IGNORED_FIELDS, Comparison, Side
from report.site.hosts import machine_of
from report.pages.why_moved import CLASSES
from lab.contract import metrics as M
from lab.contract.marks import MARKS


RANKED = 5  # the fields of each class's ranking the text output names


def _short(value: Any, width: int = 48) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _params(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items())


def describe(side: Side) -> dict[str, Any]:
    """Who a side is: path, profile, host (real hostname and label), device, torch."""
    m = side.manifest
    gpus = ((m.get("gpu") or {}).get("nvidia_smi") or {}).get("gpus") or []
    gpu = gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None
    host = m.get("host") or {}
    return {"path": str(side.path), "label": side.label, "run_label": m.get("label"),
            "profile": side.results.run.profile if side.results else None,
            "host": host.get("real_hostname") or host.get("hostname"), "machine": machine_of(m).label,
            "device": gpu or (m.get("cpu") or {}).get("model"), "torch": (m.get("torch") or {}).get("version")}


def _describe_line(side: Side) -> str:
    d = describe(side)
    kind = f"profile {d['profile']}" if side.results else "manifest only"
    label = f" '{d['run_label']}'" if d["run_label"] else ""
    return f"{d['path']} ({kind}; host {d['machine']}{label}; torch {d['torch'] or '?'}; {d['device'] or '?'})"


def format_text(c: Comparison) -> str:
    """The comparison as plain text for a terminal (every line through `safe`)."""
    lines = [f"A: {_describe_line(c.a)}", f"B: {_describe_line(c.b)}", ""]
    differing = [r for r in c.why if r.differs]
    lines.append(f"Why it moved: {len(differing)} of the fields that can explain a move differ")
    width = max([len(r.label) for r in c.why] + [10])
    for r in differing:
        lines.append(f"  {r.label:<{width}}  {_short(r.a)}  ->  {_short(r.b)}")
    same = [r.label for r in c.why if not r.differs]
    lines += [f"  unchanged: {', '.join(same)}"] if same else []
    for cls, rows in c.why_by_class.items():
        first = [r for r in rows if r.differs][:RANKED]
        lines.append(f"  for the {len(c.moved_of(cls))} {CLASSES[cls]}: "
                     + ("; ".join(f"{r.label} {_short(r.a, 24)} -> {_short(r.b, 24)}" for r in first) or "none differs"))
    lines += ["", f"Manifest fields that differ: {len(c.fields)} (ignored: {', '.join(IGNORED_FIELDS)})"]
    width = max([len(f.key) for f in c.fields] + [10])
    for f in c.fields:
        lines.append(f"  {f.key:<{width}}  {_short(f.a)}  ->  {_short(f.b)}")
    if c.a.results is None or c.b.results is None:
        lines += ["", "Results: not compared (one side is a manifest only)"]
        return "\n".join(safe(line) for line in lines) + "\n"
    lines += [f"Experiments only in {label}: {', '.join(only)}"
              for label, only in (("A", c.experiments_only_a), ("B", c.experiments_only_b)) if only]
    lines += ["", f"Experiments whose status differs: {len(c.statuses)}"]
    for s in c.statuses:
        why = f"B: {s.b_reason}" if s.b_reason else (f"A: {s.a_reason}" if s.a_reason else "")
        lines.append(f"  {s.mark:<15} {s.experiment}: {s.a} -> {s.b}" + (f"  {_short(why, 160)}" if why else "")
                     + (f"  [{s.why}]" if s.why else ""))
    lines += ["", f"Correctness checks whose outcome differs: {len(c.checks)}"]
    for ch in c.checks:
        lines.append(f"  {ch.mark:<15} {ch.experiment}.{ch.name}{{{_params(ch.params)}}}: "
                     f"{'pass' if ch.a else 'FAIL'} -> {'pass' if ch.b else 'FAIL'}  {_short(ch.detail, 80)}")
    counts = ", ".join(f"{n} {m}" for m in MARKS if (n := sum(r.mark == m for r in c.metrics)))
    lines += ["", f"Metrics both runs have: {len(c.metrics)} ({counts or 'none'}; factor {c.factor:g})",
              f"  {'mark':<15} {'A':>12} {'B':>12} {'B/A':>7}  metric [unit] (reason)"]
    for m in sorted(c.metrics, key=lambda m: MARKS.index(m.mark)):
        ratio = "-" if m.ratio is None else f"{m.ratio:.3f}" if abs(m.ratio) < 1000 else f"{m.ratio:.3g}"
        reason = f"  ({m.reason})" if m.reason else ""
        lines.append(f"  {m.mark:<15} {_short(m.a, 12):>12} {_short(m.b, 12):>12} {ratio:>7}  "
                     f"{m.experiment}.{m.name}{{{_params(m.params)}}} [{m.unit}]{reason}")
    lines += [f"Metrics only in {label}: " + ", ".join(f"{k} ({n})" for k, n in per_id.items())
              for label, per_id in (("A", c.only_a), ("B", c.only_b)) if per_id]
    lines += split_lines(c.split)
    return "\n".join(safe(line) for line in lines) + "\n"


def _interval(low: float | None, high: float | None, spec: str) -> str:
    return "" if low is None or high is None else f" [{low:{spec}}, {high:{spec}}]"


def _split_row(row: SplitRow, width: int) -> str:
    label = f"{row.experiment}{{{_params(row.params)}}}"
    outside = f"  ({row.caveat})" if row.caveat else ""
    return (f"  {label:<{width}}  A {row.step_a_ms:7.4f} ms  B {row.step_b_ms:7.4f} ms  "
            f"c {row.exposed:.2f}{_interval(row.exposed_low, row.exposed_high, '.2f')}  "
            f"a {row.intercept_us:.0f} µs{_interval(row.intercept_low_us, row.intercept_high_us, '.0f')}{outside}")


def _rates_line(r: Rates, n: int) -> str:
    """An experiment's two copy rates, or why none of its steps is split (`n`: how many are)."""
    if r.absent:
        return f"  {r.experiment}: {r.absent}"
    faster = "B" if r.slower == "A" else "A"
    none = "" if n else f"; no {M.STEP_MS.name} both ran with the same {M.BYTES_PER_STEP.name}: no split"
    return f"  {r.experiment}: A copies at {r.a_GBps:,.0f} GB/s, B at {r.b_GBps:,.0f} GB/s ({faster}'s memory " \
           f"{r.ratio:.2f}x faster){none}"


def split_lines(split: BandwidthSplit) -> list[str]:
    """The section "what memory speed bought" (report.pages.bandwidth_split): for each experiment with a copy rate
    in both runs the two rates (or why no split), then one line per step split; nothing where no experiment has."""
    if not split:
        return []
    n = len(split.rows)
    counted = f"{n} step{'s' * (n != 1)} split, each on the line through its two points" if n else "no split"
    lines = ["", f"What memory speed bought: {counted}"]
    lines += [_rates_line(r, sum(row.experiment == r.experiment for row in split.rows)) for r in split.rates]
    if not split.rows:
        return lines
    lines.append("  c: the share of the bytes' time that shows in the step (1 all, 0 none); a: the step at unlimited "
                 "bandwidth (a lower bound for these kernels); [95% intervals]")
    width = max(len(f"{row.experiment}{{{_params(row.params)}}}") for row in split.rows)
    return lines + [_split_row(row, width) for row in split.rows]


def records(c: Comparison) -> list[dict[str, Any]]:
    """Every mark as one record: kind (metric, status, check), experiment, metric, params, a, b, ratio, mark, reason;
    a metric's also its class (report.pages.why_moved: what can explain its move)."""
    return [{"kind": "status", "experiment": s.experiment, "metric": None, "params": {}, "unit": "", "a": s.a,
             "b": s.b, "ratio": None, "mark": s.mark, "reason": "; ".join([s.why] * bool(s.why) + [
                 f"{side}: {r}" for side, r in (("A", s.a_reason), ("B", s.b_reason)) if r])} for s in c.statuses] + [
        {"kind": "check", "experiment": ch.experiment, "metric": ch.name, "params": ch.params, "unit": "",
         "a": ch.a, "b": ch.b, "ratio": None, "mark": ch.mark, "reason": ch.detail} for ch in c.checks] + [
        {"kind": "metric", "experiment": r.experiment, "metric": r.name, "params": r.params, "unit": r.unit,
         "a": r.a, "b": r.b, "ratio": r.ratio, "mark": r.mark, "reason": r.reason, "class": r.cls} for r in c.metrics]


def split_json(split: BandwidthSplit) -> dict[str, Any]:
    """The section "what memory speed bought" as records: each experiment's copy rates (with why no split, where
    none), and each step split, with both runs' steps as A and B besides the slower and the faster."""
    return {"rates": [dataclasses.asdict(r) | {"absent": r.absent, "ratio": r.ratio, "slower": r.slower} for r in split.rates],
            "rows": [dataclasses.asdict(row) | {"step_a_ms": row.step_a_ms, "step_b_ms": row.step_b_ms,
                                                "consistent": row.consistent, "caveat": row.caveat} for row in split.rows]}


def to_json(c: Comparison) -> str:
    """The comparison as one JSON object: the two sides, the fields that differ, why it moved, and the records."""
    data = {
        "a": describe(c.a), "b": describe(c.b), "factor": c.factor,
        "counts": {m: c.count(m) for m in MARKS},
        "why_it_moved": [{"label": r.label, "field": r.key, "a": r.a, "b": r.b, "differs": r.differs} for r in c.why],
        "why_it_moved_by_class": {cls: {"moved": len(c.moved_of(cls)), "ranked": [
            {"label": r.label, "field": r.key, "a": r.a, "b": r.b, "differs": r.differs, "first": r.first}
            for r in rows]} for cls, rows in c.why_by_class.items()},
        "fields": [{"field": f.key, "a": f.a, "b": f.b} for f in c.fields],
        "records": records(c) if c.a.results is not None and c.b.results is not None else [],
        "experiments_only_in_a": c.experiments_only_a, "experiments_only_in_b": c.experiments_only_b,
        "metrics_only_in_a": c.only_a, "metrics_only_in_b": c.only_b,
        "bandwidth_split": split_json(c.split),
    }
    return json.dumps(clean(data), indent=1, ensure_ascii=True, allow_nan=False, default=str) + "\n"
