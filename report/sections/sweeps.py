"""The sweeps' sections of a run page (issue 14), each from its stored records: a chart, tables, and the
experiment's own conclusion with the rule that drew it.

`sections(run)` gives one Section per sweep experiment present in the run (none when the run has no
sweep); each section's trace table links to the compile-trace pages report.site.traces writes, where the run
kept them. Nothing here recomputes a derived figure: speedups, crossovers, scores and conclusions are read
as the experiments stored them.
"""

from __future__ import annotations

from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab.contract import query as q  # noqa: E402
from lab.contract import metrics as M  # noqa: E402
from lab.contract import notes as N  # noqa: E402
from lab.contract.catalogue import CATALOGUE  # noqa: E402
from lab.contract.names import Experiment, method_rank, Param as P, Status  # noqa: E402
from lab.contract.results import Record  # noqa: E402

from report.draw.charts import Chart, _draw, _labels, _log_axis  # noqa: E402
from report.site.traces import NOTE_TRACES, trace_href, trace_source  # noqa: E402
from report.sections.section import Section, noted, why_absent  # noqa: E402
from report.draw.tables import (Cell, Table, fmt, interval_text, is_number, num, param_cells, sort_key,  # noqa: E402
                                timing_cell, value_cell)

SWEEP_IDS = tuple(spec.id for spec in CATALOGUE if spec.sweep)
# What model_scaling's table prints under a step's median: (metric, words, whether its interval goes beside it)
UNDER_THE_MEDIAN = ((M.SPEEDUP_VS_EAGER, "{}x", False), (M.MBU, "MBU {}", True), (M.KERNELS_PER_STEP, "{} kernels", False))


def _values(rec: Record | None, spec: M.MetricSpec, **params: Any) -> list[Any]:
    return [m for m in q.all(rec, spec, **params) if is_number(m.value)]


def _trace_table(run: Any, rec: Record) -> Table:
    """The compile traces the record lists; an item links to its page only where the run kept the trace (a
    path that is not safe raises report.site.traces.TraceError: the run is skipped, never half-published)."""
    table = Table(columns=["compiled item", "compilations", "recompilations", "graph breaks", "failures", "tlparse"],
                  caption="Compile traces: what Dynamo and Inductor did for each compiled item (a link: its page; "
                          "no link: the run folder did not keep the trace)")
    for item, info in sorted(noted(rec, NOTE_TRACES, dict).items()):
        kept = trace_source(run, rec.id, item, info) is not None
        href = f"{trace_href(run, info)}/index.html" if kept else ""
        table.rows.append([Cell(item, href=href), num(info.get("compile_count")), num(info.get("recompile_count")),
                           num(info.get("graph_break_count")), num(info.get("failed_count")),
                           Cell(fmt(info.get("tlparse")))])
    return table


def _section(run: Any, rid: str, title: str, build: Callable[[Record], tuple[list[Table], list[Chart]]]) -> Section:
    rec = q.experiment(run.results, rid)
    if rec is None or rec.status != Status.OK:
        return Section(f"sweep-{rid}", title, empty=why_absent(run.results, rid))
    tables, charts = build(rec)
    tables = [t for t in tables + [_trace_table(run, rec)] if t]
    empty = "" if tables or charts else f"{rid} ran but recorded none of the metrics this section shows."
    c, rule = q.maybe(rec, M.CONCLUSION), rec.notes.get(N.CONCLUSION_RULE.key)
    conclusion = f"Conclusion (drawn by the experiment from its numbers): {c.value}" if c else \
        "No conclusion was stored."
    return Section(f"sweep-{rid}", title, conclusion + (f" Rule: {rule}" if rule else ""), tables, charts, empty)


# ---------------------------------------------------------------------------- peer_generate

def _peer(rec: Record) -> tuple[list[Table], list[Chart]]:
    steps = _values(rec, M.STEP_MS)
    batches = sorted({m.params.get(P.BATCH) for m in steps} | {m.params.get(P.BATCH) for m in
                                                              q.all(rec, M.OUTCOME)}, key=sort_key)
    rows: dict[tuple[str, str], dict[Any, Cell]] = {}
    for m in steps:
        who = m.params.get(P.METHOD) or m.params.get(P.VARIANT)
        sp = q.maybe(rec, M.SPEEDUP_VS_PEER, method=who, batch=m.params.get(P.BATCH)) if m.params.get(P.METHOD) else None
        extra = f"{fmt(sp.value)}x vs {sp.params.get(P.PEER)}" if sp else ""
        rows.setdefault((m.params.get(P.IMPL, ""), str(who)), {})[m.params.get(P.BATCH)] = timing_cell(m, extra=extra)
    for m in q.all(rec, M.OUTCOME):
        if m.value != Status.OK:
            rows.setdefault((str(m.params.get(P.IMPL, "")), str(m.params.get(P.VARIANT))), {})[m.params.get(P.BATCH)] = \
                Cell(str(m.value), cls="bad", title=str(rec.notes.get(N.ERRORS.key_for(
                    variant=m.params.get(P.VARIANT), batch=m.params.get(P.BATCH)), "")))
    order = sorted(rows, key=lambda k: (k[0] != "lab", method_rank(k[1])))
    table = Table(columns=["implementation", "method / variant"] + [f"batch {b}" for b in batches],
                  caption="Median ms per token (lab: per step, token read back each step); lab rows show the speedup "
                          "over transformers' best variant at that batch",
                  rows=[[Cell(impl), Cell(who)] + [rows[(impl, who)].get(b, Cell("—")) for b in batches]
                        for impl, who in order])
    costs = Table(columns=["variant", "batch", "first call", "setup beyond steady calls", "tokens equal the lab's"],
                  caption="transformers: the first generate call (it compiles, where compiled) and the warm-up's extra",
                  rows=[[*param_cells(m.params, P.VARIANT, P.BATCH), num(m.value, m.unit),
                         value_cell(q.maybe(rec, M.SETUP_S, **m.params), M.SETUP_S.unit),
                         Cell(fmt(eq.value) if (eq := q.maybe(rec, M.TOKENS_EQUAL, **m.params)) else "—")]
                        for m in q.all(rec, M.FIRST_CALL_S)])

    def draw(data: dict[str, Any]) -> Any:
        labels = [f"{impl}: {who}" for impl, who in order]
        fig, ax = plt.subplots(figsize=(8, 3.6))
        width = 0.8 / max(1, len(batches))
        for j, b in enumerate(batches):
            vals = [next((m.value for m in steps if m.params.get(P.IMPL) == impl and m.params.get(P.BATCH) == b
                          and str(m.params.get(P.METHOD) or m.params.get(P.VARIANT)) == who), 0)
                    for impl, who in (label.split(": ", 1) for label in labels)]
            ax.bar([i + j * width for i in range(len(labels))], vals, width, label=f"batch {b}")
        ax.set_xticks([i + width * (len(batches) - 1) / 2 for i in range(len(labels))], labels, rotation=20,
                      ha="right")
        _log_axis(ax, "y")
        _labels(ax, "", "median ms per token (log)",
                "The lab's step vs transformers' generate, same weights (missing bar: did not run OK)", fontsize=7)
        return fig

    return [table, costs], _draw("chart-peer", "ms per token", "Lower is better. Lab: one fixed-shape step per "
                                 "token, token read back each step; transformers: time between tokens inside "
                                 "generate, after warm-up calls.", draw) if steps else []


# ---------------------------------------------------------------------------- model_scaling


def _log_or_none(ax: Any, panel: str, missing: str, data: dict[str, Any]) -> None:
    """A panel's x axis on a log scale where it drew points (data[panel]); else it says what the run did not store,
    where a log scale of nothing would be an empty frame (and matplotlib's warning on the console)."""
    if panel in data:
        _log_axis(ax, "x")
        return
    ax.text(0.5, 0.5, missing, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="0.4")
    ax.set_xticks([])
    data.setdefault("empty", []).append(panel)


def _scaling(rec: Record) -> tuple[list[Table], list[Chart]]:
    steps = _values(rec, M.STEP_MS)
    params_of = {key[P.SIZE]: float(v) for k, v in rec.notes.items()
                 if (key := N.PARAMETERS.parse(k)) is not None and isinstance(v, (int, float))}
    cases = sorted({(m.params.get(P.DTYPE), m.params.get(P.BATCH)) for m in steps}, key=lambda k: (str(k[0]),
                                                                                                  sort_key(k[1])))
    methods = sorted({m.params.get(P.METHOD) for m in steps}, key=method_rank)
    table = Table(columns=["size", "dtype", "batch"] + [str(m) for m in methods] + ["MB/step"],
                  caption="Median ms per step; under it the speedup over eager, MBU and kernels per step")
    keys = sorted({(m.params.get(P.SIZE), m.params.get(P.DTYPE), m.params.get(P.BATCH)) for m in steps},
                  key=lambda k: (str(k[1]), sort_key(k[2]), params_of.get(k[0], 0)))
    for size, dtype, batch in keys:
        p: dict[str, Any] = {P.SIZE: size, P.DTYPE: dtype, P.BATCH: batch}
        row = param_cells(p, P.SIZE, P.DTYPE, P.BATCH)
        for method in methods:
            extra = " · ".join(  # under the median, each where stored; MBU with its interval where stored
                f"{words.format(fmt(f.value))} {interval_text(q.interval(rec, spec, **p, method=method)) if ranged else ''}"
                .rstrip() for spec, words, ranged in UNDER_THE_MEDIAN if (f := q.maybe(rec, spec, **p, method=method)))
            row.append(timing_cell(q.maybe(rec, M.STEP_MS, **p, method=method), extra=extra))
        b = q.maybe(rec, M.BYTES_PER_STEP, **p)
        row.append(num(b.value / 1e6 if b else None))
        table.rows.append(row)
    gains = Table(columns=["method", "dtype", "batch", "smallest", "largest", "speedup largest / smallest"],
                  caption="gain_ratio: below 1, the method's gain over eager shrank as the model grew",
                  rows=[[*param_cells(m.params, P.METHOD, P.DTYPE, P.BATCH, P.SMALLEST, P.LARGEST),
                         num(m.value, m.unit)] for m in q.all(rec, M.GAIN_RATIO)])

    def draw(data: dict[str, Any]) -> Any:
        sp = _values(rec, M.SPEEDUP_VS_EAGER)
        if not sp:
            return None
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
        for method in sorted({m.params.get(P.METHOD) for m in sp}, key=method_rank):
            for dtype, batch in cases:  # a size whose parameter count the run did not note has no place on the axis
                pts = sorted((params_of[m.params.get(P.SIZE)] / 1e6, m.value) for m in sp
                             if (m.params.get(P.METHOD), m.params.get(P.DTYPE), m.params.get(P.BATCH))
                             == (method, dtype, batch) and params_of.get(m.params.get(P.SIZE), 0) > 0)
                if pts:
                    left.plot(*zip(*pts), marker="o", label=f"{method}, {dtype}, b{batch}")
                    data.setdefault("left", {})[f"{method}, {dtype}, b{batch}"] = pts
        _log_or_none(left, "left", "no parameter counts stored", data)
        _labels(left, "parameters, millions (log)", "speedup over eager, x", "Gain vs model size",
                **({"fontsize": 6} if "left" in data else {}))
        fk = _values(rec, M.FLOPS_PER_KERNEL)
        for method in sorted({m.params.get(P.METHOD) for m in fk}, key=method_rank):
            here = [(m.value, q.maybe(rec, M.SPEEDUP_VS_EAGER, **m.params)) for m in fk if m.params.get(P.METHOD) == method]
            pts = sorted((x / 1e6, s.value) for x, s in here if s is not None and x > 0)
            if pts:
                right.scatter([x for x, _ in pts], [y for _, y in pts], label=str(method))
                data.setdefault("right", {})[str(method)] = pts
        _log_or_none(right, "right", "no FLOPs per kernel stored", data)
        _labels(right, "MFLOP per kernel (log)", "speedup over eager, x", "Gain vs arithmetic per launch",
                **({"fontsize": 7} if "right" in data else {}))
        fig.tight_layout()
        return fig

    return [table, gains], _draw("chart-scaling", "Speedup over eager by model size",
                                 "Left: each method's speedup over eager against parameters, one line per dtype and "
                                 "batch. Right: the same speedups against the FLOPs each kernel launch carries.",
                                 draw)


# ---------------------------------------------------------------------------- context_scaling

def _context(rec: Record) -> tuple[list[Table], list[Chart]]:
    steps = _values(rec, M.STEP_MS)
    cross = Table(columns=["batch", "fill", "crossover (slots)", "what happened", "fixed / best growing, by length"],
                  caption="Where the fixed-shape step stops beating the best growing-cache step")
    notes = noted(rec, N.CROSSOVERS.key, dict)
    for m in q.all(rec, M.CROSSOVER_MAX_LEN):
        n = notes.get(N.CROSSOVERS.entry_for(batch=m.params.get(P.BATCH), fill=m.params.get(P.FILL))) or {}
        ratios = ", ".join(f"{k}: {v}" for k, v in (n.get("fixed_over_best_growing") or {}).items())
        cross.rows.append([*param_cells(m.params, P.BATCH, P.FILL), num(m.value), Cell(str(n.get("how", ""))),
                           Cell(ratios)])
    batches = sorted({m.params.get(P.BATCH) for m in steps}, key=sort_key)

    def draw(data: dict[str, Any]) -> Any:
        fig, axes = plt.subplots(1, len(batches), figsize=(4.6 * len(batches), 3.6), squeeze=False)
        for ax, batch in zip(axes[0], batches):
            here = [m for m in steps if m.params.get(P.BATCH) == batch]
            fills = sorted({m.params.get(P.FILL) for m in here}, key=sort_key)
            colors = {f: plt.get_cmap("viridis")(i / max(1, len(fills) - 1)) for i, f in enumerate(fills)}
            for variant in sorted({m.params.get(P.VARIANT) for m in here}):
                style = "-" if str(variant).startswith("fixed") else ("--" if "eager" in str(variant) else ":")
                for fill in fills:
                    pts = sorted((m.params.get(P.MAX_LEN), m.value) for m in here
                                 if m.params.get(P.VARIANT) == variant and m.params.get(P.FILL) == fill)
                    ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle=style, marker="o", markersize=3,
                            color=colors[fill], label=f"{variant}, {fill:.0%} full")
            for m in q.all(rec, M.CROSSOVER_MAX_LEN, batch=batch):
                if is_number(m.value):
                    ax.axvline(m.value, color=colors.get(m.params.get(P.FILL), "0.5"), linewidth=0.8, alpha=0.6)
            _log_axis(ax, "x", 2)
            ax.set_xticks(sorted({m.params.get(P.MAX_LEN) for m in here}, key=sort_key))
            _log_axis(ax, "y")
            _labels(ax, "cache length, slots (log2)", "median ms per step (log)", f"batch {batch}", fontsize=5.5)
        fig.tight_layout()
        return fig

    return [cross], _draw("chart-context", "Step time vs cache length",
                          "Solid: the fixed-shape step (attends every slot); dashed: the growing step eager; dotted: "
                          "compiled with dynamic shapes; colour: how full the cache is; vertical lines: crossovers.",
                          draw) if steps else []


# ---------------------------------------------------------------------------- graph_buckets

def _buckets(rec: Record) -> tuple[list[Table], list[Chart]]:
    ladders = noted(rec, N.LADDERS.key, dict)
    specs = (M.BUCKET_GRAPHS, M.CAPTURE_S, M.GRAPH_POOL_MIB, M.WASTE_FRACTION, M.EXPECTED_STEP_MS, M.TIME_MEMORY_SCORE)
    table = Table(columns=["ladder", "captured graphs", "capture", "graph memory", "padded rows", "expected step", "time x memory"],
                  caption="Each ladder over a uniform mix of batch sizes (time x memory relative to the first ladder)",
                  rows=[[Cell(name, title=str(ladders[name]))]
                        + [value_cell(q.maybe(rec, s, ladder=name)) for s in specs] for name in ladders])
    steps = sorted(_values(rec, M.STEP_MS), key=lambda m: sort_key(m.params.get(P.BUCKET)))

    def draw(data: dict[str, Any]) -> Any:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [1.6, 1]})
        left.plot([m.params.get(P.BUCKET) for m in steps], [m.value for m in steps], color="0.3",
                  label=f"{steps[0].params.get(P.METHOD)} step")
        for i, (name, sizes) in enumerate(ladders.items()):
            pts = [(m.params.get(P.BUCKET), m.value) for m in steps if m.params.get(P.BUCKET) in set(sizes)]
            left.scatter([x for x, _ in pts], [y for _, y in pts], s=12 + 8 * i, marker="os^"[i % 3], alpha=0.7,
                         label=f"{name} buckets")
        _labels(left, "batch size (bucket)", "median ms per step", "Step time per bucket", fontsize=7)
        names = list(ladders)
        exp = [q.maybe(rec, M.EXPECTED_STEP_MS, ladder=n) for n in names]
        right.bar(names, [e.value if e else 0 for e in exp], color="#4f81bd")
        for i, n in enumerate(names):
            mem = q.maybe(rec, M.GRAPH_POOL_MIB, ladder=n)
            waste = q.maybe(rec, M.WASTE_FRACTION, ladder=n)
            text = f"{waste.value:.0%} padded" if waste else ""
            text += f"\n{mem.value:,.0f} MiB" if mem else ""
            right.annotate(text, (i, e.value if (e := exp[i]) else 0), ha="center", va="bottom", fontsize=7)
        _labels(right, "", "expected ms per step (uniform mix)", "Ladders")
        fig.tight_layout()
        return fig

    return [table], _draw("chart-buckets", "Bucket ladders", "Left: step time of each batch size's graph (eager "
                          "where nothing can be captured), the buckets of each ladder marked. Right: the mean step "
                          "time of a uniform mix of batch sizes padded to each ladder's buckets, with the share of "
                          "padded rows and the graphs' memory.", draw) if steps else []


# ---------------------------------------------------------------------------- data_dependent_branch

def _branch(rec: Record) -> tuple[list[Table], list[Chart]]:
    dyn = Table(columns=["version", "batch", "Dynamo graphs", "breaks", "one graph (fullgraph)", "break reasons"],
                caption="What Dynamo makes of each version of the step (torch._dynamo.explain)")
    for m in q.all(rec, M.GRAPHS):
        p = m.params
        breaks = q.maybe(rec, M.GRAPH_BREAKS, **p)
        full = q.maybe(rec, M.STEP_COMPILES, **p)
        reasons = noted(rec, N.BREAK_REASONS.key_for(version=p.get(P.VERSION), batch=p.get(P.BATCH)), list)
        err = noted(rec, N.FULLGRAPH_ERROR.key_for(version=p.get(P.VERSION), batch=p.get(P.BATCH)), str)
        dyn.rows.append([*param_cells(p, P.VERSION, P.BATCH), num(m.value),
                         num(breaks.value if breaks else None), Cell(fmt(full.value) if full else "—", title=err),
                         Cell("; ".join(reasons) + (f" — fullgraph: {err}" if err else ""), cls="reason")])
    for m in q.all(rec, M.CAPTURES):
        err = noted(rec, N.CAPTURE_ERROR.key_for(batch=m.params.get(P.BATCH)), str)
        dyn.rows.append([*param_cells(m.params, P.VARIANT, P.BATCH), Cell("—"), Cell("—"),
                         Cell("captured" if m.value else "capture failed", cls="good" if m.value else "bad"),
                         Cell(err, cls="reason")])
    steps = _values(rec, M.STEP_MS)
    cost = Table(columns=["variant", "batch", "setup", "step", "tokens equal the eager host-checked step's"],
                 caption="Cost of each variant (the torch.where loop reads the done mask back every few steps)")
    for m in sorted(steps, key=lambda m: (sort_key(m.params.get(P.BATCH)), str(m.params.get(P.VARIANT)))):
        p = m.params
        setup, eq = q.maybe(rec, M.SETUP_S, **p), q.maybe(rec, M.TOKENS_EQUAL, **p)
        sp = q.maybe(rec, M.SPEEDUP_VS_EAGER, **p)
        cost.rows.append([*param_cells(p, P.VARIANT, P.BATCH), value_cell(setup, M.SETUP_S.unit),
                          timing_cell(m, extra=f"{fmt(sp.value)}x vs eager host check" if sp else ""),
                          Cell(fmt(eq.value) if eq else "reference")])

    def draw(data: dict[str, Any]) -> Any:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ordered = sorted(steps, key=lambda m: (sort_key(m.params.get(P.BATCH)), str(m.params.get(P.VARIANT))))
        labels = [f"{m.params.get(P.VARIANT)} (b{m.params.get(P.BATCH)})" for m in ordered]
        colors = ["#c0504d" if "host" in str(m.params.get(P.VARIANT)) else "#4f81bd" for m in ordered]
        ax.barh(labels, [m.value for m in ordered], color=colors)
        _log_axis(ax, "x")
        _labels(ax, "median ms per step (log)", "", "Host-checked (red) vs torch.where (blue)")
        return fig

    return [dyn, cost], _draw("chart-branch", "Cost of the end-of-sequence check",
                              "Median step time of each variant; red: the step with a Python branch on a device "
                              "value, blue: the torch.where rewrite.", draw) if steps else []


BUILDERS: dict[str, tuple[str, Callable[[Record], tuple[list[Table], list[Chart]]]]] = {
    Experiment.PEER_GENERATE: ("transformers' generate beside the lab's step", _peer),
    Experiment.MODEL_SCALING: ("Model size: does the graph gain shrink?", _scaling),
    Experiment.CONTEXT_SCALING: ("Context length: fixed-shape vs growing cache", _context),
    Experiment.GRAPH_BUCKETS: ("Batch buckets: a few graphs for any batch size", _buckets),
    Experiment.DATA_DEPENDENT_BRANCH: ("A data-dependent stop inside the step", _branch), }


def headline(results: Any) -> str | None:
    """The lab's best step beside transformers' best generate, as peer_generate concluded it (for a front page)."""
    rec = q.experiment(results, Experiment.PEER_GENERATE)
    c = q.maybe(rec, M.CONCLUSION) if rec is not None and rec.status == Status.OK else None
    return str(c.value) if c else None


def sections(run: Any) -> list[Section]:
    """A section per sweep experiment in the run (`run`: report.site.discover.Run); none when it has no sweep."""
    present = {r.id for r in run.results.experiments}
    return [_section(run, rid, *BUILDERS[rid]) for rid in SWEEP_IDS if rid in present and rid in BUILDERS]
