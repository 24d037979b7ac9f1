"""Charts drawn with matplotlib and embedded in the page as inline SVG (no files, no network).

A chart that cannot be drawn (odd data) becomes a `Chart` with an error sentence instead of
stopping the page. Labels never go through mathtext (`text.parse_math` off), so a `$` in a method
name is just a character; matplotlib escapes text in the SVG it writes.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import matplotlib

matplotlib.use("Agg")
if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType
import matplotlib.pyplot as plt  # noqa: E402

from lab.contract import query as q  # noqa: E402
from lab.contract import metrics as M  # noqa: E402
from lab.contract.names import Experiment, method_rank, Param as P  # noqa: E402
from lab.contract.results import Results  # noqa: E402

from report.pages.compare import interval_of  # noqa: E402
from report.sections.costs import phase_figures  # noqa: E402
from report.pages.history import Series  # noqa: E402
from report.site.hosts import slug  # noqa: E402
from report.sections.steps import bound_of, floor_ms  # noqa: E402
from report.draw.style import FLOOR_LINE, display, style  # noqa: E402
from report.draw.tables import fmt, is_number, sort_key  # noqa: E402


STYLE: dict[RcKeyType, Any] = {"svg.fonttype": "none",  # text stays text: small files, selectable labels
                                "text.parse_math": False, "font.family": "sans-serif", "font.size": 9,
                                "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
                                "grid.alpha": 0.3}


@dataclass
class Chart:
    id: str
    title: str
    caption: str
    svg: str = ""
    error: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # what was drawn: series and marked values, for the tests


def _svg(fig: Any, salt: str) -> str:
    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML declaration and DOCTYPE: the SVG sits inside HTML
    # Scale with the page: keep the viewBox, let CSS choose the width.
    return re.sub(r'<svg([^>]*?) width="([^"]*)" height="[^"]*"',
                  lambda m: f'<svg{m.group(1)} class="chart-svg" style="max-width:{m.group(2)}"', text, count=1)


def _draw(chart_id: str, title: str, caption: str, draw: Callable[[dict[str, Any]], Any]) -> list[Chart]:
    """Run one drawing function under the report's style: its chart, none when it had nothing to draw. It fills
    `data` with what it drew (series label -> points, marked values), which the tests compare with the records."""
    data: dict[str, Any] = {}
    try:
        with plt.rc_context(STYLE):
            fig = draw(data)
            return [] if fig is None else [Chart(chart_id, title, caption, svg=_svg(fig, chart_id), data=data)]
    except Exception as exc:  # a chart must never take the page down with it
        plt.close("all")
        return [Chart(chart_id, title, caption, error=f"could not draw this chart ({type(exc).__name__}: {exc})")]


def _log_axis(ax: Any, axis: str, base: int = 10, ticks: list[Any] | None = None) -> None:
    """A log axis labelled with plain numbers (mathtext is off, so matplotlib's 10^x labels would show raw)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=base)
    if ticks:
        (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks)
    elif base == 10:
        target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def _labels(ax: Any, x: str = "", y: str = "", title: str = "", **legend: Any) -> None:
    """An axis's labels and title (those given), then its legend where `legend` holds its options (frameless)."""
    for text, put in ((x, ax.set_xlabel), (y, ax.set_ylabel), (title, ax.set_title)):
        if text:
            put(text)
    if legend:
        ax.legend(frameon=False, **legend)


PANEL_COLUMNS = 2
OUTSIDE: dict[str, Any] = {"fontsize": 7, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}  # legend right of it


def _grid(n: int, rows_per_panel: list[int], width: float = 10.0) -> tuple[Any, list[Any]]:
    """A figure of n panels, PANEL_COLUMNS to a row, each tall enough for its rows of bars."""
    cols = min(PANEL_COLUMNS, n)
    lines = math.ceil(n / cols)
    heights = [max(rows_per_panel[i * cols:(i + 1) * cols]) * 0.27 + 0.9 for i in range(lines)]
    fig, axes = plt.subplots(lines, cols, figsize=(width, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _legend_below(fig: Any, handles: list[Any]) -> Any:
    """The legend under the panels, outside every plotting area; the figure, its layout tightened."""
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(handles), frameon=False,
               fontsize=8)
    fig.tight_layout()
    return fig


def step_time(results: Results) -> list[Chart]:
    """Step time per dtype, each batch its own panel (methods never coincide into one blob): a horizontal bar per
    method in its declared colour on a linear axis from 0, that method's largest bound as a black tick, and the
    dtype's weight-read floor (bytes / bandwidth) as a dotted line."""
    cgd = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    steps = [m for m in q.all(cgd, M.STEP_MS, readback=False)
             if P.METHOD in m.params and P.BATCH in m.params and is_number(m.value)]
    charts = []
    for dtype in sorted({str(m.params.get(P.DTYPE)) for m in steps}, key=lambda d: (d != "float32", d)):
        here = [m for m in steps if str(m.params.get(P.DTYPE)) == dtype]
        batches = sorted({m.params[P.BATCH] for m in here}, key=sort_key)

        def draw(data: dict[str, Any], here: list[Any] = here, dtype: str = dtype, batches: list[Any] = batches) -> Any:
            from matplotlib.lines import Line2D
            from matplotlib.patheffects import withStroke

            rows = {b: sorted((m for m in here if m.params[P.BATCH] == b), key=lambda m: method_rank(m.params[P.METHOD]),
                              reverse=True) for b in batches}
            fig, axes = _grid(len(batches), [len(rows[b]) for b in batches])
            data.update(series={}, floor={}, bounds={}, dtype=dtype)
            for ax, b in zip(axes, batches):
                ys = range(len(rows[b]))
                for y, m in zip(ys, rows[b]):
                    method = m.params[P.METHOD]
                    ax.barh(y, m.value, color=style(method).color, height=0.7)
                    ax.annotate(fmt(m.value, "ms"), (m.value, y), xytext=(3, 0), textcoords="offset points",
                                va="center", fontsize=7)
                    data["series"].setdefault(str(method), []).append((b, m.value))
                    verdict = bound_of(results.experiments, str(method), b, dtype)
                    bound = None if verdict.why_not else verdict.bound
                    if bound is not None and is_number(bound.value):
                        ax.plot([bound.value], [y], marker="|", markersize=12, markeredgewidth=2, color="black",
                                linestyle="none", path_effects=[withStroke(linewidth=4, foreground="white")])
                        data["bounds"].setdefault(str(method), []).append((b, bound.value))
                floor = floor_ms(results, b, dtype)
                if floor is not None:
                    ax.axvline(floor, color=FLOOR_LINE, linestyle=":", linewidth=1.6)
                    data["floor"][b] = floor
                bar_panel(ax, list(ys), [display(m.params[P.METHOD]) for m in rows[b]],
                          max(m.value for m in rows[b]), "median ms per decode step", f"batch {fmt(b)}, {dtype}")
            return _legend_below(fig, [
                Line2D([], [], color=FLOOR_LINE, linestyle=":", label=f"weight-read floor ({dtype})"),
                Line2D([], [], color="black", marker="|", markersize=10, linestyle="none",
                       label="the method's largest bound (ceilings)")])

        charts += _draw(f"chart-step-{dtype}", f"Step time per method and batch ({dtype})",
                        "Each batch its own panel and each method its own colour (the same on every chart of the "
                        "report). Black tick: the method's largest lower bound (launch, bandwidth or compute); dotted: "
                        f"the {dtype} weight-read floor, the bytes a step must read at the measured copy bandwidth.",
                        draw)
    return charts


def bar_panel(ax: Any, ys: list[Any], labels: list[str], longest: float, xlabel: str, title: str) -> None:
    """The finish of one batch's panel of horizontal bars, a method a row (the step and the where-the-time-goes
    charts): the methods' names, room right of the longest bar for its label, no grid across the rows."""
    ax.set_yticks(ys, labels, fontsize=7.5)
    ax.set_xlim(0, longest * 1.22)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", visible=False)


def compile_cost(results: Results) -> list[Chart]:
    """Per target: time saved by compiling after N calls, per cache phase, from the stored saving per call and
    break-even: the line crosses zero at the stored break-even (never, where the compile never pays)."""
    rec = q.experiment(results, Experiment.COMPILE_COST)
    charts = []
    for target in sorted({str(m.params.get(P.TARGET)) for m in q.all(rec, M.BREAK_EVEN_CALLS)}):
        phases = [(phase, be, saving, fc) for phase, (fc, be) in phase_figures(rec, target).items()
                  if be is not None and (saving := q.maybe(rec, M.SAVING_MS_PER_CALL, phase=phase, target=target))
                  is not None and is_number(saving.value)]
        if not phases:
            continue

        def draw(data: dict[str, Any], phases: list[Any] = phases, target: str = target) -> Any:
            evens = [be.value for _, be, _, _ in phases if be.value is not None]
            horizon = max(evens) * 1.6 if evens else 10_000
            fig, (bars, lines) = plt.subplots(1, 2, figsize=(8.5, 3.6), gridspec_kw={"width_ratios": [1, 2.4]})
            colors = {"cold": "#c0504d", "warm": "#4f81bd"}
            shown = [(p, fc) for p, _, _, fc in phases if fc is not None and is_number(fc.value)]
            bars.bar([p for p, _ in shown], [fc.value for _, fc in shown], color=[colors[p] for p, _ in shown])
            _labels(bars, "cache at the first call", "first call (s)", "compile cost")
            lines.axhline(0, color="0.3", linewidth=1, label="eager (nothing saved)")
            data.update(break_even={}, first_call={p: fc.value for p, fc in shown}, series={})
            for phase, be, saving, fc in phases:
                slope = saving.value / 1e3  # seconds saved per call
                xs = [0, horizon]
                if be.value is not None:
                    ys = [(x - be.value) * slope for x in xs]  # zero exactly at the stored break-even
                    lines.axvline(be.value, color=colors[phase], linestyle=":", linewidth=1)
                    lines.annotate(f"break-even {fmt(be.value)}", (be.value, 0), fontsize=7, xytext=(4, 6),
                                   textcoords="offset points", color=colors[phase])
                else:  # it never pays: from the first call's cost, the line only falls (or stays) below zero
                    start = -fc.value if fc is not None and is_number(fc.value) else 0.0
                    ys = [start + x * slope for x in xs]
                    lines.annotate(f"never pays ({phase})", (horizon * 0.5, start + horizon * 0.5 * slope), fontsize=7,
                                   xytext=(0, 6 if phase == "cold" else -12), textcoords="offset points",
                                   color=colors[phase])
                lines.plot(xs, ys, color=colors[phase], label=f"compiled, {phase} cache")
                data["break_even"][phase] = be.value
                data["series"][phase] = list(zip(xs, ys))
            _labels(lines, "calls", "time saved by compiling (s)", f"{target}: time saved after N calls", **OUTSIDE)
            fig.tight_layout()
            return fig

        charts += _draw(f"chart-compile-{target}", f"Cold against warm compile ({target})",
                        "Left: the first call from an empty and from a populated cache. Right: the time compiling has "
                        "saved after N calls (the saving per call measured in that phase's process); below zero the "
                        "compile has not paid yet, and each line crosses zero at the stored break-even.", draw)
    return charts


def setup_cost(results: Results) -> list[Chart]:
    """Setup (compile and/or capture) seconds per method, one dot per batch and dtype, on a log axis (dots, not
    bars: a bar's length on a log axis means nothing)."""
    rec = q.experiment(results, Experiment.CUDA_GRAPH_DECODE)
    ms = [m for m in q.all(rec, M.SETUP_S) if is_number(m.value) and m.value > 0]
    if not ms:
        return []

    def draw(data: dict[str, Any]) -> Any:
        methods = sorted({m.params.get(P.METHOD) for m in ms}, key=method_rank, reverse=True)
        fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(methods) + 1.2))
        for y, meth in enumerate(methods):
            pts = sorted((m for m in ms if m.params.get(P.METHOD) == meth),
                         key=lambda m: (str(m.params.get(P.DTYPE)) != "float32", sort_key(m.params.get(P.BATCH))))
            st = style(meth)
            ax.plot([m.value for m in pts], [y] * len(pts), color=st.color, marker=st.marker, linestyle="none",
                    markersize=6, alpha=0.85)
            for m in pts:
                label = f"B={m.params.get(P.BATCH)}" + ("" if m.params.get(P.DTYPE) in (None, "float32") else " bf16")
                ax.annotate(label, (m.value, y), xytext=(0, 5), textcoords="offset points", fontsize=6, ha="center")
            data.setdefault("series", {})[str(meth)] = [(m.params.get(P.BATCH), m.params.get(P.DTYPE), m.value)
                                                        for m in pts]
        ax.set_yticks(range(len(methods)), [display(m) for m in methods], fontsize=7.5)
        ax.set_ylim(-0.6, len(methods) - 0.3)
        _log_axis(ax, "x")
        _labels(ax, "setup (s, log): compile and/or capture, first call included", "",
                "Compile / capture cost per method")
        fig.tight_layout()
        return fig

    return _draw("chart-setup", "Compile and capture cost per method", "First call of each method: compile "
                 "and/or warm-up plus capture, seconds on a log axis; one dot per batch (bf16 marked).", draw)


def fusion(results: Results) -> list[Chart]:
    """Fusion speedup against chain length, in and out of cache, with the N× ceiling."""
    rec = q.experiment(results, Experiment.FUSION)
    sp = [m for m in q.all(rec, M.SPEEDUP) if is_number(m.value) and P.N_OPS in m.params]
    if not sp:
        return []

    def draw(data: dict[str, Any]) -> Any:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for residency in sorted({str(m.params.get(P.RESIDENCY)) for m in sp}):
            pts: list[tuple[Any, Any]] = sorted(((m.params[P.N_OPS], m.value) for m in sp
                                                 if str(m.params.get(P.RESIDENCY)) == residency),
                         key=lambda p: sort_key(p[0]))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"measured, {residency}")
            data.setdefault("series", {})[residency] = pts
        ceil: list[tuple[Any, Any]] = sorted(((m.params[P.N_OPS], m.value) for m in q.all(rec, M.CEILING_X)
                       if P.N_OPS in m.params and is_number(m.value)), key=lambda p: sort_key(p[0]))
        if ceil:
            ax.plot([p[0] for p in ceil], [p[1] for p in ceil], linestyle="--", color="0.4", label="ceiling (bytes)")
        _log_axis(ax, "x", 2, sorted({m.params[P.N_OPS] for m in sp}, key=sort_key))
        _labels(ax, "elementwise ops in the chain (count)", "compiled speedup over eager (×)",
                "Fusion: speedup against chain length", **OUTSIDE)
        return fig

    return _draw("chart-fusion", "Fusion", "Speedup of the compiled (fused) chain over eager; the dashed line is "
                 "the ceiling from bytes moved (N× for N ops).", draw)


def recompiles(results: Results) -> list[Chart]:
    """Compiles per dynamic setting, with the recompile limit drawn in."""
    rc, dr = q.experiment(results, Experiment.RECOMPILES), q.experiment(results, Experiment.DECODE_RECOMPILES)
    a, b = ([m for m in q.all(r, M.COMPILES) if is_number(m.value)] for r in (rc, dr))
    if not a and not b:
        return []
    limit = q.maybe(rc, M.RECOMPILE_LIMIT)

    def draw(data: dict[str, Any]) -> Any:
        panels = [(p, t) for p, t in ((a, "recompiles: 12 batch sizes"), (b, "decode_recompiles: 20 calls")) if p]
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels) + 1, 3.2), squeeze=False)
        for ax, (ms, title) in zip(axes[0], panels):
            labels = [", ".join(f"{v}" for k, v in m.params.items() if k != "calls") for m in ms]
            ax.bar(range(len(ms)), [m.value for m in ms], color="#4f81bd")
            ax.set_xticks(range(len(ms)), labels, rotation=20, ha="right")
            shown = title
            if limit is not None and is_number(limit.value):
                ax.axhline(limit.value, color="#c0504d", linestyle="--", linewidth=1)
                shown += f"\n(dashed: limit {limit.value})"  # named in the title: no legend over the bars
            _labels(ax, "setting", "frames compiled (count)", shown)
            data.setdefault("series", {})[title] = list(zip(labels, [m.value for m in ms]))
        fig.tight_layout()
        return fig

    return _draw("chart-recompiles", "Recompiles", "How many times Dynamo compiled each variant; the dashed line "
                 "is this torch's recompile limit.", draw)


def amdahl(results: Results) -> list[Chart]:
    """Per workload: Amdahl's prediction, the launch-aware one and the measured speedup, as bars."""
    rec = q.experiment(results, Experiment.AMDAHL)
    specs = (M.PREDICTED_SPEEDUP, M.PREDICTED_SPEEDUP_LAUNCH, M.MEASURED_SPEEDUP)
    workloads = sorted({str(m.params.get(P.WORKLOAD)) for m in q.all(rec, M.PREDICTED_SPEEDUP)})
    if not workloads:
        return []

    def draw(data: dict[str, Any]) -> Any:
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        labels = ("Amdahl (fusion only)", "launch-aware", "measured")
        width = 0.8 / len(specs)
        for j, (spec, label, color) in enumerate(zip(specs, labels, ("#9bbb59", "#4f81bd", "#c0504d"))):
            vals = [m.value if (m := q.maybe(rec, spec, workload=w)) is not None and is_number(m.value) else 0.0
                    for w in workloads]
            ax.bar([i + j * width for i in range(len(workloads))], vals, width, label=label, color=color)
            data.setdefault("series", {})[label] = list(zip(workloads, vals))
        ax.axhline(1.0, color="0.3", linewidth=0.8)
        ax.set_xticks([i + width for i in range(len(workloads))], workloads)
        _labels(ax, "workload", "compile speedup over eager (×)", "Predicted against measured", **OUTSIDE)
        return fig

    return _draw("chart-amdahl", "Amdahl against the launch-aware prediction", "Bars at 0: not predicted or not "
                 "measured in this run (the table says which).", draw)


MARK_COLOUR = {"regression": "#b42318", "improvement": "#137a3a"}  # else the accent


def history(s: Series) -> Chart | None:
    """One host and profile's headline figures over its runs in order (report.pages.history): each run's stored value with
    its stored 95% interval as a bar, coloured by its mark against the previous run (compare's rule on the
    intervals: a regression red, an improvement green). None: fewer than two runs hold any figure."""
    figs = {label: pts for label, pts in s.points.items()
            if sum(p.found is not None and is_number(p.found[0].value) for p in pts) > 1}
    if not figs:
        return None

    def draw(data: dict[str, Any]) -> Any:
        fig, axes = plt.subplots(len(figs), 1, figsize=(8, 1.5 * len(figs) + 0.6), sharex=True, squeeze=False)
        for ax, (label, pts) in zip(axes[:, 0], figs.items()):
            drawn = [(i, float(p.found[0].value), interval_of(*p.found), p.mark) for i, p in enumerate(pts)
                     if p.found is not None and is_number(p.found[0].value)]
            ax.plot([d[0] for d in drawn], [d[1] for d in drawn], color="#98a2b3", lw=0.8, zorder=1)
            for i, y, (low, high), mark in drawn:
                err = None if low is None or high is None else [[max(0.0, y - low)], [max(0.0, high - y)]]
                ax.errorbar([i], [y], yerr=err, fmt="o", ms=4, capsize=3, color=MARK_COLOUR.get(mark, "#2b5cab"))
            ax.set_title(label, loc="left", fontsize=9)
            data[label] = [(s.runs[i].name, y, low, high, mark) for i, y, (low, high), mark in drawn]
        axes[-1, 0].set_xticks(range(len(s.runs)), [r.name for r in s.runs], rotation=20, ha="right")
        return fig

    return next(iter(_draw(
        f"history-chart-{slug(s.host)}-{s.profile}", f"{s.host} · profile {s.profile}", f"each headline figure over "
        f"the runs, ordered by {s.order}; bars: the stored 95% interval; red: a regression, green: an improvement "
        "against the previous run (compare's rule)", draw)), None)


def all_charts(results: Results) -> dict[str, list[Chart]]:
    """Charts per section id of the run page."""
    return {"steps": step_time(results), "costs": setup_cost(results) + compile_cost(results),
            "dynamo": recompiles(results), Experiment.FUSION: fusion(results), Experiment.AMDAHL: amdahl(results)}
