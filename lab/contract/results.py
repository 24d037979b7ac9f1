"""The results contract: what `results.json` holds, how it is written and how it is read.

A run directory holds `results.json` and `manifest.json` (the same manifest, on its own, for `lab
compare`). The file is rewritten atomically after every experiment, so an interrupted run keeps
everything it measured; `run.state` says whether the run completed. Schema 1, field by field:
docs/results.md (its tables are generated from these classes: `python -m lab.contract.schema_doc`).

The schema is these dataclasses, checked by pydantic v2. They stay standard-library dataclasses
rather than pydantic models because about twenty experiments, the runner and the report build and
change records in plain Python (positional construction, `record.status = ...`, `dataclasses`
helpers); pydantic's `TypeAdapter` validates standard dataclasses as they are, strictly typed
through the field types of `lab.contract.schema` (nested unions included), and generates their JSON Schema
with the attribute docstrings below as descriptions. So nothing is declared twice and no caller
changes; validation happens where data crosses a boundary:
- `save` checks the whole file before writing it (a value that cannot be stored never reaches disk);
- `quarantine` checks one record as the runner records it, removing what cannot be stored and
  saying which metric, sample, check or note it was (the runner then marks the experiment FAILED);
- `load` / `from_dict` refuse a file off the schema with one line naming the file and the field, and drop a metric's
  exact repeat (`once`: at load, not by rewriting the references, so every older run anywhere reads alike).
The manifest stays a plain dict in memory (the report and compare read it as one) and is checked
against `lab.contract.manifest_schema.Manifest`. An unknown `schema` or `manifest_version` is refused.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (BeforeValidator, ConfigDict, JsonValue, TypeAdapter, ValidationError, ValidationInfo,
                      WrapValidator, field_validator, model_validator)
from pydantic_core import PydanticCustomError

from lab.atomic import clean, write_json_atomic
from lab.contract import query
from lab.contract.names import Experiment
from lab.contract.reasons import Reason
from lab.contract.manifest_schema import MANIFEST, MANIFEST_VERSION
from lab.contract.schema import (CodeName, Count, Flag, JsonObject, MetricValue, Number, ResultsError, Text, check_version,
                        describe_error, known_code, metric_value, one_line, read_json)

__all__ = ["SCHEMA", "STATUSES", "RESULTS_NAME", "MANIFEST_NAME", "ResultsError", "Reason", "Spread", "Metric",
           "Samples", "Check", "Skipped", "LibraryLog", "Record", "Stop", "Start", "RunInfo", "Results", "to_dict",
           "save", "from_dict", "load", "once", "quarantine", "unstorable", "write_json_atomic"]

SCHEMA: Literal[1] = 1
Status = Literal["OK", "NOT_RUN", "FAILED"]
RunState = Literal["running", "complete", "interrupted", "stopped"]
STATUSES: tuple[str, ...] = ("OK", "NOT_RUN", "FAILED")
RESULTS_NAME = "results.json"
MANIFEST_NAME = "manifest.json"

_CLOSED = ConfigDict(extra="forbid", use_attribute_docstrings=True)


@dataclass
class Spread:
    """Distribution of raw samples behind a median; `noisy` flags a wide interquartile range."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    n: Count
    """how many samples"""
    median: Number
    q1: Number
    q3: Number
    min: Number
    max: Number
    rel_iqr: Number
    """(q3 - q1) / median"""
    noisy: Flag
    """the interquartile range exceeds 10% of the median"""
    ci_low: Number | None = None
    """low end of the 95% interval of the median (a bootstrap over rounds, each round one block; null: fewer than
    two rounds, or a run made before intervals were stored)"""
    ci_high: Number | None = None
    """high end of the 95% interval of the median"""


@dataclass
class Metric:
    """One number and what it belongs to (method, batch, dtype, ... live in params)."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    name: Text
    """the metric's name, declared with its unit, direction and kind in lab/contract/metrics.py"""
    value: MetricValue
    """a number, a boolean, a list of numbers or null (not measured); text only where the metric is declared as text"""
    unit: Text
    """a unit of lab/contract/units.py"""
    params: JsonObject = field(default_factory=dict)
    """what the value belongs to: method, batch, dtype, readback, ..."""
    spread: Spread | None = None
    """timings only: the spread of the raw samples behind the median"""

    @property
    def key(self) -> tuple[str, str]:
        """What makes it one figure: its name and params (a record holds each once, lab.run.context)."""
        return self.name, json.dumps(self.params, sort_keys=True, default=str)

    @field_validator("value", mode="after")
    @classmethod
    def _of_declared_kind(cls, value: Any, info: ValidationInfo) -> Any:
        return metric_value(info.data["name"], value) if isinstance(info.data.get("name"), str) else value


@dataclass
class Samples:
    """Raw timing samples behind a metric of the same name and params."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    name: Text
    """the name of the metric the samples are behind"""
    unit: Text
    params: JsonObject
    """the params of that metric"""
    values: list[Number]
    """the raw samples (6 significant digits)"""


@dataclass
class Check:
    """A correctness check made outside the timed path."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    name: Text
    """what was compared, e.g. tokens_equal"""
    passed: Flag
    detail: Text = ""
    """what differed, where, by how much"""
    params: JsonObject = field(default_factory=dict)
    """what the check belongs to: method, batch, ..."""
    fatal: Flag = True
    """a failed fatal check makes the record FAILED with reason check_failed"""


@dataclass
class Skipped:
    """A part of an experiment that did not run, with its reason: it is listed, never dropped."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    item: Text
    """the part that did not run, e.g. a method or a batch"""
    code: CodeName
    """a reason code of lab/contract/reasons.py"""
    message: Text
    """the sentence that tells the user how to make it run"""


LogSource = Literal["warning", "logging", "stderr"]


@dataclass
class LibraryLog:
    """A warning, log record or line of output that a library (torch, Inductor, the profiler) produced while
    the experiment ran, kept as data instead of printed: identical ones once, with how many times."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    source: LogSource
    """warning (Python `warnings`), logging (a record of torch's loggers) or stderr (a line written to the
    process's standard error below Python, e.g. the profiler's `USDT: ... profiler_start`)"""
    origin: Text
    """the warning's category, the logger's name, or `stderr`"""
    level: Text
    """the record's level (WARNING, INFO, ...); `WARNING` for a warning; the line's own tag (e.g. `W`) or empty"""
    message: Text
    """the text (timestamps and process ids removed from stderr lines so that repeats match; at most 4000
    characters)"""
    count: Count = 1
    """how many times it was produced during the experiment"""
    location: Text = ""
    """where it came from: file:line of the warning or the logging call (empty when unknown)"""


def _reason_code(reason: Any) -> Any:
    """An unknown code is refused with the lab's sentence before pydantic's enum check lists every code."""
    code = reason.get("code") if isinstance(reason, dict) else getattr(reason, "code", None)
    if isinstance(code, str):
        known_code(code)
    return reason


@dataclass
class Record:
    """The result of one experiment."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    id: Text
    """the catalogue's id (stable; see `python -m lab list`)"""
    title: Text
    """the catalogue's one-line title"""
    status: Status
    """OK; NOT_RUN (prerequisites missing); FAILED (raised, or a fatal correctness check failed)"""
    reason: Annotated[Reason, BeforeValidator(_reason_code)] | None = None
    """{code, message}: a reason code of lab/contract/reasons.py and the sentence that tells the user how to make it
    run; required unless OK"""
    duration_s: Number = 0.0
    """the experiment's own time"""
    started_at: Text = ""
    """ISO 8601, UTC"""
    metrics: list[Metric] = field(default_factory=list)
    """the numbers the experiment measured"""
    samples: list[Samples] = field(default_factory=list)
    """the raw samples behind each timing"""
    checks: list[Check] = field(default_factory=list)
    """correctness checks made outside the timed path"""
    notes: JsonObject = field(default_factory=dict)
    """non-numeric evidence: graph-break and recompile reasons, cudagraph skip reasons, the kernels that took the time"""
    skipped: list[Skipped] = field(default_factory=list)
    """parts of the experiment that did not run (a flag off, a piece that needs CUDA)"""
    error: dict[str, Text] | None = None
    """FAILED only: type, message and the last lines of the traceback"""
    library_logs: list[LibraryLog] | None = None
    """what libraries said while the experiment ran (warnings, torch's log records, stderr lines such as the
    profiler's), deduplicated with counts, in order of first appearance; the console shows only how many.
    Absent where nothing was listened to: an experiment that did not start, or a file written before the lab
    kept library output"""

    @model_validator(mode="after")
    def _reasoned(self) -> Record:
        if self.status != "OK" and self.reason is None:
            raise PydanticCustomError("reason_missing", "a {status} record needs a reason (code and message)",
                                      {"status": self.status})
        return self

    def metric(self, name: str, **params: Any) -> Metric:
        """The metric with this name whose params include the given ones (exactly one must match: query.one)."""
        return query.one(self, name, **params)

    def find(self, name: str, **params: Any) -> Metric | None:
        """The metric with this name whose params include the given ones, or None (several: an error; query.maybe)."""
        return query.maybe(self, name, **params)


@dataclass
class Stop:
    """Why a start ended at its `--stop-after` budget; the experiments not started have no record (`--resume` runs them)."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    code: CodeName
    """stop_after: the start's time budget would have been crossed"""
    message: Text
    budget_s: Number
    """the --stop-after budget, in seconds from the command's start"""
    elapsed_s: Number
    """seconds from the command's start when it stopped"""
    next: Text
    """the experiment it did not start"""
    expected_s: Number | None = None
    """how long `next` took in an earlier start of this run (at least that long, if it was cut off); null: not known"""
    not_started: list[Text] = field(default_factory=list)
    """every experiment asked for and not started, in order (`next` first)"""


@dataclass
class Start:
    """One start of the run: the first, then one per `lab run --resume` into the same directory."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    started_at: Text
    """ISO 8601, UTC"""
    argv: list[Text] = field(default_factory=list)
    """the command line of this start"""
    host: Text = ""
    """the host name"""
    pid: Count = 0
    """the process id"""
    kept: list[Text] = field(default_factory=list)
    """experiments whose OK records from earlier starts this start kept (the others it ran again)"""
    manifest_changes: list[Text] = field(default_factory=list)
    """manifest fields that differ from the first start's (e.g. lab.commit): provenance of the records this start made"""
    load_average: list[Number] | None = None
    """the host's 1, 5 and 15 minute load averages at this start (null where the OS has none): what may differ between starts"""
    usable_cores: Count | None = None
    """the CPU cores this process could use at this start; a load above them makes this start's timings suspect"""
    stop_after_s: Number | None = None
    """this start's --stop-after budget in seconds (null: none)"""
    stop: Stop | None = None
    """why this start stopped at its budget (null: it did not)"""


@dataclass
class RunInfo:
    """The run as a whole."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    profile: Text
    """the profile's name (lab/contract/profiles.py)"""
    started_at: Text
    """ISO 8601, UTC"""
    finished_at: Text | None = None
    """null while the run is under way"""
    wall_s: Number | None = None
    """the lab's own wall time (over all its starts)"""
    state: RunState = "running"
    """running (under way, or killed), interrupted (Ctrl-C, SIGTERM: the experiments not finished are NOT_RUN interrupted), stopped (at the last start's --stop-after budget, between experiments: `run.starts[-1].stop` says why; the experiments not started have no record, `--resume` runs them), complete"""
    argv: list[Text] = field(default_factory=list)
    """the command line"""
    only: list[Text] | None = None
    """the experiments asked for with --only (null: the profile's)"""
    starts: list[Start] = field(default_factory=list)
    """every start of the run: the first, then each --resume (absent from runs written before the lab recorded starts)"""


def _manifest(value: Any, handler: Any) -> Any:
    MANIFEST.validate_python(value)
    return value


@dataclass
class Results:
    """The whole run: results.json."""

    __pydantic_config__: ClassVar[ConfigDict] = _CLOSED
    run: RunInfo
    """the run as a whole"""
    manifest: Annotated[dict[str, Any], WrapValidator(_manifest)]
    """the environment manifest (below) plus `profile`: every knob of the profile used"""
    experiments: list[Record] = field(default_factory=list)
    """one record per experiment asked for, in catalogue order"""
    schema: Literal[1] = SCHEMA
    """1. A loader that does not know the version refuses the file."""
    lab_version: Text = ""
    """the lab's version (lab.__version__)"""

    def record(self, experiment_id: Experiment | str) -> Record:
        """The record of `experiment_id`; KeyError where the run has none (query.experiment)."""
        if (rec := query.experiment(self, experiment_id)) is None:
            raise KeyError(experiment_id)
        return rec


@functools.cache
def adapter(cls: Any) -> TypeAdapter[Any]:
    """The pydantic validator of one of the classes above (built once, on first use)."""
    return TypeAdapter(cls)


# ---------------------------------------------------------------------------- writing

def to_dict(results: Results) -> dict[str, Any]:
    """The results as JSON's own types (non-finite floats as strings), `schema` first."""
    data = clean(results)
    if not data["run"].get("starts"):
        data["run"].pop("starts", None)  # a run written before starts were recorded stays byte for byte the same
    for start in data["run"].get("starts", []):
        for key in ("load_average", "usable_cores", "stop_after_s", "stop"):  # unknown or none: left out, as before
            if start.get(key) is None:
                start.pop(key, None)
    for record in data["experiments"]:
        if record.get("library_logs") is None:  # not listened to: left out, as files written before the field
            record.pop("library_logs", None)
        for metric in record.get("metrics", ()):
            sp = metric.get("spread")
            if sp and sp.get("ci_low") is None and sp.get("ci_high") is None:  # no interval: as written before it
                sp.pop("ci_low", None)
                sp.pop("ci_high", None)
    return {"schema": data.pop("schema"), "lab_version": data.pop("lab_version"), **data}


def save(results: Results, run_dir: Path) -> Path:
    """Check the results against the schema, then write run_dir/results.json atomically."""
    path = run_dir / RESULTS_NAME
    data = to_dict(results)
    from_dict(data, path)
    write_json_atomic(path, data)
    return path


def quarantine(record: Record) -> list[str]:
    """Remove from `record` what the schema refuses; one line for each thing removed (empty: all can be saved).

    Metrics, samples, checks and skipped items are checked one by one, notes key by key; what is left
    is checked as a whole (its reason, its title...) and a problem there is reported but not removed.
    """
    problems: list[str] = []
    for attr, cls in (("metrics", Metric), ("samples", Samples), ("checks", Check), ("skipped", Skipped)):
        items = getattr(record, attr)
        raw = {attr: [clean(item) for item in items]}
        kept = []
        for i, item in enumerate(items):
            try:
                adapter(cls).validate_python(raw[attr][i])
                kept.append(item)
            except ValidationError as exc:
                problems.append(describe_error(exc, raw, (attr, i)))
        setattr(record, attr, kept)
    for key, value in list(record.notes.items()):
        try:
            adapter(JsonValue).validate_python(clean(value))
        except ValidationError as exc:
            problems.append(describe_error(exc, {}, ("notes", key)))
            del record.notes[key]
    raw_record = clean(record)
    try:
        adapter(Record).validate_python(raw_record)
    except ValidationError as exc:
        problems.append(describe_error(exc, raw_record, ()))
    return problems


def unstorable(value: Any, where: str) -> str | None:
    """Why `value` cannot be stored as JSON in results.json (one line naming `where`), or None when it can."""
    try:
        adapter(JsonValue).validate_python(clean(value))
    except ValidationError as exc:
        return f"{where}: {describe_error(exc, {})}"
    return None


# ---------------------------------------------------------------------------- reading

CLOCK_SKEW = timedelta(days=1)  # hosts' clocks differ; a run that started later than this from now did not


def _check_started_at(text: str, path: Path | str) -> None:
    """ResultsError for a start time past now (and CLOCK_SKEW): it would sort as the newest run and become every
    report's default baseline. Text that is not an ISO 8601 time is left alone, as before."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return
    when = when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    now = datetime.now(timezone.utc)
    if when > now + CLOCK_SKEW:
        raise ResultsError(f"{path}: field run.started_at: {text[:40]!r} is in the future (this host's clock says "
                           f"{now.isoformat(timespec='seconds')}): a run cannot start after now")


def from_dict(raw: Any, path: Path | str) -> Results:
    """Results from parsed JSON, or ResultsError: one line naming `path` and the first field off the schema."""
    if not isinstance(raw, dict):
        raise ResultsError(f"{path}: top level is not a JSON object")
    check_version(raw, "schema", SCHEMA, "", path, what="results schema")
    if isinstance(raw.get("manifest"), dict):
        check_version(raw["manifest"], "manifest_version", MANIFEST_VERSION, "manifest.", path)
    try:
        results: Results = adapter(Results).validate_python(raw)
    except ValidationError as exc:
        raise ResultsError(one_line(path, exc, raw)) from None
    _check_started_at(results.run.started_at, path)
    first: dict[str, int] = {}
    for i, record in enumerate(results.experiments):  # a second record of one id would mix with the first
        if record.id in first:
            raise ResultsError(f"{path}: field experiments[{i}].id: experiment {record.id!r} again (first at "
                               f"experiments[{first[record.id]}]); a run holds one record per experiment")
        first[record.id] = i
        record.metrics = once(record.metrics, f"{path}: field experiments[{i}]")
    return results


def once(metrics: list[Metric], where: str) -> list[Metric]:
    """`metrics` of a file written before `Context.metric` refused a repeat (the CPU references' `first_call_s`): an
    exact repeat dropped, losing nothing; one with another value refused, as either may be stale (ResultsError)."""
    kept: dict[tuple[str, str], Metric] = {}
    for j, m in enumerate(metrics):
        first = kept.setdefault(m.key, m)
        if first is not m and first != m:
            raise ResultsError(f"{where}.metrics[{j}]: metric {m.name!r} with params {m.params} again, with "
                               f"another value ({first.value!r}, then {m.value!r}): one of them is stale")
    return list(kept.values())


def load(path: Path | str) -> Results:
    """Load a results file (or the results.json inside a run directory), refusing anything off-contract."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_NAME
    return from_dict(read_json(path), path)

