"""Charts drawn with matplotlib and embedded in the page as inline SVG (no files, no network).

A chart that cannot be drawn (odd data) becomes a `Chart` with an error sentence instead of
stopping the page. Labels never go through mathtext (`text.parse_math` off), so a `$` in a method
name is just a character; matplotlib escapes text in the SVG it writes.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab import metrics as M  # noqa: E402
from lab.names import METHOD_ORDER, Method, method_rank  # noqa: E402
from lab.results import Results  # noqa: E402

from report.sections import _step_metrics, record  # noqa: E402
from report.tables import first, is_number, matching, sort_key  # noqa: E402

STYLE = {
    "svg.fonttype": "none",  # text stays text: small files, selectable labels
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


@dataclass
class Chart:
    id: str
    title: str
    caption: str
    svg: str = ""
    error: str = ""


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


def _draw(chart_id: str, title: str, caption: str, draw: Callable[[], Any]) -> Chart | None:
    """Run one drawing function under the report's style; None when it had nothing to draw."""
    try:
        with plt.rc_context(STYLE):
            fig = draw()
            if fig is None:
                return None
            return Chart(chart_id, title, caption, svg=_svg(fig, chart_id))
    except Exception as exc:  # a chart must never take the page down with it
        plt.close("all")
        return Chart(chart_id, title, caption, error=f"could not draw this chart ({type(exc).__name__}: {exc})")


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


def _colors(methods: list[Any]) -> dict[Any, Any]:
    cmap = plt.get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(methods)}


def step_time(results: Results) -> list[Chart]:
    """Step time against batch, one line per method, each method's bound dashed in the same colour."""
    cgd, ceil = record(results, "cuda_graph_decode"), record(results, "ceilings")
    steps = [m for m in _step_metrics(cgd) if not m.params.get("readback") and is_number(m.value)]
    charts = []
    for dtype in sorted({str(m.params.get("dtype")) for m in steps}):
        here = [m for m in steps if str(m.params.get("dtype")) == dtype]
        methods = sorted({m.params["method"] for m in here}, key=method_rank)

        def draw(here: list[Any] = here, methods: list[Any] = methods, dtype: str = dtype) -> Any:
            fig, ax = plt.subplots(figsize=(7.5, 4.2))
            colors = _colors(methods)
            for method in methods:
                pts = sorted(((m.params["batch"], m.value) for m in here if m.params["method"] == method),
                             key=lambda p: sort_key(p[0]))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colors[method], label=method)
                bounds = sorted(((m.params["batch"], m.value) for m in matching(ceil.metrics if ceil else [],
                                                                                  M.BOUND_MS, method=method)
                                 if str(m.params.get("dtype", dtype)) == dtype and is_number(m.value)),
                                key=lambda p: sort_key(p[0]))
                if bounds:
                    ax.plot([p[0] for p in bounds], [p[1] for p in bounds], linestyle="--", linewidth=1,
                            color=colors[method], alpha=0.7)
            bw = sorted(((m.params["batch"], m.value) for m in matching(ceil.metrics if ceil else [],
                                                                          M.BOUND_BANDWIDTH_MS)
                         if m.params.get("method") == methods[0] and is_number(m.value)), key=lambda p: sort_key(p[0]))
            if bw:
                ax.plot([p[0] for p in bw], [p[1] for p in bw], color="0.35", linestyle=":", linewidth=1.5,
                        label="bandwidth floor")
            if ceil and any(matching(ceil.metrics, M.BOUND_MS)):
                ax.plot([], [], linestyle="--", color="0.5", label="method's bound (dashed)")
            _log_axis(ax, "x", 2, sorted({m.params["batch"] for m in here}, key=sort_key))
            _log_axis(ax, "y")
            ax.set_xlabel("batch")
            ax.set_ylabel("median ms per step")
            ax.set_title(f"Decode step time vs batch ({dtype})")
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
            return fig

        chart = _draw(f"chart-step-{dtype}", f"Step time vs batch ({dtype})",
                      "Solid: measured median per method. Dashed: that method's largest lower bound "
                      "(launch, bandwidth or compute). Dotted: the weight-read floor at the measured bandwidth.",
                      draw)
        if chart:
            charts.append(chart)
    return charts


def compile_cost(results: Results) -> list[Chart]:
    """Cumulative time against calls: eager, compiled from a cold cache, compiled from a warm one."""
    rec = record(results, "compile_cost")
    charts = []
    targets = sorted({str(m.params.get("target")) for m in matching(rec.metrics if rec else [], M.FIRST_CALL_S)})
    for target in targets:
        cold = first(rec, M.FIRST_CALL_S, phase="cold", target=target)
        warm = first(rec, M.FIRST_CALL_S, phase="warm", target=target)
        eager = first(rec, M.STEADY_MS, method=Method.EAGER, target=target)
        comp = first(rec, M.STEADY_MS, method=Method.COMPILE_DEFAULT, target=target)
        if not all(m is not None and is_number(m.value) for m in (cold, eager, comp)):
            continue

        def draw(cold: Any = cold, warm: Any = warm, eager: Any = eager, comp: Any = comp, target: str = target) -> Any:
            saving = eager.value - comp.value
            phases = [("cold", cold)] + ([("warm", warm)] if warm is not None and is_number(warm.value) else [])
            evens = [p.value * 1e3 / saving for _, p in phases] if saving > 0 else []
            horizon = max(evens) * 1.6 if evens else 10_000
            xs = [0, horizon]
            fig, (bars, lines) = plt.subplots(1, 2, figsize=(8.5, 3.6), gridspec_kw={"width_ratios": [1, 2.4]})
            bars.bar([p for p, _ in phases], [m.value for _, m in phases], color=["#c0504d", "#4f81bd"][:len(phases)])
            bars.set_ylabel("first call, s")
            bars.set_title("compile cost")
            lines.plot(xs, [x * eager.value / 1e3 for x in xs], color="0.3", label=Method.EAGER)
            for (phase, m), color in zip(phases, ("#c0504d", "#4f81bd")):
                lines.plot(xs, [m.value + x * comp.value / 1e3 for x in xs], color=color, label=f"compiled, {phase}")
                if saving > 0:
                    x = m.value * 1e3 / saving
                    lines.axvline(x, color=color, linestyle=":", linewidth=1)
                    lines.annotate(f"break-even {x:,.0f}", (x, x * eager.value / 1e3), fontsize=7,
                                   xytext=(4, -12), textcoords="offset points", color=color)
            lines.set_xlabel("calls")
            lines.set_ylabel("cumulative s")
            lines.set_title(f"{target}: total time by calls")
            lines.legend(fontsize=7, frameon=False)
            fig.tight_layout()
            return fig

        chart = _draw(f"chart-compile-{target}", f"Cold vs warm compile ({target})",
                      "Left: first-call compile time from an empty and a populated cache. Right: total time after "
                      "N calls; where a compiled line crosses eager, compiling has paid for itself.", draw)
        if chart:
            charts.append(chart)
    return charts


def setup_cost(results: Results) -> list[Chart]:
    """Setup (compile and/or capture) seconds per method and batch, as grouped bars."""
    rec = record(results, "cuda_graph_decode")
    ms = [m for m in matching(rec.metrics if rec else [], M.SETUP_S) if is_number(m.value)]
    if not ms:
        return []

    def draw() -> Any:
        methods = sorted({m.params.get("method") for m in ms}, key=method_rank)
        batches = sorted({m.params.get("batch") for m in ms}, key=sort_key)
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        width = 0.8 / max(1, len(batches))
        for j, b in enumerate(batches):
            vals = [next((m.value for m in ms if m.params.get("method") == meth and m.params.get("batch") == b), 0)
                    for meth in methods]
            ax.bar([i + j * width for i in range(len(methods))], vals, width, label=f"batch {b}")
        ax.set_xticks([i + width * (len(batches) - 1) / 2 for i in range(len(methods))], [str(m) for m in methods],
                      rotation=20, ha="right")
        ax.set_ylabel("setup, s (log)")
        _log_axis(ax, "y")
        ax.legend(fontsize=7, frameon=False)
        ax.set_title("Compile / capture cost per method")
        return fig

    chart = _draw("chart-setup", "Compile and capture cost per method", "First call of each method: compile "
                  "and/or warm-up plus capture, seconds, log scale.", draw)
    return [chart] if chart else []


def fusion(results: Results) -> list[Chart]:
    """Fusion speedup against chain length, in and out of cache, with the N× ceiling."""
    rec = record(results, "fusion")
    sp = [m for m in matching(rec.metrics if rec else [], M.SPEEDUP) if is_number(m.value) and "n_ops" in m.params]
    if not sp:
        return []

    def draw() -> Any:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for residency in sorted({str(m.params.get("residency")) for m in sp}):
            pts = sorted(((m.params["n_ops"], m.value) for m in sp if str(m.params.get("residency")) == residency),
                         key=lambda p: sort_key(p[0]))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"measured, {residency}")
        ceil = sorted(((m.params["n_ops"], m.value) for m in matching(rec.metrics, M.CEILING_X)
                       if "n_ops" in m.params and is_number(m.value)), key=lambda p: sort_key(p[0]))
        if ceil:
            ax.plot([p[0] for p in ceil], [p[1] for p in ceil], linestyle="--", color="0.4", label="ceiling (bytes)")
        _log_axis(ax, "x", 2, sorted({m.params["n_ops"] for m in sp}, key=sort_key))
        ax.set_xlabel("elementwise ops in the chain")
        ax.set_ylabel("compiled speedup over eager, ×")
        ax.legend(fontsize=7, frameon=False)
        ax.set_title("Fusion: speedup vs chain length")
        return fig

    chart = _draw("chart-fusion", "Fusion", "Speedup of the compiled (fused) chain over eager; the dashed line is "
                  "the ceiling from bytes moved (N× for N ops).", draw)
    return [chart] if chart else []


def recompiles(results: Results) -> list[Chart]:
    """Compiles per dynamic setting, with the recompile limit drawn in."""
    rc, dr = record(results, "recompiles"), record(results, "decode_recompiles")
    a = [m for m in matching(rc.metrics if rc else [], M.COMPILES) if is_number(m.value)]
    b = [m for m in matching(dr.metrics if dr else [], M.COMPILES) if is_number(m.value)]
    if not a and not b:
        return []
    limit = first(rc, M.RECOMPILE_LIMIT)

    def draw() -> Any:
        panels = [(p, t) for p, t in ((a, "recompiles: 12 batch sizes"), (b, "decode_recompiles: 20 calls")) if p]
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels) + 1, 3.2), squeeze=False)
        for ax, (ms, title) in zip(axes[0], panels):
            labels = [", ".join(f"{v}" for k, v in m.params.items() if k != "calls") for m in ms]
            ax.bar(range(len(ms)), [m.value for m in ms], color="#4f81bd")
            ax.set_xticks(range(len(ms)), labels, rotation=20, ha="right")
            if limit is not None and is_number(limit.value):
                ax.axhline(limit.value, color="#c0504d", linestyle="--", linewidth=1, label=f"limit {limit.value}")
                ax.legend(fontsize=7, frameon=False)
            ax.set_ylabel(M.COMPILES)
            ax.set_title(title)
        fig.tight_layout()
        return fig

    chart = _draw("chart-recompiles", "Recompiles", "How many times Dynamo compiled each variant; the dashed line "
                  "is this torch's recompile limit.", draw)
    return [chart] if chart else []


def all_charts(results: Results) -> dict[str, list[Chart]]:
    """Charts per section id of the run page."""
    return {"speedups": step_time(results), "costs": setup_cost(results) + compile_cost(results),
            "dynamo": recompiles(results), "fusion": fusion(results)}


__all__ = ["Chart", "all_charts", "METHOD_ORDER"]
