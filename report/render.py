"""The report: a pure function from run directories to a static folder of HTML pages.

    site/index.html          every run found, what was skipped and why, links
    site/run-<name>.html     one page per run: environment, ceilings, speedups, costs, Dynamo,
                             correctness, charts, what did not run, and every experiment's metrics
    site/compare.html        with two or more runs: each run against the first

Pages are self-contained (CSS inline, charts as inline SVG): they open from disk with no network.
Jinja2 autoescapes everything; the only unescaped content is the SVG matplotlib wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from lab import metrics as M
from lab import units
from lab.compare import Comparison, Side, compare
from lab.results import Results

from report import charts, sections, sweeps
from report.discover import Run, SkippedFile, load_runs
from report.tables import Cell, Table, fmt, pivot

STATUSES = ("OK", "NOT_RUN", "FAILED")


@dataclass
class RunPage:
    run: Run
    file: str
    title: str
    counts: dict[str, int]
    overview: Table
    sections: list[sections.Section]
    experiments: list[sections.ExperimentView]


@dataclass
class Site:
    out: Path
    index: Path
    pages: list[Path] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    compare: Path | None = None


def environment() -> Environment:
    env = Environment(loader=PackageLoader("report", "templates"), autoescape=select_autoescape(["html", "css"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    return env


def counts(results: Results) -> dict[str, int]:
    return {s: sum(r.status == s for r in results.experiments) for s in STATUSES}


def device_text(results: Results) -> str:
    m = results.manifest
    gpus = ((m.get("gpu") or {}).get("nvidia_smi") or {}).get("gpus") or []
    if gpus and isinstance(gpus[0], dict) and gpus[0].get("name"):
        return f"{gpus[0]['name']} (driver {gpus[0].get('driver_version', '?')})"
    cpu = m.get("cpu") or {}
    return f"CPU: {cpu.get('model') or '?'} ({cpu.get('usable_cores') or '?'} cores)"


def fusion(results: Results) -> sections.Section | None:
    rec = sections.record(results, "fusion")
    if rec is None or rec.status != "OK":
        return None
    table = pivot(rec, ["n_ops", "residency"], [M.SPEEDUP, M.CEILING_X])
    table.caption = "Compiled (fused) chain over eager, against the bytes ceiling"
    return sections.Section("fusion", "Fusion", "", [table] if table else [],
                            empty="" if table else "fusion ran but recorded no speedup metrics.")


def run_page(run: Run) -> RunPage:
    """Everything on one run's page, grouped and formatted: the template only lays it out."""
    res = run.results
    secs = [sections.environment(res), sections.ceilings(res), sections.speedups(res), sections.costs(res),
            sections.dynamo(res)]
    fus = fusion(res)
    if fus is not None:
        secs.append(fus)
    secs += [sections.correctness(res), sections.not_run(res)]
    drawn = charts.all_charts(res)
    for sec in secs:
        sec.charts = drawn.get(sec.id, [])
        if sec.charts and sec.empty:
            sec.empty = ""
    secs += sweeps.sections(run)  # the sweeps (issue 14): their own charts, tables and conclusions
    return RunPage(run=run, file=f"run-{run.slug}.html", title=f"{run.name} ({res.run.profile})",
                   counts=counts(res), overview=sections.overview(res), sections=secs,
                   experiments=sections.experiments(res))


def index_table(pages: list[RunPage]) -> Table:
    table = Table(columns=["run", "profile", "state", "host", "device", "torch", "started", "wall",
                           "OK", "NOT_RUN", "FAILED", "file"], cls="runs")
    for p in pages:
        r = p.run.results
        table.rows.append([
            Cell(p.run.name, href=p.file), Cell(r.run.profile), Cell(r.run.state),
            Cell(str((r.manifest.get("host") or {}).get("hostname", "?"))), Cell(device_text(r)),
            Cell(str((r.manifest.get("torch") or {}).get("version", "?"))), Cell(r.run.started_at or "—"),
            Cell(fmt(r.run.wall_s, units.S), cls="num"),
            *[Cell(str(p.counts[s]), cls=f"num status {s}" if p.counts[s] else "num") for s in STATUSES],
            Cell(str(p.run.path)),
        ])
    return table


def comparisons(pages: list[RunPage]) -> list[Comparison]:
    """Each run against the first one given (the baseline)."""
    if len(pages) < 2:
        return []
    side = lambda p: Side(p.run.path, p.run.results.manifest, p.run.results)  # noqa: E731
    base = side(pages[0])
    return [compare(base, side(p)) for p in pages[1:]]


def render_site(paths: list[Path], out: Path) -> Site:
    """Render every run under `paths` into `out`; unusable files are listed, never fatal."""
    runs, skipped = load_runs(paths)
    env = environment()
    out.mkdir(parents=True, exist_ok=True)
    site = Site(out=out, index=out / "index.html", skipped=skipped)
    pages: list[RunPage] = []
    for run in runs:
        try:
            page = run_page(run)
            html = env.get_template("run.html").render(page=page, skipped=skipped, title=page.title)
        except Exception as exc:  # one odd run must not sink the others
            skipped.append(SkippedFile(str(run.path), f"{run.path}: could not be rendered "
                                                      f"({type(exc).__name__}: {exc})"))
            continue
        (out / page.file).write_text(html, encoding="utf-8")
        sweeps.publish(run, out)  # the run's compile-trace pages, linked from its sweep sections
        site.pages.append(out / page.file)
        site.runs.append(run)
        pages.append(page)
    comps = comparisons(pages)
    if comps:
        html = env.get_template("compare.html").render(comparisons=comps, pages=pages, skipped=skipped,
                                                       title="Comparison", mark_cls=MARK_CLASS)
        site.compare = out / "compare.html"
        site.compare.write_text(html, encoding="utf-8")
    html = env.get_template("index.html").render(pages=pages, runs_table=index_table(pages), skipped=skipped,
                                                 has_compare=bool(comps), title="Graph-mode inference lab")
    site.index.write_text(html, encoding="utf-8")
    return site


MARK_CLASS: dict[str, Any] = {"better": "good", "fixed": "good", "worse": "bad", "newly failing": "bad",
                              "not comparable": "muted", "same": "", "changed": "changed"}
