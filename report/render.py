"""The report: a pure function from run directories to a static folder of HTML pages.

    site/index.html          the front page: one row per run, newest first (host, device, torch, eager against
                             the fastest correct method with speedup and MBU, the binding bound, compile and
                             capture cost with break-even, statuses and failed checks), then every run's headline
                             figures side by side, then what was skipped and why
    site/run-<name>.html     one page per run: a header with the failed checks, a table of contents, and the
                             sections of SECTIONS, each answering its question on its first screen
    site/compare.html        each run against its baseline: `--baseline RUN`, else the newest run of the same
                             profile; why it moved first, then every mark with its reason

    site/traces/<run>/...    the compile-trace pages of each run that kept them (report.publish)

Pages are self-contained (CSS inline, charts as inline SVG): they open from disk with no network.
Jinja2 autoescapes everything; the only unescaped content is the SVG matplotlib wrote. Publishing is safe
from anyone's run folders: each run renders in isolation (a bad file skips that run, one line naming it),
every page is written atomically, and the site is built beside `out` and swapped in only when complete
(report.sitefiles).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from report.compare import Comparison, Side, compare
from lab.contract.marks import MARKS
from lab.contract.results import Results

from report import charts, costs, front as front_page, publish, sections, sentinels, steps, sweeps, timecharts, \
    workloads
from report.discover import Run, SkippedFile, load_runs
from report.sitefiles import TRACES, Staging, WriteError, write_page
from report.tables import Table, fmt, params_text

STATUSES = front_page.STATUSES

# The run page's sections, in order: each a function from a run's results to a Section (None: nothing to show).
# A module with sections of its own registers them with one line here.
SECTIONS: list[Callable[[Results], sections.Section | None]] = [
    timecharts.step_section,  # report.steps' section, opening with where the time goes
    sentinels.instrument,
    steps.ceilings,
    costs.costs,
    workloads.amdahl,
    workloads.fusion,
    sections.dynamo,
    sections.correctness,
    sections.environment,
    sections.not_run,
]


@dataclass
class RunPage:
    run: Run
    file: str
    title: str
    front: front_page.FrontRow
    device: str
    overview: Table
    sections: list[sections.Section]
    experiments: list[sections.ExperimentView]
    failed: list[tuple[Any, Any]]  # (record, check) of every failed check


@dataclass
class Site:
    out: Path
    index: Path
    pages: list[Path] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    compare: Path | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    run_pages: list[RunPage] = field(default_factory=list)  # what each run's page was built from
    traces: list[Path] = field(default_factory=list)  # the compile-trace pages written
    removed: list[Path] = field(default_factory=list)  # an earlier report's pages this one did not rewrite


def environment() -> Environment:
    env = Environment(loader=PackageLoader("report", "templates"), autoescape=select_autoescape(["html", "css"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.filters["params"] = params_text
    return env


def run_page(run: Run) -> RunPage:
    """Everything on one run's page, grouped and formatted: the template only lays it out."""
    res = run.results
    drawn = charts.all_charts(res)
    secs = []
    for make in SECTIONS:
        sec = make(res)
        if sec is None:
            continue
        sec.charts = list(sec.charts) + drawn.get(sec.id, [])
        if sec.charts and sec.empty:
            sec.empty = ""
        secs.append(sec)
    # the sweeps (their own charts, tables and conclusions) before the sections with nothing of their own here
    first = [s for s in secs if not (s.minor or s.blank)]
    secs = first + sweeps.sections(run) + [s for s in secs if s.minor and not s.blank] + [s for s in secs if s.blank]
    file = f"run-{run.slug}.html"
    return RunPage(run=run, file=file, title=f"{run.name} ({res.run.profile})", front=front_page.front_row(run, file),
                   device=front_page.device_text(res), overview=sections.overview(res),
                   sections=secs,
                   experiments=sections.experiments(res), failed=sections.failed_checks(res))


# ---------------------------------------------------------------------------- comparisons

def find_run(runs: list[Run], name: str) -> Run:
    """The run named `name` (its display name, slug or path); ValueError naming the choices."""
    for run in runs:
        if name in (run.name, run.slug, str(run.path), str(run.path.parent)) or \
                Path(name).resolve() in (run.path.resolve(), run.path.parent.resolve()):
            return run
    raise ValueError(f"--baseline {name}: no such run among {', '.join(r.name for r in runs) or 'none'}")


def pairs(pages: list[RunPage], baseline: str | None = None) -> list[tuple[RunPage, RunPage]]:
    """(baseline, run) pairs: every run against `baseline` where given, else each run against the newest run of
    its own profile (the newest itself against the next newest)."""
    if baseline is not None:
        base = find_run([p.run for p in pages], baseline)
        return [(next(p for p in pages if p.run is base), p) for p in pages if p.run is not base]
    out = []
    ordered = sorted(pages, key=lambda p: p.run.results.run.started_at or "", reverse=True)
    for profile in dict.fromkeys(p.run.results.run.profile for p in ordered):
        group = [p for p in ordered if p.run.results.run.profile == profile]
        if len(group) < 2:
            continue
        out += [(group[0], p) for p in group[1:]]
    return out


def side(page: RunPage) -> Side:
    return Side(page.run.path, page.run.results.manifest, page.run.results, name=page.run.name)


def comparisons(pages: list[RunPage], baseline: str | None = None) -> list[Comparison]:
    return [compare(side(a), side(b)) for a, b in pairs(pages, baseline)]


MARK_CLASS: dict[str, Any] = {"better": "good", "fixed": "good", "worse": "bad", "newly failing": "bad",
                              "not comparable": "muted", "same": "", "changed": "changed"}


def render_site(paths: list[Path], out: Path, baseline: str | None = None) -> Site:
    """Render every run under `paths` into `out`; unusable files are listed, never fatal. `baseline` names the run
    the comparison page sets every other run against (default: per profile, the newest run).

    The site is built in a folder beside `out` and swapped in only when complete: when no run renders
    (`site.runs` empty) or a page cannot be written (WriteError, an OSError), `out` is left as it was."""
    runs, skipped = load_runs(paths)
    if baseline is not None:
        find_run(runs, baseline)  # a baseline that names no run stops here, before any page is drawn
    stage = Staging(out)
    try:
        site = _render(runs, skipped, stage.root, baseline)
    except BaseException:
        stage.discard()
        raise
    if not site.runs:
        stage.discard()
        return _moved(site, stage.root, out, written=False)
    site.removed = stage.swap_in()
    return _moved(site, stage.root, out)


def _moved(site: Site, stage: Path, out: Path, written: bool = True) -> Site:
    """The site's paths where they are once swapped into `out` (none written when nothing rendered)."""
    def at(p: Path) -> Path:
        return out / p.relative_to(stage)

    site.out, site.index = out, at(site.index)
    site.pages = [at(p) for p in site.pages] if written else []
    site.compare = at(site.compare) if site.compare and written else None
    site.traces = [at(p) for p in site.traces] if written else []
    return site


def _render(runs: list[Run], skipped: list[SkippedFile], out: Path, baseline: str | None) -> Site:
    env = environment()
    site = Site(out=out, index=out / "index.html", skipped=skipped)
    pages: list[RunPage] = []
    for run in front_page.newest_first(runs):
        try:  # one odd run must not sink the others: a run is published whole or not at all
            page = run_page(run)
            html = env.get_template("run.html").render(page=page, skipped=skipped, title=page.title)
            traces = publish.publish(run, out)
        except WriteError:
            raise
        except publish.TraceError as exc:
            shutil.rmtree(out / TRACES / run.slug, ignore_errors=True)
            skipped.append(SkippedFile(str(run.path), f"{exc} (run not rendered)"))
            continue
        except Exception as exc:
            shutil.rmtree(out / TRACES / run.slug, ignore_errors=True)
            skipped.append(SkippedFile(str(run.path), f"{run.path}: could not be rendered "
                                                      f"({type(exc).__name__}: {exc})"))
            continue
        write_page(out / page.file, html)
        site.pages.append(out / page.file)
        site.traces += traces
        site.runs.append(run)
        pages.append(page)
    site.run_pages = pages
    if not pages:
        return site
    comps = comparisons(pages, baseline)
    site.comparisons = comps
    files = {p.run.name: p.file for p in pages}
    if comps:
        html = env.get_template("compare.html").render(comparisons=comps, skipped=skipped, title="Comparison",
                                                       mark_cls=MARK_CLASS, marks=MARKS, files=files,
                                                       baseline=baseline)
        site.compare = out / "compare.html"
        write_page(site.compare, html)
    fronts = [p.front for p in pages]
    html = env.get_template("index.html").render(fronts=fronts, side_by_side=front_page.side_by_side(fronts),
                                                 skipped=skipped, has_compare=bool(comps),
                                                 title="Graph-mode inference lab")
    write_page(site.index, html)
    return site
