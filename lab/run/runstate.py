"""A run's bookkeeping: its starts, what a resumed run keeps, and the records of experiments a stop cut off.

Every experiment a run was asked for ends with exactly one record, whatever happens: OK, FAILED, or
NOT_RUN with a reason. When the run itself stops (Ctrl-C, SIGTERM, SIGHUP, an error of the runner),
the experiment under way and every one not reached become NOT_RUN `interrupted`, saying how to
finish them (`--resume`). A resumed run (lab.run.rundir) keeps the OK records of earlier starts and runs
the rest again; `run.starts` lists each start, with the manifest fields that changed since the first and
what may differ between starts (the host's load, the time). What changes what is measured may not
differ: a resume with another resolved profile (its model's shapes included), other weights or another
lab source (unless `--allow-source-change`) is refused with one line (`check_same_measurement`).
"""

from __future__ import annotations

import os
import signal
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from lab.atomic import clean
from lab.contract.catalogue import ExperimentSpec, resolve
from lab.contract.names import Status
from lab.host.hostinfo import load_average, usable_cores
from lab.run.manifest import now_iso
from lab.contract.reasons import Code, Reason
from lab.contract.results import Record, Results, Start
from lab.run.rundir import RunDirError

# manifest fields whose change between starts means records were made in another environment
PROVENANCE_FIELDS = ("python.version", "python.executable", "torch", "libraries", "toolchain.cxx.path",
                     "toolchain.cxx.version", "toolchain.triton.version", "toolchain.cuda.device_name",
                     "lab.commit", "lab.dirty", "lab.source_sha256", "container.image", "packages.sha256",
                     "weights", "host.hostname", "compiler_settings")


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into an exception so the runner records the run's end (a KeyboardInterrupt,
    so everything that already cleans up on Ctrl-C cleans up on it too)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While the run is under way, SIGTERM and SIGHUP raise `Stopped` in the main thread (as Ctrl-C does)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Stopped(signum)

    saved = {}
    for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if sig is not None:
            saved[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


class NotSaved(ValueError):
    """results.json or manifest.json could not be written (a full disk, a lost mount): the message is one line naming
    the file, the record it would have held and how to finish the run."""


def overloaded(load: list[float] | None, cores: int | None) -> bool | None:
    """Whether the host's 1-minute load exceeds the cores this process may use (None: unknown)."""
    if not (isinstance(load, list) and load and isinstance(cores, int) and cores > 0):
        return None
    return float(load[0]) > cores


def host_overloaded(manifest: dict[str, Any]) -> bool | None:
    """The manifest's `host.overloaded`: its load at the start against the usable cores."""
    return overloaded(_get(manifest, "host.load_start"), _get(manifest, "cpu.usable_cores"))


def load_warning(start: Start) -> str | None:
    """This start's warning when the host was overloaded as it began, else None."""
    if overloaded(start.load_average, start.usable_cores) is not True:
        return None
    return (f"the host's 1-minute load is {(start.load_average or [0.0])[0]:g} on {start.usable_cores} usable core(s): other "
            f"work competes for the CPU, so every timing of this start is suspect (recorded in the manifest as "
            f"host.overloaded and on the run page)")


def resume_hint(out_dir: Any) -> str:
    return f"`python -m lab run --resume --out {out_dir}` (same profile)"


def not_saved(path: Any, exc: OSError, out_dir: Any, record: Record | None, saved: int) -> NotSaved:
    """The error for a save that failed: after `record` was measured (None: before any experiment ran), with
    `saved` records already in the file."""
    why = exc.strerror or type(exc).__name__
    if record is None:
        what = "no experiment of this start has run yet"
    else:
        what = (f"the record of {record.id} ({record.status}, measured in {record.duration_s or 0:.1f} s) is not "
                f"saved, the {saved} record(s) before it are")
    return NotSaved(f"{path}: cannot write it ({why}): {what}; free space (or fix the file system), then finish the "
                    f"run with {resume_hint(out_dir)}: it keeps the saved OK records and runs the rest again")


def save_start(out_dir: Any, writes: tuple[tuple[str, Callable[[], object]], ...]) -> None:
    """Run this start's first writes (name, write) in order; a full disk is NotSaved naming the file (a permission
    error stays itself: lab.__main__ names its fix)."""
    for name, write in writes:
        try:
            write()
        except PermissionError:
            raise
        except OSError as exc:  # before any experiment of this start: the directory stays resumable
            raise not_saved(Path(out_dir) / name, exc, out_dir, None, 0) from None


def why_stopped(exc: BaseException) -> str:
    if isinstance(exc, NotSaved):
        return f"the run could not write its results ({str(exc).split(': ', 1)[0]})"
    if isinstance(exc, Stopped):
        return f"the run received {signal.Signals(exc.signum).name}"
    if isinstance(exc, KeyboardInterrupt):
        return "the run was interrupted (Ctrl-C)"
    return f"the run stopped on an error of the lab ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"


def interrupted(record: Record, why: str, out_dir: Any, started: bool) -> Record:
    """`record` as NOT_RUN interrupted (what an experiment under way had recorded is kept)."""
    how = f"finish it with {resume_hint(out_dir)}"
    when = f"during this experiment, after {record.duration_s:.1f} s (what it recorded is kept)" if started \
        else "before this experiment started"
    record.status = Status.NOT_RUN.value
    record.reason = Reason(Code.INTERRUPTED, f"{why} {when}: {how}")
    return record


def unreached(spec: ExperimentSpec, why: str, out_dir: Any) -> Record:
    return interrupted(Record(id=spec.id, title=spec.title, status=Status.NOT_RUN.value, started_at=""), why, out_dir, False)


def new_start(argv: list[str], kept: list[str] | None = None, changes: list[str] | None = None) -> Start:
    """This start: when, where, what it kept, and what may differ from another start (the host's load, its cores)."""
    return Start(started_at=now_iso(), argv=list(argv), host=socket.gethostname(), pid=os.getpid(),
                 kept=list(kept or []), manifest_changes=list(changes or []), load_average=load_average(),
                 usable_cores=usable_cores())


def _get(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return clean(data)


def manifest_changes(first: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The provenance fields (PROVENANCE_FIELDS, one level deeper for objects) that differ between two manifests."""
    changed = []
    for name in PROVENANCE_FIELDS:
        a, b = _get(first, name), _get(now, name)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [f"{name}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            changed.append(name)
    return changed


def _first_difference(a: Any, b: Any, name: str) -> tuple[str, Any, Any]:
    """The first dotted field below `name` where `a` and `b` differ, with both values (None: absent)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{name}.{key}")
    return name, a, b


def _weights_flag(weights: Any) -> str:
    if isinstance(weights, dict) and weights.get("source") == "local":
        return f"--weights {weights.get('path')}"
    if isinstance(weights, dict) and weights.get("source") == "random":
        return "--weights random"
    return "no --weights"


def check_same_measurement(first: dict[str, Any], now: dict[str, Any], allow_source_change: bool = False) -> None:
    """A resumed run measures what its first start measured: the resolved profile (model shapes, batches, decode
    steps...), the weights, the label where one is given now and, unless `allow_source_change`, the lab's source
    must be the same as the first start's manifest says; RunDirError (one line naming the first field that differs)
    otherwise."""
    for name, fix in (("profile", "restore the profile's definition (lab/contract/profiles.py)"),
                      ("weights", f"resume with the first start's weights ({_weights_flag(_get(first, 'weights'))})")):
        before, after = _get(first, name), _get(now, name)
        if before is not None and before != after:
            field, was, is_now = _first_difference(before, after, name)
            raise RunDirError(f"--resume: {field} is {is_now!r} now but was {was!r} when the run started: a resumed "
                              f"run keeps measuring what it started measuring ({fix}, or start a new run with --force)")
    before, after = _get(first, "label"), _get(now, "label")
    if after is not None and before != after:
        started = "without one" if before is None else f"as {before!r}"
        raise RunDirError(f"--resume: --label {after!r}, but the run started {started}: a run keeps its one label "
                          f"(resume without --label, or start a new run with --force)")
    before, after = _get(first, "lab.source_sha256"), _get(now, "lab.source_sha256")
    if not allow_source_change and before is not None and before != after:
        raise RunDirError(f"--resume: the lab's source changed since the run started (lab.source_sha256 "
                          f"{str(before)[:12]} -> {str(after)[:12]}): its records would come from two versions of the "
                          f"lab; add --allow-source-change to resume anyway (run.starts records the change), or start "
                          f"a new run with --force")


def resume_selection(previous: Results, profile_name: str, profile_default: list[str] | None,
                     only: list[str] | None, sweeps: bool = True) -> list[ExperimentSpec]:
    """What a resumed run is about: what the first start asked for, plus any --only given now (`sweeps`: the
    profile's flag, for a whole-catalogue profile)."""
    if previous.run.profile != profile_name:
        raise RunDirError(f"--resume: the run in this directory used profile {previous.run.profile!r}, not "
                          f"{profile_name!r}: resume it with --profile {previous.run.profile}")
    asked = previous.run.only or profile_default
    ids = None if asked is None else list(asked) + [r.id for r in previous.experiments] + list(only or [])
    return resolve(ids, sweeps=sweeps)


def check_same_options(previous: Results, options: dict[str, dict[str, Any]], kept: list[str]) -> None:
    """A kept record was measured with the options the first start recorded: the options now must be the same."""
    recorded = found if isinstance(found := previous.manifest.get("options"), dict) else {}
    for eid in kept:
        before, now = recorded.get(eid), clean(options.get(eid))
        if before is not None and now is not None and clean(before) != now:
            diff = [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
            key = diff[0] if diff else "?"
            raise RunDirError(f"--resume: option {eid}.{key} is {now.get(key)!r} now but was {before.get(key)!r} "
                              f"when {eid} was measured: a resumed run keeps one set of options (drop the --set, "
                              f"or start a new run with --force)")


def resumed(previous: Results, specs: list[ExperimentSpec], manifest: dict[str, Any],
            argv: list[str], allow_source_change: bool = False) -> tuple[Results, dict[str, Record]]:
    """The run being resumed, ready for this start: (its results, the OK records kept by id).

    Refused (RunDirError) when what is measured changed (`check_same_measurement`, `check_same_options`).
    The first start's manifest stays (the options of experiments run now are added to it); this start
    is appended to `run.starts` with the records it keeps and the provenance fields that changed."""
    wanted = {s.id for s in specs}
    kept = {r.id: r for r in previous.experiments if r.status == Status.OK and r.id in wanted}
    check_same_measurement(previous.manifest, manifest, allow_source_change)
    check_same_options(previous, manifest["options"], list(kept))
    results = previous
    if not results.run.starts:  # a run written before starts were recorded: its first start
        results.run.starts.append(Start(started_at=results.run.started_at, argv=results.run.argv))
    results.run.starts.append(new_start(argv, list(kept), manifest_changes(previous.manifest, manifest)))
    results.manifest.setdefault("options", {}).update({k: v for k, v in manifest["options"].items() if k not in kept})
    if results.run.only is not None:
        results.run.only = [s.id for s in specs]  # what --only added now is part of the run from here on
    results.run.state, results.run.finished_at = "running", None
    results.experiments = in_order(specs, kept)
    return results, kept


def in_order(specs: list[ExperimentSpec], records: dict[str, Record]) -> list[Record]:
    """The records in catalogue order (the selection's order)."""
    return [records[s.id] for s in specs if s.id in records]
