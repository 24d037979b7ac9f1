"""Compare two runs (or two manifests): which environment fields differ, and what each shared result did.

In the manner of `asv compare`: for every metric both runs have (same experiment id, metric name and
params) the two values, their ratio after/before, and a mark. The rule for the mark:

- direction: lower is better for times (units ms, s, us, µs, ns; names ending `_ms`, `_s`, `_us`),
  for memory (unit MiB/GiB/bytes names ending `_MiB`) and for break-even counts (names starting
  `break_even`); higher is better for speedups, bandwidth and throughput (names containing `speedup`,
  units `x`, `GBps`, `TFLOPs`, names `token_agreement`, `ceiling_x`). Anything else (counts, booleans,
  strings) has no direction: a difference is marked `changed`, never better or worse.
- `same` when the ratio lies within [1/factor, factor] (factor 1.10 by default, as asv's), or when
  both values carry a spread and their interquartile ranges overlap (the difference is within noise).
- `better` / `worse` outside that band, in the metric's direction.
- `not comparable` when the units differ, a value is not a number, or the before value is zero.
- `newly failing` for an experiment OK before and FAILED after, and for a correctness check that
  passed before and fails after; `fixed` for the reverse. An experiment that ran in one run and is
  NOT_RUN in the other is `not comparable`, with the reason code.

Metrics only one run has are counted per experiment (never silently dropped). Manifest fields are
flattened (`gpu.nvidia_smi.gpus[0].driver_version`); `created_at` is ignored because it always differs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lab import metrics as M
from lab import units
from lab.results import MANIFEST_NAME, RESULTS_NAME, Metric, Results, ResultsError, from_dict
from lab.manifest_schema import check_manifest
from lab.schema import read_json

FACTOR = 1.10
IGNORED_FIELDS = ("created_at",)
ABSENT = "(absent)"

Mark = Literal["better", "worse", "same", "changed", "not comparable", "newly failing", "fixed"]
# Fields a reader looks for first: the ones that change what a timing means.
KEY_PREFIXES = ("gpu.", "torch.", "libraries.", "toolchain.", "python.version", "container.", "compiler_settings.",
                "cpu.", "host.", "weights.", "profile.", "lab.", "packages.")


@dataclass
class Side:
    """One side of a comparison: a run (results + manifest) or a bare manifest file."""

    path: Path
    manifest: dict[str, Any]
    results: Results | None = None

    @property
    def label(self) -> str:
        return self.path.parent.name if self.path.name in (RESULTS_NAME, MANIFEST_NAME) else self.path.name


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

def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as dotted keys: {'gpu': {'gpus': [{'name': 'H200'}]}} -> {'gpu.gpus[0].name': 'H200'}."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(obj, list) and obj and any(isinstance(v, (dict, list)) for v in obj):
        for i, value in enumerate(obj):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = obj
    return out


@dataclass(frozen=True)
class FieldDiff:
    key: str
    a: Any
    b: Any


def _field_order(key: str) -> tuple[int, str]:
    for i, prefix in enumerate(KEY_PREFIXES):
        if key.startswith(prefix):
            return i, key
    return len(KEY_PREFIXES), key


def manifest_diff(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...] = IGNORED_FIELDS) -> list[FieldDiff]:
    """Flattened fields whose values differ (or exist on one side only), the telling ones first."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted((set(fa) | set(fb)) - set(ignore), key=_field_order)
    return [FieldDiff(k, fa.get(k, ABSENT), fb.get(k, ABSENT)) for k in keys if fa.get(k, ABSENT) != fb.get(k, ABSENT)]


# ---------------------------------------------------------------------------- metrics

LOWER_UNITS = {units.MS, units.S, units.US, "µs", "ns", units.MIB, "GiB", "bytes"}
HIGHER_UNITS = {units.X, "GBps", "TFLOPs", units.GBPS, units.TFLOPS}


def direction(name: str, unit: str) -> Literal["lower", "higher"] | None:
    """Which way is better for this metric (see the module docstring); None: no direction."""
    if "speedup" in name or name in (M.TOKEN_AGREEMENT.name, M.CEILING_X.name) or unit in HIGHER_UNITS or name.endswith(
            ("_GBps", "_TFLOPs")):
        return "higher"
    if unit in LOWER_UNITS or name.endswith(("_ms", "_s", "_us", "_MiB")) or name.startswith("break_even"):
        return "lower"
    return None


def params_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


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
    note: str = ""


def judge(ma: Metric, mb: Metric, factor: float = FACTOR) -> tuple[float | None, Mark, str]:
    """(ratio after/before, mark, note) for one metric present in both runs."""
    if ma.unit != mb.unit:
        return None, "not comparable", f"units differ: {ma.unit} vs {mb.unit}"
    va, vb = _number(ma.value), _number(mb.value)
    if va is None or vb is None:
        if ma.value == mb.value:
            return None, "same", ""
        both_numeric = isinstance(ma.value, (int, float)) and isinstance(mb.value, (int, float))
        return None, ("changed" if not both_numeric or isinstance(ma.value, bool) else "not comparable"), ""
    if va == vb:
        return (1.0 if va else None), "same", ""
    if va == 0:
        return None, "not comparable", "before is zero"
    ratio = vb / va
    how = direction(ma.name, ma.unit)
    if how is None:
        return ratio, "changed", ""
    if ma.spread and mb.spread and ma.spread.q1 <= mb.spread.q3 and mb.spread.q1 <= ma.spread.q3:
        return ratio, "same", "interquartile ranges overlap"
    if 1 / factor <= ratio <= factor:
        return ratio, "same", ""
    up = ratio > 1
    return ratio, ("better" if up == (how == "higher") else "worse"), ""


@dataclass
class StatusRow:
    experiment: str
    a: str
    b: str
    a_reason: str
    b_reason: str
    mark: Mark


@dataclass
class CheckRow:
    experiment: str
    name: str
    params: dict[str, Any]
    a: bool
    b: bool
    mark: Mark
    detail: str


# The environment a timing depends on, said first: an image beside a reference run (Python 3.11 against
# 3.12, another transformers) or one host beside another shows here before the flattened manifest.
ENVIRONMENT_KEYS = ("python.version", "torch.version", "torch.cuda_build", "libraries.triton",
                    "libraries.transformers", "libraries.numpy", "gpu.nvidia_smi.gpus[0].name",
                    "gpu.nvidia_smi.gpus[0].driver_version", "toolchain.cuda.driver_version", "toolchain.cxx.version",
                    "cpu.model", "cpu.usable_cores", "container.in_container", "container.image", "container.variant",
                    "packages.sha256", "host.hostname")


@dataclass
class Comparison:
    a: Side
    b: Side
    factor: float
    fields: list[FieldDiff]
    statuses: list[StatusRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    checks: list[CheckRow] = field(default_factory=list)
    only_a: dict[str, int] = field(default_factory=dict)
    only_b: dict[str, int] = field(default_factory=dict)

    @property
    def environment(self) -> list[FieldDiff]:
        """The differing fields of ENVIRONMENT_KEYS, in that order."""
        by_key = {f.key: f for f in self.fields}
        return [by_key[k] for k in ENVIRONMENT_KEYS if k in by_key]

    def count(self, mark: Mark) -> int:
        return sum(r.mark == mark for r in self.metrics) + sum(r.mark == mark for r in self.statuses) + sum(
            r.mark == mark for r in self.checks)


def _status_mark(a: str, b: str) -> Mark:
    if a == b:
        return "same"
    if a == "OK" and b == "FAILED":
        return "newly failing"
    if a == "FAILED" and b == "OK":
        return "fixed"
    if b == "FAILED":
        return "newly failing"
    return "not comparable"


def compare(a: Side, b: Side, factor: float = FACTOR) -> Comparison:
    """The whole comparison of two sides; metrics and checks only when both are runs."""
    out = Comparison(a, b, factor, manifest_diff(a.manifest, b.manifest))
    if a.results is None or b.results is None:
        return out
    recs_a = {r.id: r for r in a.results.experiments}
    recs_b = {r.id: r for r in b.results.experiments}
    order = list(recs_a) + [i for i in recs_b if i not in recs_a]
    for rid in order:
        ra, rb = recs_a.get(rid), recs_b.get(rid)
        sa, sb = (ra.status if ra else ABSENT), (rb.status if rb else ABSENT)
        if sa != sb:
            reason = lambda r: f"{r.reason.code}: {r.reason.message}" if r and r.reason else ""  # noqa: E731
            out.statuses.append(StatusRow(rid, sa, sb, reason(ra), reason(rb), _status_mark(sa, sb)))
        ma = {(m.name, params_key(m.params)): m for m in (ra.metrics if ra else [])}
        mb = {(m.name, params_key(m.params)): m for m in (rb.metrics if rb else [])}
        for key, metric in ma.items():
            if key in mb:
                ratio, mark, note = judge(metric, mb[key], factor)
                out.metrics.append(MetricRow(rid, metric.name, metric.params, metric.unit, metric.value,
                                             mb[key].value, ratio, mark, note))
        if n := sum(k not in mb for k in ma):
            out.only_a[rid] = n
        if n := sum(k not in ma for k in mb):
            out.only_b[rid] = n
        ca = {(c.name, params_key(c.params)): c for c in (ra.checks if ra else [])}
        cb = {(c.name, params_key(c.params)): c for c in (rb.checks if rb else [])}
        for key, check in ca.items():
            if key in cb and check.passed != cb[key].passed:
                mark: Mark = "newly failing" if check.passed else "fixed"
                out.checks.append(CheckRow(rid, check.name, check.params, check.passed, cb[key].passed, mark,
                                           cb[key].detail or check.detail))
    return out


# ---------------------------------------------------------------------------- text output

def _short(value: Any, width: int = 48) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _params(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items())


def _describe(side: Side) -> str:
    m = side.manifest
    gpus = ((m.get("gpu") or {}).get("nvidia_smi") or {}).get("gpus") or []
    gpu = gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else "no GPU"
    torch = (m.get("torch") or {}).get("version", "?")
    host = (m.get("host") or {}).get("hostname", "?")
    kind = f"profile {side.results.run.profile}" if side.results else "manifest only"
    return f"{side.path} ({kind}; host {host}; torch {torch}; {gpu})"


def format_text(c: Comparison) -> str:
    """The comparison as plain text for a terminal."""
    lines = [f"A: {_describe(c.a)}", f"B: {_describe(c.b)}", ""]
    lines.append(f"Environment differences that change what a timing means: {len(c.environment) or 'none'}")
    lines += [f"  {f.key:<38}  {_short(f.a)}  ->  {_short(f.b)}" for f in c.environment] + [""]
    lines.append(f"Manifest fields that differ: {len(c.fields)} (ignored: {', '.join(IGNORED_FIELDS)})")
    width = max([len(f.key) for f in c.fields] + [10])
    for f in c.fields:
        lines.append(f"  {f.key:<{width}}  {_short(f.a)}  ->  {_short(f.b)}")
    if c.a.results is None or c.b.results is None:
        lines.append("")
        lines.append("Results: not compared (one side is a manifest only)")
        return "\n".join(lines) + "\n"
    lines += ["", f"Experiments whose status differs: {len(c.statuses)}"]
    for s in c.statuses:
        why = f"  B: {s.b_reason}" if s.b_reason else (f"  A: {s.a_reason}" if s.a_reason else "")
        lines.append(f"  {s.mark:<15} {s.experiment}: {s.a} -> {s.b}{why}")
    lines += ["", f"Correctness checks whose outcome differs: {len(c.checks)}"]
    for ch in c.checks:
        lines.append(f"  {ch.mark:<15} {ch.experiment}.{ch.name}{{{_params(ch.params)}}}: "
                     f"{'pass' if ch.a else 'FAIL'} -> {'pass' if ch.b else 'FAIL'}  {_short(ch.detail, 80)}")
    counts = ", ".join(f"{n} {m}" for m in ("better", "worse", "same", "changed", "not comparable")
                       if (n := sum(r.mark == m for r in c.metrics)))
    lines += ["", f"Metrics both runs have: {len(c.metrics)} ({counts or 'none'}; factor {c.factor:g})",
              f"  {'mark':<15} {'before':>12} {'after':>12} {'ratio':>7}  metric"]
    for r in c.metrics:
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        note = f"  ({r.note})" if r.note else ""
        lines.append(f"  {r.mark:<15} {_short(r.a, 12):>12} {_short(r.b, 12):>12} {ratio:>7}  "
                     f"{r.experiment}.{r.name}{{{_params(r.params)}}} [{r.unit}]{note}")
    for label, only in (("A", c.only_a), ("B", c.only_b)):
        if only:
            lines.append(f"Metrics only in {label}: " + ", ".join(f"{k} ({n})" for k, n in only.items()))
    return "\n".join(lines) + "\n"
