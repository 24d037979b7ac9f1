"""The charts of where a decode step's time goes: one stacked bar per method and batch (floor, the rest of the
GPU-busy time, gaps) and the distribution of each method's step samples (a box per method), each batch its own
panel so methods never hide behind one another. Colours and markers from report.draw.style; linear axes from 0."""

from __future__ import annotations

import statistics
from typing import Any

import matplotlib

from lab.contract.names import method_rank

from lab.contract.results import Results

from report.sections import breakdown, steps
from report.draw.charts import Chart, _draw, _grid, _legend_below, bar_panel
from report.sections.section import Panel, Section
from report.draw.style import FLOOR_COLOR, FLOOR_LINE, GAP_HATCH, display, pale, style
from report.draw.tables import fmt, sort_key
from report.sections.breakdown import Split, groups

# boxplot's horizontal switch: `orientation` from matplotlib 3.10 (where `vert` is deprecated), `vert` before
HORIZONTAL: dict[str, Any] = ({"orientation": "horizontal"} if tuple(int(x) for x in
                              matplotlib.__version__.split(".")[:2]) >= (3, 10) else {"vert": False})


def stacked(found: list[Split]) -> list[Chart]:
    """Per dtype: a panel per batch, a horizontal bar per method: floor, GPU-busy above it, gap."""
    from matplotlib.patches import Patch

    charts = []
    for dtype in dict.fromkeys(s.dtype for s in found):
        panels = [(b, rows) for d, b, rows in groups(found) if d == dtype]

        def draw(data: dict[str, Any], panels: list[Any] = panels, dtype: str = dtype) -> Any:
            fig, axes = _grid(len(panels), [len(rows) for _, rows in panels])
            data["bars"] = {}
            for ax, (batch, rows) in zip(axes, panels):
                rows = sorted(rows, key=lambda s: method_rank(s.method), reverse=True)  # eager on top
                ys = list(range(len(rows)))
                bars = {}
                for y, s in zip(ys, rows):
                    parts = s.parts or {"floor": 0.0, "above": 0.0, "gap": 0.0}
                    color = style(s.method).color
                    ax.barh(y, parts["floor"], color=FLOOR_COLOR, edgecolor=FLOOR_LINE, linewidth=0.5)
                    ax.barh(y, parts["above"], left=parts["floor"], color=color, edgecolor=color, linewidth=0.5)
                    ax.barh(y, parts["gap"], left=parts["floor"] + parts["above"], color=pale(color),
                            edgecolor=color, hatch=GAP_HATCH, linewidth=0.5)
                    ax.annotate(fmt(s.step_ms, "ms"), (parts["floor"] + parts["above"] + parts["gap"], y),
                                xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
                    bars[s.method] = dict(parts, step=s.step_ms)
                bar_panel(ax, list(ys), [display(s.method) for s in rows], max(s.step_ms for s in rows),
                          "ms per decode step", f"batch {fmt(batch)}, {dtype}")
                data["bars"][f"b{batch}"] = bars
            return _legend_below(fig, [
                Patch(facecolor=FLOOR_COLOR, edgecolor=FLOOR_LINE, label="floor: bytes ÷ bandwidth"),
                Patch(facecolor="0.45", label="GPU-busy above the floor (method's colour)"),
                Patch(facecolor="white", edgecolor="0.3", hatch=GAP_HATCH, label="gaps: no kernel running")])

        charts += _draw(f"chart-time-{dtype}", f"Where the time goes ({dtype})",
                        "Each bar is one method's median step at that batch: grey, the weight-read floor (the bytes "
                        "the step must read at the measured copy bandwidth; where the GPU was busy for less than it, "
                        "the busy time); solid, the rest of the GPU-busy time (the union of the kernels' intervals, "
                        "profiler); hatched, the gaps in which no kernel runs (launch work and bubbles).", draw)
    return charts


def boxes(found: dict[tuple[Any, str], dict[str, list[float]]]) -> list[Chart]:
    """Per dtype: a panel per batch, a box per method over its stored step samples."""
    charts = []
    keys = sorted(found, key=lambda k: (k[1] != "float32", k[1], sort_key(k[0])))
    for dtype in dict.fromkeys(d for _, d in keys):
        panels = [(b, found[(b, d)]) for b, d in keys if d == dtype]

        def draw(data: dict[str, Any], panels: list[Any] = panels, dtype: str = dtype) -> Any:
            fig, axes = _grid(len(panels), [len(per) for _, per in panels])
            data["boxes"] = {}
            for ax, (batch, per) in zip(axes, panels):
                methods = sorted(per, key=method_rank, reverse=True)
                art = ax.boxplot([per[m] for m in methods], **HORIZONTAL, widths=0.6, patch_artist=True,
                                 flierprops={"markersize": 2, "alpha": 0.5}, medianprops={"color": "black"})
                for box, flier, m in zip(art["boxes"], art["fliers"], methods):
                    box.set_facecolor(pale(style(m).color, 0.35))
                    box.set_edgecolor(style(m).color)
                    flier.set_markeredgecolor(style(m).color)
                    flier.set_marker(style(m).marker)
                ax.set_yticks(range(1, len(methods) + 1), [display(m) for m in methods], fontsize=7.5)
                ax.set_xlim(left=0)
                ax.set_xlabel("ms per decode step (each step a sample)")
                ax.set_title(f"batch {fmt(batch)}, {dtype}", fontsize=9)
                data["boxes"][f"b{batch}"] = {m: {"n": len(per[m]), "median": statistics.median(per[m])}
                                              for m in methods}
            fig.tight_layout()
            return fig

        charts += _draw(f"chart-samples-{dtype}", f"How each method's steps spread ({dtype})",
                        "The stored per-step samples of each method (no readback): the box spans the quartiles, the "
                        "black line is the median, the whiskers reach 1.5 × the interquartile range and the points "
                        "beyond them are single slow (or fast) steps.", draw)
    return charts


def panel(results: Results) -> Panel | None:
    """The step section's first block: stacked bars, the distance-to-floor table, the top kernels, the samples."""
    found = breakdown.splits(results)
    profiled = [s for s in found if s.parts is not None]
    if not profiled:
        return None
    blocks: list[Any] = [*stacked(profiled), breakdown.floor_table(found), *boxes(breakdown.samples(results)),
                         *breakdown.kernel_tables(results)]
    return Panel("where-time-goes", "Where the time goes", breakdown.answer(results, found), blocks)


def step_section(results: Results) -> Section:
    """The step section (report.sections.steps) opening with where the time goes."""
    section = steps.steps(results)
    section.panel = panel(results)
    return section
