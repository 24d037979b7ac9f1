"""Compare two runs (or two manifests): which environment fields differ, and what each shared result did.

In the manner of `asv compare`: for every metric both runs have (same experiment id, metric name and
params) the two values, their ratio B/A and a mark with its reason. The marks follow only from each
metric's declaration in `lab.contract.metrics` (its direction and the conditions under which two values are
comparable); the rules are in `lab.contract.marks`. Beyond metrics:

- an experiment OK (or NOT_RUN) in A and FAILED in B is `newly failing`, the reverse `fixed`; one
  that ran in one run and is NOT_RUN in the other is `not comparable`, with the reason code;
- a correctness check that passed in A and fails in B is `newly failing`, the reverse `fixed`;
- experiments only one run has (a run made with `--only`), and metrics only one run has, are
  counted per experiment (never silently dropped).

Manifest fields are flattened (`gpu.nvidia_smi.gpus[0].driver_version`); `created_at` is ignored
because it always differs. "Why it moved" (report.pages.why_moved) lists the manifest fields that can explain
a move (device, driver, torch/Triton/CUDA, CPU and its dispatch speed, threads, host load, GPU clocks
and power, image, compile cache state), the ones that differ first, ranked for each class of the
figures that moved: the host's dispatch first for eager and launch-bound figures, the GPU, driver,
torch/CUDA and Triton first for kernel-bound ones. Where the two runs measured copy rates apart, each step both ran
is split into what follows memory speed and what does not (report.pages.bandwidth_split). Text and JSON output:
report.pages.compare_text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.contract import metrics as M
from lab.contract.manifest_schema import check_manifest
from lab.contract.reasons import Code
from lab.contract.marks import FACTOR, MARKS, Mark, Value, judge
from lab.contract.names import Param as P, Status
from lab.contract.results import MANIFEST_NAME, RESULTS_NAME, Metric, Record, Results, ResultsError, from_dict
from lab.contract.schema import read_json
from report.pages.bandwidth_split import BandwidthSplit, bandwidth_split
from report.pages.why_moved import ABSENT, CLASSES, ExplainRow, FigureClass, explain, figure_class, flatten

__all__ = ["FACTOR", "MARKS", "Side", "load_side", "flatten", "manifest_diff", "explain", "compare", "Comparison",
           "MetricRow", "StatusRow", "CheckRow", "FieldDiff", "ExplainRow", "figure_class", "value_of"]

IGNORED_FIELDS = ("created_at",)
# Fields a reader looks for first: the ones that change what a timing means.
KEY_PREFIXES = ("gpu.", "torch.", "libraries.", "toolchain.", "python.version", "container.", "compiler_settings.",
                "cpu.", "host.", "compile_cache.", "weights.", "profile.", "lab.", "packages.")

@dataclass
class Side:
    """One side of a comparison: a run (results + manifest) or a bare manifest file."""

    path: Path
    manifest: dict[str, Any]
    results: Results | None = None
    name: str = ""  # a display name given by the caller (the report's run name)

    @property
    def label(self) -> str:
        named = self.path.name in (RESULTS_NAME, MANIFEST_NAME)  # a run's file: its folder names it
        return self.name or (self.path.parent.name if named else self.path.name)


def load_side(path: Path | str) -> Side:
    """A run directory (its results.json, else its manifest.json), a results file or a manifest file."""
    path = Path(path)
    if path.is_dir():
        if (path / RESULTS_NAME).exists():
            path = path / RESULTS_NAME
        elif (path / MANIFEST_NAME).exists():
            path = path / MANIFEST_NAME
        else:
            raise ResultsError(f"{path}: a directory with neither {RESULTS_NAME} nor {MANIFEST_NAME}")
    elif not path.exists():
        raise ResultsError(f"{path}: no such file or directory")
    raw = read_json(path)
    if isinstance(raw, dict) and "experiments" in raw:
        results = from_dict(raw, path)
        return Side(path, results.manifest, results)
    if isinstance(raw, dict) and "manifest_version" in raw:
        check_manifest(raw, path)
        return Side(path, raw)
    raise ResultsError(f"{path}: neither a results file (no 'experiments') nor a manifest (no 'manifest_version')")


# ---------------------------------------------------------------------------- manifests

@dataclass(frozen=True)
class FieldDiff:
    key: str
    a: Any
    b: Any


def manifest_diff(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...] = IGNORED_FIELDS) -> list[FieldDiff]:
    """Flattened fields whose values differ (or exist on one side only), the telling ones first."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted((set(fa) | set(fb)) - set(ignore), key=lambda k: (
        next((i for i, prefix in enumerate(KEY_PREFIXES) if k.startswith(prefix)), len(KEY_PREFIXES)), k))
    return [FieldDiff(k, fa.get(k, ABSENT), fb.get(k, ABSENT)) for k in keys if fa.get(k, ABSENT) != fb.get(k, ABSENT)]


# ---------------------------------------------------------------------------- results

def params_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


@dataclass
class MetricRow:
    experiment: str
    name: str
    params: dict[str, Any]
    unit: str
    a: Any
    b: Any
    ratio: float | None
    mark: Mark
    reason: str = ""
    cls: FigureClass = "other"  # what can explain its move (report.pages.why_moved.figure_class)


@dataclass
class StatusRow:
    experiment: str
    a: str
    b: str
    a_reason: str
    b_reason: str
    mark: Mark
    why: str = ""  # why this mark, from the two statuses and their reason codes


@dataclass
class CheckRow:
    experiment: str
    name: str
    params: dict[str, Any]
    a: bool
    b: bool
    mark: Mark
    detail: str


@dataclass
class Comparison:
    a: Side
    b: Side
    factor: float
    fields: list[FieldDiff]
    why: list[ExplainRow] = field(default_factory=list)
    statuses: list[StatusRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    checks: list[CheckRow] = field(default_factory=list)
    only_a: dict[str, int] = field(default_factory=dict)  # experiment -> metrics only A has
    only_b: dict[str, int] = field(default_factory=dict)
    experiments_only_a: list[str] = field(default_factory=list)  # experiments only A has (a run made with --only)
    experiments_only_b: list[str] = field(default_factory=list)
    # For each class of the figures that moved (report.pages.why_moved.CLASSES), the fields ranked for it.
    why_by_class: dict[str, list[ExplainRow]] = field(default_factory=dict)
    # Where the runs measured copy rates apart: each step both ran, split into what follows memory speed and what
    # does not (report.pages.bandwidth_split).
    split: BandwidthSplit = field(default_factory=BandwidthSplit)

    def count(self, mark: str) -> int:
        return sum(r.mark == mark for rows in (self.metrics, self.statuses, self.checks) for r in rows)

    @property
    def moved(self) -> list[MetricRow]:
        return [r for r in self.metrics if r.mark in ("better", "worse")]

    @property
    def sorted_metrics(self) -> list[MetricRow]:
        """The metrics in the order a reader wants them: better, worse, ..., same (lab.contract.marks.MARKS)."""
        return sorted(self.metrics, key=lambda r: MARKS.index(r.mark))

    def moved_of(self, cls: str) -> list[MetricRow]:
        return [r for r in self.moved if r.cls == cls]


# NOT_RUN for want of something on the host (a device, a compiler, an OS): the experiment could not run there,
# so a FAILED on another host is not a regression against it, nor is a NOT_RUN after a FAILED a fix.
HOST_CODES = frozenset({Code.NO_CUDA, Code.NO_TRITON, Code.NO_CXX_COMPILER, Code.COMPILER_NOT_ON_PATH,
                        Code.NO_PYTHON_HEADERS, Code.NO_OPENSSL, Code.DRIVER_TOO_OLD, Code.WINDOWS_HOST_REQUIRED,
                        Code.LINUX_HOST_REQUIRED, Code.NOT_ON_THIS_DEVICE, Code.CXX_NOT_FOUND, Code.COMPILER_BROKEN})


def _code(rec: Record | None) -> str:
    return rec.reason.code if rec is not None and rec.reason else ""


def status_mark(a: str, b: str, a_code: str = "", b_code: str = "") -> tuple[Mark, str]:
    """The mark of a status change and why, judged with the reason codes: OK -> FAILED is newly failing, FAILED ->
    OK fixed; a NOT_RUN for want of something on its host (HOST_CODES) against a FAILED is not comparable."""
    if a == b:
        return "same", ""
    if b == Status.FAILED and a == Status.NOT_RUN and a_code in HOST_CODES:
        return "not comparable", f"A's host could not run it ({a_code}); B's ran it and it failed"
    if a == Status.FAILED and b == Status.NOT_RUN and b_code in HOST_CODES:
        return "not comparable", f"B's host could not run it ({b_code}): not a fix"
    if b == Status.FAILED:
        return "newly failing", f"{a} in A" + (f" ({a_code})" if a_code else "") + ", FAILED in B"
    if a == Status.FAILED and b == Status.OK:
        return "fixed", "FAILED in A, OK in B"
    return "not comparable", f"{a} in A, {b} in B: one of them did not run"


def interval_of(m: Metric, rec: Record) -> tuple[float | None, float | None]:
    """Where the metric's 95% interval is stored: a timing's spread, else the metrics its declaration names
    (MetricSpec.interval) recorded with the same params; (None, None) where there is none."""
    sp = m.spread
    if sp is not None and sp.ci_low is not None and sp.ci_high is not None:
        return sp.ci_low, sp.ci_high
    spec = M.spec(m.name)
    if spec is None or spec.interval is None:
        return None, None
    hits = [[o.value for o in rec.metrics if o.name == name and o.params == m.params] for name in spec.interval]
    ends = [h[0] if len(h) == 1 and isinstance(h[0], (int, float)) and not isinstance(h[0], bool) else None
            for h in hits]
    return (ends[0], ends[1]) if None not in ends else (None, None)


def value_of(m: Metric, rec: Record, manifest: dict[str, Any]) -> Value:
    """A stored metric as marks.judge sees it: value, unit, interquartile range, 95% interval, its record and run."""
    sp = m.spread
    low, high = interval_of(m, rec)
    return Value(m.value, m.unit, m.params, sp.q1 if sp else None, sp.q3 if sp else None, tuple(rec.metrics), manifest,
                 rec.id, low, high)


def _reason(rec: Record | None) -> str:
    return f"{rec.reason.code}: {rec.reason.message}" if rec is not None and rec.reason else ""


def _step_key(params: dict[str, Any]) -> tuple[str, str, str]:
    return str(params.get(P.METHOD)), str(params.get(P.BATCH)), str(params.get(P.DTYPE))


def bindings(*results: Results | None) -> dict[tuple[str, str, str], str]:
    """Which bound binds each step ceilings bounded ((method, batch, dtype) -> 'launch'...), the first side's first."""
    out: dict[tuple[str, str, str], str] = {}
    for res in results:
        for rec in res.experiments if res is not None else ():
            for m in rec.metrics:
                if m.name == M.BINDING.name and isinstance(m.value, str):
                    out.setdefault(_step_key(m.params), m.value)
    return out


def _compare_records(out: Comparison, rid: str, ra: Record, rb: Record,
                     binds: dict[tuple[str, str, str], str]) -> None:
    if ra.status != rb.status:
        mark, why = status_mark(ra.status, rb.status, _code(ra), _code(rb))
        out.statuses.append(StatusRow(rid, ra.status, rb.status, _reason(ra), _reason(rb), mark, why))
    ma, mb = ({(m.name, params_key(m.params)): m for m in r.metrics} for r in (ra, rb))
    for key, metric in ma.items():
        if key in mb:
            other = mb[key]
            v = judge(M.spec(metric.name), value_of(metric, ra, out.a.manifest), value_of(other, rb, out.b.manifest),
                      out.factor)
            out.metrics.append(MetricRow(rid, metric.name, metric.params, metric.unit, metric.value, other.value,
                                         v.ratio, v.mark, v.reason, figure_class(metric.name, metric.params,
                                                                                 binds.get(_step_key(metric.params)))))
    if n := sum(k not in mb for k in ma):
        out.only_a[rid] = n
    if n := sum(k not in ma for k in mb):
        out.only_b[rid] = n
    ca, cb = ({(c.name, params_key(c.params)): c for c in r.checks} for r in (ra, rb))
    for key, check in ca.items():
        if key in cb and check.passed != cb[key].passed:
            out.checks.append(CheckRow(rid, check.name, check.params, check.passed, cb[key].passed,
                                       "newly failing" if check.passed else "fixed",
                                       cb[key].detail or check.detail))


def compare(a: Side, b: Side, factor: float = FACTOR) -> Comparison:
    """The whole comparison of two sides; metrics and checks only when both are runs."""
    out = Comparison(a, b, factor, manifest_diff(a.manifest, b.manifest), explain(a.manifest, b.manifest))
    if a.results is None or b.results is None:
        return out
    recs_a, recs_b = ({r.id: r for r in res.experiments} for res in (a.results, b.results))
    binds = bindings(b.results, a.results)
    for rid in list(recs_a) + [i for i in recs_b if i not in recs_a]:
        ra, rb = recs_a.get(rid), recs_b.get(rid)
        if ra is None or rb is None:
            (out.experiments_only_b if ra is None else out.experiments_only_a).append(rid)
            if ra is not None and ra.metrics:
                out.only_a[rid] = len(ra.metrics)
            if rb is not None and rb.metrics:
                out.only_b[rid] = len(rb.metrics)
            continue
        _compare_records(out, rid, ra, rb, binds)
    out.split = bandwidth_split(a.results, b.results)
    for cls in CLASSES:
        if out.moved_of(cls):
            out.why_by_class[cls] = explain(a.manifest, b.manifest, cls, a.results, b.results)
    if out.why_by_class:  # the headline ranking: for the class with the most figures that moved
        out.why = out.why_by_class[max(out.why_by_class, key=lambda c: len(out.moved_of(c)))]
    return out
