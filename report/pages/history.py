"""History, in the manner of asv and PyTorch's HUD: each headline figure over the runs of one host and profile.

The runs a folder holds are grouped by host and profile, a host being a machine (report.site.hosts: its
hostname with its CPU model and cores, GPU and driver; two machines that share a hostname are two
hosts), and each group is ordered by the lab's commit date (the manifest's `lab.commit_date`) where
every run of the group records one, else by the run's start time; the page says which. The headline
figures are the front page's (report.sections.steps picks them, so "fastest correct" means the same here):
at batch 1 for each dtype, eager's step, the fastest correct method's step and its speedup over
eager with its 95% interval, and that method's MBU; the eager launch cost (ceilings); and the
fresh-process sentinel's eager step at the start of the run where the run has one.

Each point is judged against the previous run of its group that has the figure, by the same rule
`compare` uses (lab.contract.marks.judge, the 95% intervals where both sides store one): better is an
*improvement*, worse a *regression*, else the mark as compare words it (same, not comparable,
changed), always with the reason. Pages: `history.html` (every group) and a section on each run page
(its own group, its row marked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from lab.contract import query as q
from lab.contract import metrics as M
from lab.contract.marks import judge
from lab.contract.names import Experiment, Method, Param as P
from lab.contract.results import Metric, Record, Results

from report.pages.compare import interval_of, value_of
from report.site.discover import Run
from report.site.hosts import machine, slug
from report.sections.section import Section
from report.sections.steps import cases, own_mbu, step_rows
from report.draw.tables import Cell, Table, fmt

HISTORY_FILE = "history.html"
WORDS = {"better": "improvement", "worse": "regression"}
CLASS = {"improvement": "good", "regression": "bad", "same": "", "first": "muted", "not comparable": "muted",
         "changed": "changed"}

Found = tuple[Metric, Record] | None
Getter = Callable[[Results], Found]


@dataclass
class Point:
    """One run's value of one figure, and its mark against the previous run of the group that has the figure."""

    run: Run
    found: Found
    mark: str = ""  # improvement, regression, same, not comparable, changed; "first" for the first value
    reason: str = ""
    against: str = ""  # the run it was judged against

    @property
    def text(self) -> str:
        if self.found is None:
            return "—"
        metric, rec = self.found
        low, high = interval_of(metric, rec)
        text = fmt(metric.value, metric.unit)
        if low is not None and high is not None:
            text += f" [{fmt(low)}, {fmt(high)}]"
        method = metric.params.get(P.METHOD)
        return f"{text} ({method})" if method and metric.name != M.LAUNCH_US_PER_OP.name else text


@dataclass
class Series:
    """The runs of one host and profile in order, and every headline figure's points over them."""

    host: str
    profile: str
    order: str  # what the runs are ordered by, in words
    runs: list[Run]
    points: dict[str, list[Point]] = field(default_factory=dict)  # figure label -> one point per run

    def count(self, mark: str) -> int:
        return sum(p.mark == mark for pts in self.points.values() for p in pts)


def _found(results: Results, metric: Metric | None) -> Found:
    """The metric with the record that holds it (compare's interval rule reads its interval there)."""
    return next(((metric, r) for r in results.experiments if any(m is metric for m in r.metrics)), None) \
        if metric is not None else None


def _one(results: Results, rid: str, spec: M.MetricSpec, **params: Any) -> Found:
    return _found(results, q.maybe(q.experiment(results, rid), spec, **params))


def _step(results: Results, dtype: str, which: str) -> Found:
    """At B=1 in `dtype`: eager's step ("baseline"), the fastest correct method's step ("best"), its speedup over
    eager ("ratio") or its MBU ("share", the one the run page shows: report.sections.steps.own_mbu)."""
    c = next((c for c in cases(step_rows(results)) if c.batch == 1 and c.dtype == dtype), None)
    if c is None:
        return None
    if which in ("baseline", "best"):
        return _found(results, (c.eager if which == "baseline" else c.best).step)
    if which == "share":
        return _found(results, own_mbu(results, c.best))
    return _found(results, c.best.speedup) if c.best.method != c.eager.method else None


def figures(dtypes: list[str]) -> list[tuple[str, Getter]]:
    """The headline figures, each a label and where a run stores it."""
    steps = (("eager step", "baseline"), ("fastest correct method's step", "best"),
             ("its speedup over eager", "ratio"), ("its MBU", "share"))
    out: list[tuple[str, Getter]] = [(f"{label}, B=1 {d}", partial(_step, dtype=d, which=which))
                                     for d in dtypes for label, which in steps]
    return out + [("eager launch cost", lambda r: _one(r, Experiment.CEILINGS, M.LAUNCH_US_PER_OP, mode=Method.EAGER)),
                  ("sentinel eager step at start, B=1 float32",
                   lambda r: _one(r, Experiment.SENTINEL, M.SENTINEL_STEP_MS, method=Method.EAGER, batch=1,
                                  dtype="float32", when="start"))]


def _safely(get: Getter, results: Results) -> Found:
    """The figure, or None where the run's records cannot give it (an odd record never sinks the history)."""
    try:
        return get(results)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def commit_date(results: Results) -> str | None:
    lab = results.manifest.get("lab") or {}
    date = lab.get("commit_date") if isinstance(lab, dict) else None
    return str(date) if date else None


def _mark(before: Point, now: Point) -> tuple[str, str]:
    assert before.found is not None and now.found is not None
    (ma, ra), (mb, rb) = before.found, now.found
    verdict = judge(M.spec(mb.name), value_of(ma, ra, before.run.results.manifest),
                    value_of(mb, rb, now.run.results.manifest))
    return WORDS.get(verdict.mark, verdict.mark), verdict.reason


def series(runs: list[Run]) -> list[Series]:
    """Every host and profile's runs in order, with each figure's points judged against the previous run."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((machine(run.results).label, run.results.run.profile), []).append(run)
    out = []
    for (host, profile), group in sorted(groups.items()):
        dated = all(commit_date(r.results) for r in group)
        group.sort(key=lambda r: ((commit_date(r.results) if dated else None) or "", r.results.run.started_at or ""))
        order = ("the lab's commit date (lab.commit_date), then the start time" if dated else
                 "the run's start time (not every run records lab.commit_date)")
        s = Series(host, profile, order, group)
        dtypes = sorted({c.dtype for r in group for c in cases(step_rows(r.results)) if c.batch == 1},
                        key=lambda d: (d != "float32", d))
        for label, get in figures(dtypes):
            points = [Point(r, _safely(get, r.results)) for r in group]
            found = [p for p in points if p.found is not None]
            if not found:
                continue
            found[0].mark, found[0].reason = "first", "the first run of this host and profile with this figure"
            for last, p in zip(found, found[1:]):
                p.mark, p.reason = _mark(last, p)
                p.against = last.run.name
            s.points[label] = points
        out.append(s)
    return out


def when(run: Run, s: Series) -> str:
    date = commit_date(run.results)
    return date if date and s.order.startswith("the lab's commit") else (run.results.run.started_at or "—")


def table(s: Series, files: dict[str, str], current: Run | None = None) -> Table:
    """The group's runs as rows (in order), its figures as columns, each value with its mark."""
    t = Table(columns=["run", "commit date" if s.order.startswith("the lab's") else "started", "lab commit"]
              + list(s.points), cls="history", id=f"history-{slug(s.host)}-{s.profile}",
              caption=f"{s.host} · profile {s.profile}: {len(s.runs)} run(s), ordered by {s.order}")
    for i, run in enumerate(s.runs):
        lab = run.results.manifest.get("lab") or {}
        commit = str(lab.get("commit") or "—")[:10] if isinstance(lab, dict) else "—"
        name = Cell(run.name, href=files.get(run.name, ""), cls="current" if run is current else "")
        row = [name, Cell(when(run, s)), Cell(commit)]
        for points in s.points.values():
            p = points[i]
            title = f"{p.mark} against {p.against}: {p.reason}" if p.against else p.reason
            row.append(Cell(p.text, cls=" ".join(c for c in ("num", CLASS.get(p.mark, "")) if c), title=title,
                            sub=p.mark if p.found is not None and p.mark != "first" else ""))
        t.rows.append(row)
    return t


def section(all_series: list[Series], run: Run, files: dict[str, str]) -> Section:
    """The run page's history section: its host and profile's runs, this run's row marked."""
    s = next(s for s in all_series if run in s.runs)
    title = "History of this host and profile"
    if len(s.runs) < 2:
        return Section("history", title, empty=f"The only run of host {s.host} with profile {s.profile} among the "
                                               "runs rendered: no history yet.")
    return Section("history", title, f"{len(s.runs)} runs of host {s.host} with profile {s.profile}, ordered by "
                   f"{s.order}; each figure against the previous run that has it, by compare's rule (95% intervals "
                   f"where both store one): {s.count('regression')} regression(s), {s.count('improvement')} "
                   "improvement(s).", [table(s, files, current=run)])


__all__ = ["HISTORY_FILE", "Point", "Series", "figures", "section", "series", "table"]
