"""Tables as data: the renderer builds `Table`s in Python and the templates only lay them out.

Formatting lives here too (`fmt`), so every number in the report is written the same way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from lab.contract import units
from lab.contract.metrics import MetricSpec
from lab.contract.names import Param as P
from lab.contract.results import Metric, Record


@dataclass
class Cell:
    """One table cell. `sub` is a second, smaller line; `cls` a CSS class (num, good, bad, noisy, ...)."""

    text: str
    cls: str = ""
    title: str = ""
    sub: str = ""
    href: str = ""
    pre: bool = False  # preformatted text (tracebacks, notes)


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""
    cls: str = ""
    id: str = ""
    collapsed: bool = False  # shown folded (<details>) under its caption: detail behind a section's answer

    def __bool__(self) -> bool:
        return bool(self.rows)


def fmt(value: Any, unit: str = "") -> str:
    """A value as a reader wants it: 3 significant digits, thousands separated, booleans as yes/no."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        if not math.isfinite(value):
            text = str(value)
        elif value == 0:
            text = "0"
        elif abs(value) >= 1000:
            text = f"{value:,.0f}"
        elif abs(value) >= 0.001:
            text = f"{value:.3g}"
        else:
            text = f"{value:.2e}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    return f"{text} {unit}" if unit and unit not in (units.COUNT, units.BOOL) and not isinstance(value, bool) else text


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def num(value: Any, unit: str = "", **kw: Any) -> Cell:
    return Cell(fmt(value, unit), cls=kw.pop("cls", "num" if is_number(value) else ""), **kw)


def value_cell(m: Metric | None, unit: str | None = None, **kw: Any) -> Cell:
    """A stored value in its unit (`unit` where given), '—' where none is stored."""
    return num(None, **kw) if m is None else num(m.value, m.unit if unit is None else unit, **kw)


def interval_text(ends: tuple[Any, Any] | None) -> str:
    """'[0.98, 1.03]' from an interval's two ends ("" where either is missing)."""
    return "" if ends is None or None in ends else f"[{fmt(ends[0])}, {fmt(ends[1])}]"


def estimate_cell(m: Metric | None, ends: tuple[Any, Any] | None) -> Cell:
    """An estimate with its 95% interval beside it, '1.05× [0.98, 1.12]' ('—' where none is stored)."""
    if m is None or m.value is None:
        return Cell("—")
    text = f"{fmt(m.value)}×" if m.unit == units.X else fmt(m.value, m.unit)
    return Cell(f"{text} {interval_text(ends)}".rstrip(), cls="num")


def timing_cell(m: Metric | None, extra: str = "") -> Cell:
    """A median with its spread underneath; noisy measurements are flagged, not hidden ('—' where none)."""
    if m is None:
        return Cell("—")
    sp = m.spread
    text = fmt(m.value, m.unit)
    cls, title = "num", ""
    if sp is not None:
        title = (f"median {fmt(sp.median)}, quartiles {fmt(sp.q1)}–{fmt(sp.q3)}, min {fmt(sp.min)}, "
                 f"max {fmt(sp.max)}, n={sp.n}")
        if sp.noisy:
            cls += " noisy"
            text += " ⚠"
            title = f"noisy: IQR {sp.rel_iqr * 100:.1f}% of the median. " + title
    sub = " · ".join(s for s in (extra, f"IQR {sp.rel_iqr * 100:.1f}% · n={sp.n}" if sp else "") if s)
    return Cell(text, cls=cls, title=title, sub=sub)


def notes_text(value: Any) -> str:
    """A note (list, dict or string) as one readable line."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "; ".join(notes_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {notes_text(v)}" for k, v in value.items())
    return str(value)


def param_cells(params: dict[str, Any], *keys: str) -> list[Cell]:
    """A row's leading cells: the values of its `keys` params, a batch or a layer count right-aligned as a number."""
    return [Cell(fmt(params.get(k)), cls="num" if k in (P.BATCH, P.N_LAYER) else "") for k in keys]


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers numerically, then everything else as text (batch 8 before batch 64)."""
    return (0, value) if is_number(value) else (1, str(value))


def metric_tables(record: Record) -> list[Table]:
    """Every metric of a record, one table per metric name with its params as columns.

    This is what makes experiments the report knows nothing specific about still show in full.
    """
    tables = []
    for name in dict.fromkeys(m.name for m in record.metrics):
        metrics = [m for m in record.metrics if m.name == name]
        keys = list(dict.fromkeys(k for m in metrics for k in m.params))
        table = Table(columns=keys + ["value"], caption=name, cls="metrics")
        for m in metrics:
            row = [Cell(fmt(m.params.get(k)) if k in m.params else "") for k in keys]
            row.append(timing_cell(m) if m.spread else num(m.value, m.unit))
            table.rows.append(row)
        tables.append(table)
    return tables


def pivot(record: Record | None, row_keys: list[str], names: list[MetricSpec] | list[str], **kw: Any) -> Table:
    """Metrics `names` (declared MetricSpecs, or their names) side by side, one row per combination of the
    `row_keys` params; `kw`: the table's caption, id, ..."""
    names = [str(n) for n in names]
    table = Table(columns=row_keys + names, **kw)
    if record is None:
        return table
    rows: dict[tuple[Any, ...], dict[str, Metric]] = {}
    for m in record.metrics:
        if m.name in names and all(k in m.params for k in row_keys):
            rows.setdefault(tuple(m.params[k] for k in row_keys), {})[m.name] = m
    # A metric with fewer of the row params (fusion's ceiling_x has n_ops, not residency) fills every row it fits.
    for m in record.metrics:
        present = [i for i, k in enumerate(row_keys) if k in m.params]
        if m.name in names and present and len(present) < len(row_keys):
            for key, cells in rows.items():
                if all(key[i] == m.params[row_keys[i]] for i in present):
                    cells.setdefault(m.name, m)
    for key in sorted(rows, key=lambda k: tuple(sort_key(v) for v in k)):
        found = [rows[key].get(n) for n in names]
        table.rows.append([Cell(fmt(v)) for v in key] + [Cell("—") if f is None else (
            timing_cell(f) if f.spread else num(f.value, f.unit)) for f in found])
    return table
