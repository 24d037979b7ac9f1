"""The results contract: what `results.json` holds, how it is written and how it is read.

A run directory holds `results.json` (schema below) and `manifest.json` (the same manifest,
on its own, for `lab compare`). The file is rewritten atomically after every experiment, so an
interrupted run keeps everything it measured; `run.state` says whether the run completed.

Schema 1 (see docs/results.md for the field-by-field description):

    {"schema": 1, "lab_version": str,
     "run": {"profile", "started_at", "finished_at", "wall_s", "state", "argv", "only"},
     "manifest": {...},
     "experiments": [Record, ...]}

The loader refuses any other schema version with a one-line error that names the file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

from lab.atomic import clean, write_json_atomic
from lab.reasons import Reason

SCHEMA = 1
Status = Literal["OK", "NOT_RUN", "FAILED"]
STATUSES: tuple[str, ...] = ("OK", "NOT_RUN", "FAILED")
RESULTS_NAME = "results.json"
MANIFEST_NAME = "manifest.json"


class ResultsError(ValueError):
    """A results or manifest file that cannot be used; the message is one line naming the file."""


@dataclass
class Spread:
    """Distribution of raw samples behind a median; `noisy` flags a wide interquartile range."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    rel_iqr: float
    noisy: bool


@dataclass
class Metric:
    """One number and what it belongs to (method, batch, dtype, ... live in params)."""

    name: str
    value: float | int | bool | str | None
    unit: str
    params: dict[str, Any] = field(default_factory=dict)
    spread: Spread | None = None


@dataclass
class Samples:
    """Raw timing samples behind a metric of the same name and params."""

    name: str
    unit: str
    params: dict[str, Any]
    values: list[float]


@dataclass
class Check:
    """A correctness check made outside the timed path."""

    name: str
    passed: bool
    detail: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    fatal: bool = True


@dataclass
class Skipped:
    """A part of an experiment that did not run, with its reason: it is listed, never dropped."""

    item: str
    code: str
    message: str


@dataclass
class Record:
    """The result of one experiment."""

    id: str
    title: str
    status: Status
    reason: Reason | None = None
    duration_s: float = 0.0
    started_at: str = ""
    metrics: list[Metric] = field(default_factory=list)
    samples: list[Samples] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    error: dict[str, str] | None = None

    def metric(self, name: str, **params: Any) -> Metric:
        """The metric with this name whose params include the given ones (exactly one must match)."""
        found = [m for m in self.metrics if m.name == name and all(m.params.get(k) == v for k, v in params.items())]
        if len(found) != 1:
            raise KeyError(f"{self.id}: {len(found)} metrics named {name!r} with {params}")
        return found[0]


@dataclass
class RunInfo:
    profile: str
    started_at: str
    finished_at: str | None = None
    wall_s: float | None = None
    state: Literal["running", "complete", "interrupted"] = "running"
    argv: list[str] = field(default_factory=list)
    only: list[str] | None = None


@dataclass
class Results:
    run: RunInfo
    manifest: dict[str, Any]
    experiments: list[Record] = field(default_factory=list)
    schema: int = SCHEMA
    lab_version: str = ""

    def record(self, experiment_id: str) -> Record:
        for rec in self.experiments:
            if rec.id == experiment_id:
                return rec
        raise KeyError(experiment_id)


def ok_record(records: Iterable[Record], experiment_id: str) -> Record | None:
    """The OK record of `experiment_id` among `records` (an earlier experiment of this run), or None."""
    return next((r for r in records if r.id == experiment_id and r.status == "OK"), None)


# ---------------------------------------------------------------------------- serialisation

def to_dict(results: Results) -> dict[str, Any]:
    return clean(asdict(results))


def save(results: Results, run_dir: Path) -> Path:
    path = run_dir / RESULTS_NAME
    write_json_atomic(path, to_dict(results))
    return path


# ---------------------------------------------------------------------------- strict loading

def _need(obj: Any, key: str, kind: type | tuple[type, ...], where: str, path: Path) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise ResultsError(f"{path}: missing field {where}{key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise ResultsError(f"{path}: field {where}{key!r} has type {type(value).__name__}")
    return value


def _spread(raw: Any) -> Spread | None:
    return None if raw is None else Spread(**raw)


def _record(raw: Any, path: Path, index: int) -> Record:
    where = f"experiments[{index}]."
    rid = _need(raw, "id", str, where, path)
    status = _need(raw, "status", str, where, path)
    if status not in STATUSES:
        raise ResultsError(f"{path}: experiment {rid!r} has unknown status {status!r}")
    for key, kind in (("metrics", list), ("duration_s", (int, float))):
        _need(raw, key, kind, where, path)
    if "reason" not in raw:
        raise ResultsError(f"{path}: missing field {where}'reason'")
    reason = raw["reason"]
    if status != "OK" and not (isinstance(reason, dict) and {"code", "message"} <= reason.keys()):
        raise ResultsError(f"{path}: experiment {rid!r} is {status} without a reason {{code, message}}")
    try:
        return Record(
            id=rid,
            title=raw.get("title", rid),
            status=status,  # type: ignore[arg-type]
            reason=Reason(**reason) if reason else None,
            duration_s=float(raw["duration_s"]),
            started_at=raw.get("started_at", ""),
            metrics=[Metric(name=m["name"], value=m["value"], unit=m["unit"], params=m.get("params", {}),
                            spread=_spread(m.get("spread"))) for m in raw["metrics"]],
            samples=[Samples(**s) for s in raw.get("samples", [])],
            checks=[Check(**c) for c in raw.get("checks", [])],
            notes=raw.get("notes", {}),
            skipped=[Skipped(**s) for s in raw.get("skipped", [])],
            error=raw.get("error"),
        )
    except (KeyError, TypeError) as exc:
        raise ResultsError(f"{path}: experiment {rid!r} is malformed ({exc})") from None


def from_dict(raw: Any, path: Path) -> Results:
    if not isinstance(raw, dict):
        raise ResultsError(f"{path}: top level is not a JSON object")
    schema = raw.get("schema")
    if schema != SCHEMA:
        raise ResultsError(f"{path}: unknown results schema {schema!r} (this lab reads schema {SCHEMA})")
    run = _need(raw, "run", dict, "", path)
    manifest = _need(raw, "manifest", dict, "", path)
    experiments = _need(raw, "experiments", list, "", path)
    _need(run, "profile", str, "run.", path)
    try:
        info = RunInfo(**run)
    except TypeError as exc:
        raise ResultsError(f"{path}: field 'run' is malformed ({exc})") from None
    return Results(run=info, manifest=manifest, schema=schema, lab_version=raw.get("lab_version", ""),
                   experiments=[_record(r, path, i) for i, r in enumerate(experiments)])


def load(path: Path | str) -> Results:
    """Load a results file (or the results.json inside a run directory), refusing anything off-contract."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return from_dict(raw, path)
