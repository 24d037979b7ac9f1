"""One way to ask a run for a record or a metric: the report, `lab headline`, `lab compare`, the runner and
`Record.metric`/`Record.find` all ask through these.

- `all(rec, name, **params)`: every metric named `name` whose params include the given ones;
- `maybe(...)`: that metric, or None where there is none;
- `one(...)`: that metric, or QueryError where there is none; `interval(rec, spec, ...)`: its stored 95% interval;
both raise QueryError where several match (a second match is a figure recorded twice, or a question that
names too few params: it is never settled by taking the first). `rec` may be None (the experiment is not in
the run), which holds nothing.
- `experiment(run, Experiment.X)`: the record of one experiment, or None; `ok(...)` only an OK one;
  `measured(...)` an OK one or a FAILED one that holds measurements, with the cases whose fatal checks failed.

Experiment ids, statuses and param names are the enums of lab.contract.names.
"""

from __future__ import annotations

import builtins
from typing import Any, Iterable, Mapping, Protocol, Sequence, TypeVar

from lab.contract.metrics import MetricSpec
from lab.contract.names import Experiment, Param, Status

M = TypeVar("M", bound="_Metric")
M_co = TypeVar("M_co", bound="_Metric", covariant=True)
R = TypeVar("R", bound="_Record[Any]")
R_co = TypeVar("R_co", bound="_Record[Any]", covariant=True)
Case = tuple[Any, Any, Any]  # (method, batch, dtype)


class _Metric(Protocol):  # the shapes asked about: results' Metric, Record and Results (which ask through here)
    @property
    def name(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def value(self) -> Any: ...


class _Record(Protocol[M_co]):
    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def metrics(self) -> Sequence[M_co]: ...
    @property
    def checks(self) -> Sequence[Any]: ...


class _Run(Protocol[R_co]):
    @property
    def experiments(self) -> Sequence[R_co]: ...


class QueryError(KeyError):
    """No metric where one was required, or several where at most one may be."""


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """The params as the reader wrote them: keys given as `Param` members print as their names' strings."""
    return {str(k): v for k, v in params.items()}


def all(rec: _Record[M] | None, name: object, **params: Any) -> builtins.list[M]:  # noqa: A001
    """The metrics named `name` (a declared MetricSpec, or its name: compared as str) whose params include the given ones."""
    name = str(name)
    return [m for m in (rec.metrics if rec is not None else ()) if m.name == name and
            builtins.all(m.params.get(k) == v for k, v in params.items())]


def maybe(rec: _Record[M] | None, name: object, **params: Any) -> M | None:
    """The one metric named `name` whose params include the given ones; None where there is none."""
    found = all(rec, name, **params)
    if len(found) > 1:
        raise QueryError(f"{rec.id if rec else '?'}: {len(found)} metrics named {str(name)!r} with {_plain(params)}")
    return found[0] if found else None


def one(rec: _Record[M] | None, name: object, **params: Any) -> M:
    """The one metric named `name` whose params include the given ones; QueryError where there is none."""
    found = maybe(rec, name, **params)
    if found is None:
        raise QueryError(f"{rec.id if rec else '?'}: 0 metrics named {str(name)!r} with {_plain(params)}")
    return found


def interval(rec: _Record[M] | None, spec: MetricSpec, **params: Any) -> tuple[Any, Any] | None:
    """The values of the two metrics that hold `spec`'s 95% interval (its declaration's `interval`), recorded with
    these params; None where either is not stored."""
    ends = [maybe(rec, name, **params) for name in spec.interval or ()]
    return (ends[0].value, ends[1].value) if len(ends) == 2 and ends[0] is not None and ends[1] is not None else None


def _records(run: _Run[R] | Iterable[R]) -> Iterable[R]:
    return run if isinstance(run, Iterable) else run.experiments


def experiment(run: _Run[R] | Iterable[R], eid: Experiment | str) -> R | None:
    """The record of `eid` (an Experiment; a str for a test's made-up one) in a run, or None (a run holds at most
    one per experiment: the loader refuses a second)."""
    return next((r for r in _records(run) if r.id == eid), None)


def ok(run: _Run[R] | Iterable[R], eid: Experiment) -> R | None:
    """The OK record of `eid` (an earlier experiment of this run), or None."""
    rec = experiment(run, eid)
    return rec if rec is not None and rec.status == Status.OK else None


def measured(run: _Run[R] | Iterable[R], eid: Experiment) -> tuple[R | None, set[Case]]:
    """The record of `eid` that holds measurements: OK, or FAILED with metrics (a failed fatal check of one case
    fails the experiment, not the cases that passed); with the (method, batch, dtype) cases whose fatal checks
    failed, which a later experiment must leave out."""
    rec = experiment(run, eid)
    if rec is None or not (rec.status == Status.OK or (rec.status == Status.FAILED and rec.metrics)):
        return None, set()
    return rec, {(c.params.get(Param.METHOD), c.params.get(Param.BATCH), c.params.get(Param.DTYPE))
                 for c in rec.checks if c.fatal and not c.passed}
