"""The report: a pure function from run directories to a static folder of HTML pages.

    site/index.html          the front page: one row per run, newest first (host, device, torch, eager against
                             the fastest correct method with speedup and MBU, the binding bound, compile and
                             capture cost with break-even, statuses and failed checks), then every run's headline
                             figures side by side, then what was skipped and why
    site/run-<name>.html     one page per run: a header with the failed checks, a table of contents, and the
                             sections of SECTIONS, each answering its question on its first screen
    site/compare.html        each run against its baseline (`--baseline RUN`, else the previous run of the same
                             host and profile, else the newest other run of the profile) or the sentence why it
                             has none; why it moved first, ranked for each class of figure that moved, then
                             every mark with its reason (written where at least one run has a baseline)

    site/history.html        each headline figure over the runs of one host and profile, in commit-date order,
                             each point an improvement, regression or the same against the previous run by
                             compare's rule (report.pages.history), written where a host and profile has several
                             runs; each run page has its own group's table

    site/traces/<run>/...    the compile-trace pages of each run that kept them (report.site.traces)

Pages are self-contained (CSS inline, charts as inline SVG): they open from disk with no network.
Jinja2 autoescapes everything; the only unescaped content is the SVG matplotlib wrote. Publishing is safe
from anyone's run folders: each run renders in isolation (a bad file skips that run, one line naming it),
every page is written atomically, and the site is built beside `out` and swapped in only when complete
(report.site.files).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from lab.contract.marks import MARKS
from lab.contract.results import Results

from report.draw import charts
from report.draw.tables import Table, fmt, params_text
from report.pages import front as front_page, history
from report.pages.bandwidth_split import MIN_BANDWIDTH_RATIO
from report.pages.compare import Comparison, Side, compare
from report.pages.why_moved import CLASSES
from report.sections import (anatomy, breakdown_charts, ceilings, costs, host, instrument, persistent, section, sweeps,
                             workloads)
from report.site import traces as trace_pages
from report.site.discover import Run, SkippedFile, load_runs
from report.site.files import TRACES, Staging, WriteError, write_page
from report.site.hosts import machine

WHY_SHOWN = 10  # the differing fields a why-it-moved table shows before "N more"

# The run page's sections, in order: each a function from a run's results to a Section (None: nothing to show).
# A module with sections of its own registers them with one line here.
SECTIONS: list[Callable[[Results], section.Section | None]] = [
    breakdown_charts.step_section,  # report.sections.steps' section, opening with where the time goes
    instrument.instrument,
    host.section,
    ceilings.ceilings,
    costs.costs,
    workloads.amdahl,
    workloads.fusion,
    anatomy.anatomy,
    persistent.persistent,
    section.dynamo,
    section.correctness,
    section.environment,
    section.not_run,
]


@dataclass
class RunPage:
    run: Run
    file: str
    title: str
    front: front_page.FrontRow
    device: str
    overview: Table
    sections: list[section.Section]
    experiments: list[section.ExperimentView]
    failed: list[tuple[Any, Any]]  # (record, check) of every failed check


@dataclass
class Site:
    out: Path
    index: Path
    pages: list[Path] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    compare: Path | None = None
    history: Path | None = None
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
    """Everything on one run's page, grouped and formatted: the template only lays it out (its history section,
    made from the other runs too, is added by `_render`)."""
    res = run.results
    drawn = charts.all_charts(res)
    secs = [sec for make in SECTIONS if (sec := make(res)) is not None]
    for sec in secs:
        sec.charts = list(sec.charts) + drawn.get(sec.id, [])
        sec.empty = "" if sec.charts else sec.empty
    # the step times, then the sweeps (their own charts, tables and conclusions), then the rest: a sweep run opens
    # with its sweeps, not with the sentinels that frame them
    first = [s for s in secs if not (s.minor or s.blank)]
    steps = [s for s in first if s.id == "steps"]
    secs = steps + sweeps.sections(run) + [s for s in first if s.id != "steps"] + \
        [s for s in secs if s.minor and not s.blank] + [s for s in secs if s.blank]
    file = f"run-{run.slug}.html"
    return RunPage(run=run, file=file, title=f"{run.name} ({res.run.profile})", front=front_page.front_row(run, file),
                   device=front_page.device_text(res), overview=section.overview(res), sections=secs,
                   experiments=section.experiments(res), failed=section.failed_checks(res))


# ---------------------------------------------------------------------------- comparisons

def find_run(runs: list[Run], name: str) -> Run:
    """The run named `name` (its display name, slug or path); ValueError naming the choices."""
    for run in runs:
        if name in (run.name, run.slug, str(run.path), str(run.path.parent)) or \
                Path(name).resolve() in (run.path.resolve(), run.path.parent.resolve()):
            return run
    raise ValueError(f"--baseline {name}: no such run among {', '.join(r.name for r in runs) or 'none'}")


@dataclass
class Baseline:
    """One run on the comparison page: its baseline and how it was chosen, or why it has none."""

    run: Run
    base: Run | None
    why: str
    comparison: Comparison | None = None


def _started(run: Run) -> str:
    return run.results.run.started_at or ""


def _sharing(candidates: list[Run], run: Run) -> list[Run]:
    """The candidates that ran one of `run`'s experiments, in their order; all of them where none did."""
    ids = {rec.id for rec in run.results.experiments}
    return [r for r in candidates if ids & {rec.id for rec in r.results.experiments}] or candidates


def baselines(runs: list[Run], baseline: str | None = None) -> list[Baseline]:
    """Every run's baseline, newest run first: `baseline` where given; else the previous run of the same host (the
    same machine: report.site.hosts) and profile, else the newest other run of the same profile; else none, with the
    sentence why. Among the earlier runs of the host, and then among the profile's, those that ran one of the run's
    experiments come first (`_sharing`: a run of `--only fused_anatomy` is set against the previous anatomy, not
    against the grid just before it with nothing in common); where none did, all of them are candidates."""
    ordered = sorted(runs, key=_started, reverse=True)
    if baseline is not None:
        base = find_run(runs, baseline)
        return [Baseline(r, None, f"the baseline every other run is set against (--baseline {baseline})")
                if r is base else Baseline(r, base, f"chosen with --baseline {baseline}") for r in ordered]
    out = []
    for run in ordered:
        profile, here = run.results.run.profile, machine(run.results)
        label = here.label
        same_profile = [r for r in ordered if r is not run and r.results.run.profile == profile]
        same_host = [r for r in same_profile if machine(r.results).key == here.key]
        earlier = _sharing([r for r in same_host if _started(r) < _started(run)], run)
        if earlier:
            out.append(Baseline(run, earlier[0], f"the previous run of host {label} with profile {profile}"))
        elif same_profile:
            none = f"no earlier run of host {label}" if same_host else f"no other run of host {label}"
            out.append(Baseline(run, _sharing(same_profile, run)[0], f"{none} with profile {profile}: the newest "
                                                                     f"other run of profile {profile}"))
        else:
            out.append(Baseline(run, None, f"no other run of profile {profile} among the runs rendered: nothing to "
                                           f"set it against (a run of the same profile, from this host or another, "
                                           f"would be)"))
    return out


def comparisons(runs: list[Run], baseline: str | None = None) -> list[Baseline]:
    """`baselines`, each run that has one compared with it."""
    out = baselines(runs, baseline)
    for b in out:
        if b.base is not None:
            before, after = (Side(r.path, r.results.manifest, r.results, name=r.name) for r in (b.base, b.run))
            b.comparison = compare(before, after)
    return out


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
    site.history = at(site.history) if site.history and written else None
    site.traces = [at(p) for p in site.traces] if written else []
    return site


def _render(runs: list[Run], skipped: list[SkippedFile], out: Path, baseline: str | None) -> Site:
    env = environment()
    site = Site(out=out, index=out / "index.html", skipped=skipped)
    pages: list[RunPage] = []
    env.globals["has_history"] = False
    for run in sorted(runs, key=_started, reverse=True):  # newest first
        try:  # one odd run must not sink the others: a run is published whole or not at all
            page = run_page(run)
            env.get_template("run.html").render(page=page, skipped=skipped, title=page.title)  # renders, or skips
            traces = trace_pages.publish(run, out)
        except WriteError:
            raise
        except Exception as exc:  # a trace that cannot be published safely says so itself (TraceError)
            shutil.rmtree(out / TRACES / run.slug, ignore_errors=True)
            why = f"{exc} (run not rendered)" if isinstance(exc, trace_pages.TraceError) else \
                f"{run.path}: could not be rendered ({type(exc).__name__}: {exc})"
            skipped.append(SkippedFile(str(run.path), why))
            continue
        site.traces += traces
        site.runs.append(run)
        pages.append(page)
    site.run_pages = pages
    if not pages:
        return site
    # the history of the runs that rendered: a section on each run page, and history.html where a host and profile
    # has several runs (the pages' nav links it then)
    files = {p.run.name: p.file for p in pages}
    all_series = history.series(site.runs)
    env.globals["has_history"] = any(len(s.runs) > 1 for s in all_series)
    for page in pages:
        page.sections.append(history.section(all_series, page.run, files))
        write_page(out / page.file, env.get_template("run.html").render(page=page, skipped=skipped, title=page.title))
        site.pages.append(out / page.file)
    bases = comparisons([p.run for p in pages], baseline)
    comps = [b.comparison for b in bases if b.comparison is not None]
    site.comparisons = comps
    if comps:
        html = env.get_template("compare.html").render(comparisons=comps, bases=bases, skipped=skipped,
                                                       title="Comparison", mark_cls=MARK_CLASS, marks=MARKS,
                                                       files=files, baseline=baseline, classes=CLASSES,
                                                       shown=WHY_SHOWN, min_bandwidth_ratio=MIN_BANDWIDTH_RATIO)
        site.compare = out / "compare.html"
        write_page(site.compare, html)
    if env.globals["has_history"]:  # written where some host and profile has several runs, as compare.html
        html = env.get_template("history.html").render(series=all_series, skipped=skipped,
                                                       title="History", history_table=lambda s: history.table(s, files),
                                                       has_compare=bool(comps))
        site.history = out / history.HISTORY_FILE
        write_page(site.history, html)
    fronts = [p.front for p in pages]
    html = env.get_template("index.html").render(fronts=fronts, side_by_side=front_page.side_by_side(fronts),
                                                 history_charts=[c for s in all_series if (c := charts.history(s))],
                                                 skipped=skipped, has_compare=bool(comps),
                                                 title="Graph-mode inference lab")
    write_page(site.index, html)
    return site
