"""The lab's console: everything a run tells its user, on standard error.

Standard output carries only data (the final line of `lab run` naming the results file, the tables of
`lab list`, the tokens of `lab decode`); what the lab says while it works goes through this module:
- a header, then per experiment one line when it starts and one when it ends: its status and time;
  a NOT_RUN reason with its fix sentence the first time it is met in the run (later ones by code);
  a FAILED one's error; the checks that failed; at most one line about library output
  (`lab.run.librarylogs` keeps that output in the record, `-v` shows it live);
- progress for anything long: `track` and `counter` (item n of N, elapsed, an estimate of what is
  left) and `activity` ("compiling X (first call)" with the time it takes);
- the summary: counts, NOT_RUN codes with counts, FAILED experiments, and every failed check.

The console's promise: while an experiment or a stretch is under way, a line at least every
LAB_PROGRESS_EVERY_S seconds (default 10). On a terminal, progress is drawn live by rich and disappears when
done; an activity of a second or more leaves one line with its time. Elsewhere (a log file, a pipe, the
tests) it is plain lines: a counted stretch says where it is when an item has finished and the console was
quiet for the interval; the heartbeat (`beat`) fills any other silence of the interval with what is under
way: the innermost stretch's status ("compiling X (first call), 20.0 s"), else "<experiment>: still
running, 20.0 s (in module.function)". Each stretch closes with a line once it said anything or lasted a
second. LAB_PROGRESS_EVERY_S=0 prints every step and every activity's start (the tests use it; the
heartbeat then beats every second). Times are lab.heartbeat's clock (`use_clock`; time.monotonic by default).

The heartbeat runs in the measuring process: lab.heartbeat holds its rule, its one thread (which also redraws
the live display: rich's own refresh thread is off) and the timed sections (`timed`) it keeps out of, and
counts every write that lands inside one for the experiment's record.

While experiments run, lab.run.librarylogs redirects file descriptor 2 to catch what libraries write below
Python; the console then writes to a duplicate of the real standard error (`use_stream`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, TextIO, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from lab import heartbeat
from lab.heartbeat import interval_s, now

T = TypeVar("T")
console = Console(stderr=True, highlight=False, soft_wrap=True)
INDENT = "    "
ACTIVITY_LINE_S = 1.0  # an activity at least this long leaves a line with its time
STATUS_STYLE = {"OK": "green", "NOT_RUN": "yellow", "FAILED": "red"}


def use_stream(stream: TextIO | None) -> None:
    """Write to `stream` from now on (None: back to whatever sys.stderr is)."""
    console.file = stream  # type: ignore[assignment]


def _print(renderable: Any) -> None:
    """Every line the console writes: printed, and the time it was said kept for the heartbeat (lab.heartbeat)."""
    with BOARD.lock:
        console.print(renderable)
        heartbeat.shown()


def plural(n: int, word: str) -> str:
    """'1 compile', '2 compiles', '1 distinct message': a count and its noun, in the number it takes."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def say(text: str, style: str = "") -> None:
    """One line of the lab's own, as it is (no markup)."""
    _print(Text(text, style=style))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes} min {s:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


# ---------------------------------------------------------------------------- the run's state

@dataclass
class _RunState:
    experiment: str = ""  # the experiment under way: prefixes its progress lines
    verbose: bool = False  # -v: library output shown live
    reasons_seen: set[tuple[str, str]] = field(default_factory=set)
    started: float = 0.0  # when the experiment under way started
    thread: int | None = None  # the thread running it (where the heartbeat looks for what it does)


STATE = _RunState()


def begin_run(verbose: bool = False) -> None:
    """A new run: nothing said yet."""
    global STATE
    STATE = _RunState(verbose=verbose)
    heartbeat.reset()


def verbose() -> bool:
    return STATE.verbose


def _label(description: str) -> str:
    return f"{STATE.experiment}: {description}" if STATE.experiment else description


def line(message: str) -> None:
    """A progress line of the experiment under way (what `ctx.progress` prints)."""
    say(f"{INDENT}{_label(message)}", "dim")


def library_line(source: str, origin: str, message: str) -> None:
    """-v: one line of library output as it happens (its first line; the record keeps it whole)."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    say(f"{INDENT}  [{source}] {origin}: {first[:300]}", "dim")


# ---------------------------------------------------------------------------- progress

@dataclass
class _Task:
    description: str
    total: int | None
    completed: int = 0
    started: float = field(default_factory=lambda: now())
    lines: int = 0  # plain lines printed while under way
    said: int = 0  # `completed` when the last plain line was printed
    rich_id: Any = None

    def elapsed(self) -> float:
        return now() - self.started

    def remaining(self) -> float | None:
        if not self.total or self.completed <= 0 or self.completed >= self.total:
            return None
        return self.elapsed() / self.completed * (self.total - self.completed)

    def status(self) -> str:
        """'decoding 5/13, 42.0 s, about 1 min 04 s left' or 'compiling X, 42.0 s'."""
        parts = [f"{self.description} {self.completed}/{self.total}" if self.total else self.description,
                 _duration(self.elapsed())]
        left = self.remaining()
        if left is not None:
            parts.append(f"about {_duration(left)} left")
        return ", ".join(parts)


class _Count(ProgressColumn):
    def render(self, task: Any) -> Text:
        return Text(f"{int(task.completed)}/{int(task.total)}" if task.total else "", style="progress.download")


class _Left(ProgressColumn):
    def render(self, task: Any) -> Text:
        own: _Task | None = task.fields.get("own")
        left = own.remaining() if own else None
        return Text(f"about {_duration(left)} left" if left is not None else "", style="progress.remaining")


class _Display(Progress):
    """rich's live display without its refresh thread: redrawn by the heartbeat's rule (lab.heartbeat) and when a
    task is added; each redraw counts as the console showing something."""

    def refresh(self) -> None:
        super().refresh()
        heartbeat.shown()


def _where(thread: int | None) -> str:
    """The innermost function of the lab's own (not the runner's) that `thread` is in, e.g.
    'lab.step.ceilings.roofline'; '' if none."""
    frame = sys._current_frames().get(thread) if thread is not None else None
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(("lab.", "report.")) and module not in ("lab.console", "lab.heartbeat") \
                and not module.startswith("lab.run."):
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back
    return ""


class _Board:
    """The stretches under way (drawn live on a terminal, plain lines elsewhere) and what the heartbeat says."""

    def __init__(self) -> None:
        self.tasks: list[_Task] = []
        self.lock = heartbeat.LOCK
        self.progress: _Display | None = None

    @staticmethod
    def terminal() -> bool:
        return console.is_terminal and not console.is_dumb_terminal

    def add(self, description: str, total: int | None) -> _Task:
        task = _Task(description, total)
        with self.lock:
            self.tasks.append(task)
            if self.terminal():
                if self.progress is None:
                    self.progress = _Display(SpinnerColumn(), TextColumn(f"{INDENT}{{task.description}}"),
                                             BarColumn(bar_width=24), _Count(), TimeElapsedColumn(), _Left(),
                                             console=console, transient=True, redirect_stdout=False,
                                             redirect_stderr=False, auto_refresh=False)
                    self.progress.start()
                task.rich_id = self.progress.add_task(description, total=total, own=task)
        self.wake()
        return task

    def advance(self, task: _Task, n: int = 1) -> None:
        with self.lock:
            task.completed += n
            if self.progress is not None and task.rich_id is not None:
                self.progress.update(task.rich_id, completed=task.completed)
            elif (task.total is None or task.completed < task.total) and task.completed != task.said \
                    and heartbeat.quiet() >= interval_s():
                self._plain(task)  # (the last step is said by the closing line)

    def remove(self, task: _Task) -> None:
        with self.lock:
            if task in self.tasks:
                self.tasks.remove(task)
            if self.progress is not None and task.rich_id is not None:
                self.progress.remove_task(task.rich_id)
                if not self.tasks:
                    self.progress.stop()
                    self.progress = None
                    heartbeat.shown()

    def _plain(self, task: _Task) -> None:
        task.lines += 1
        task.said = task.completed
        say(f"{INDENT}{task.status()}", "dim")

    def busy(self) -> bool:
        """Whether anything is under way that the console promises to report on."""
        return bool(self.tasks or STATE.experiment)

    def live(self) -> bool:
        """Whether the innermost stretch is drawn live (the heartbeat then redraws rather than writes)."""
        return self.progress is not None and bool(self.tasks) and self.tasks[-1].rich_id is not None

    def beat(self, edge: bool = False) -> None:
        """One heartbeat: what is under way, when lab.heartbeat's rule lets it speak now (`edge`: at a timed
        section's edge)."""
        with self.lock:
            if not self.busy() or not heartbeat.due(self.live(), edge):
                return
            if self.progress is not None and self.live():
                self.progress.refresh()
            elif self.tasks:
                self._plain(self.tasks[-1])
            else:
                where = _where(STATE.thread)
                say(f"{INDENT}{STATE.experiment}: still running, {_duration(now() - STATE.started)}"
                    f"{f' (in {where})' if where else ''}", "dim")

    def wake(self) -> None:
        """Start the heartbeat's thread if it is not running (it ends when nothing is under way)."""
        heartbeat.start(self.beat, self.busy, self.live)


BOARD = _Board()


def beat() -> None:
    """One heartbeat now (the thread calls it when the rule may let it speak; a test with its own clock, too)."""
    BOARD.beat()


@contextlib.contextmanager
def timed(label: str, sampling: bool = True) -> Iterator[None]:
    """A timed section named `label` (lab.measure.timing: `time_calls` and each stretch of its samples, a method's
    turn in `rotating_rounds`): at its edges, where no samples are being taken (a gap), the heartbeat speaks early,
    inside it only when the promise would break, and every write while a `sampling` one is under way is counted
    against the outermost (lab.heartbeat). The edges take the console's lock: a write under way ends before the
    timing starts."""
    with BOARD.lock:
        gap = not heartbeat.sampling()
        if gap:
            BOARD.beat(edge=True)
        heartbeat.enter(label, sampling)
    try:
        yield
    finally:
        heartbeat.leave()
    if gap:
        BOARD.beat(edge=True)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """`items`, one at a time, with progress: item n of N (when countable), elapsed, an estimate of the rest."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with counter(description, total) as steps:
        for item in items:
            yield item
            steps.advance()


class Steps:
    """What `counter` yields: call `advance()` after each unit of work."""

    def __init__(self, task: _Task) -> None:
        self._task = task

    def advance(self, n: int = 1) -> None:
        BOARD.advance(self._task, n)


@contextlib.contextmanager
def counter(description: str, total: int | None) -> Iterator[Steps]:
    """Progress over `total` units of work that are not one loop: `with counter(...) as c: ...; c.advance()`."""
    task = BOARD.add(_label(description), total)
    try:
        yield Steps(task)
    finally:
        BOARD.remove(task)
        if task.lines:
            say(f"{INDENT}{task.status()}: done", "dim")


@contextlib.contextmanager
def activity(description: str) -> Iterator[None]:
    """One long thing that cannot be counted, e.g. `activity("compiling compile-default (first call)")`:
    shown under way with its elapsed time; one line with its time when it took a second or more."""
    label = _label(description)
    task = BOARD.add(label, None)
    if task.rich_id is None and interval_s() == 0:
        say(f"{INDENT}{label} ...", "dim")
    ok = False
    try:
        yield
        ok = True
    finally:
        BOARD.remove(task)
        took = task.elapsed()
        if not ok or took >= min(ACTIVITY_LINE_S, interval_s()) or task.lines:
            say(f"{INDENT}{label}: {'done in' if ok else 'stopped after'} {_duration(took)}", "dim")


# ---------------------------------------------------------------------------- the run, experiment by experiment

def run_header(profile: str, device: str, experiments: int, results_path: Any) -> None:
    _print(f"[bold]lab run[/bold] profile={escape(profile)} device={escape(device)} "
           f"experiments={experiments} -> {escape(str(results_path))}")


def experiment_started(index: int, total: int, experiment: str, title: str) -> None:
    """Its line; from now on the heartbeat watches it (until `experiment_ended`)."""
    say(f"[{index}/{total}] {experiment}: {title}")
    STATE.experiment, STATE.started, STATE.thread = experiment, now(), threading.get_ident()
    BOARD.wake()


def experiment_ended() -> None:
    """No experiment under way (it finished, or the run stopped): the heartbeat has nothing more to say of it."""
    STATE.experiment, STATE.thread = "", None


def experiment_finished(record: Any) -> None:
    """The record's status line (a reason's fix sentence once per run), its failed checks, its library output."""
    style = STATUS_STYLE[record.status]
    head = Text(INDENT)
    head.append(record.status, style=style)
    head.append(f" in {record.duration_s:.1f} s")
    reason = record.reason
    if reason is not None:
        key = (str(reason.code), reason.message)
        if record.status == "NOT_RUN" and key in STATE.reasons_seen:
            head.append(f" ({reason.code}, as above)")
        else:
            head.append(f" ({reason.code}: {reason.message})")
            STATE.reasons_seen.add(key)
    _print(head)
    failed = [c for c in record.checks if not c.passed]
    if failed and not (record.reason is not None and str(record.reason.code) == "check_failed" and len(failed) == 1):
        for check in failed[:5]:
            detail = f" ({check.detail})" if check.detail else ""
            say(f"{INDENT}  check failed{'' if check.fatal else ' (not fatal)'}: {check.name}{detail}"[:400], "red")
        if len(failed) > 5:
            say(f"{INDENT}  ... and {len(failed) - 5} more failed checks (results.json has them all)", "red")
    logs = getattr(record, "library_logs", None) or []
    if logs:
        distinct, total = len(logs), sum(entry.count for entry in logs)
        what = f"{plural(distinct, 'distinct message')}, {total} in all" if total > distinct else plural(distinct,
                                                                                                        "message")
        shown = "" if STATE.verbose else "; -v shows it live"
        say(f"{INDENT}library output recorded: {what}{shown}", "dim")
    experiment_ended()


# ---------------------------------------------------------------------------- the end of the run

def counts(results: Any) -> dict[str, int]:
    return {s: sum(r.status == s for r in results.experiments) for s in STATUS_STYLE}


def failed_checks(results: Any) -> list[tuple[str, Any]]:
    """Every check that failed in the run, fatal or not: (experiment id, check)."""
    return [(r.id, c) for r in results.experiments for c in r.checks if not c.passed]


def not_run_codes(results: Any) -> Counter[str]:
    return Counter(str(r.reason.code) for r in results.experiments if r.status == "NOT_RUN" and r.reason)


def summary(results: Any) -> None:
    """The end of the run on stderr: NOT_RUN codes with counts and who, FAILED experiments, failed checks."""
    c = counts(results)
    say(f"done: {c['OK']} OK, {c['NOT_RUN']} NOT_RUN, {c['FAILED']} FAILED in {_duration(results.run.wall_s or 0)}",
        "bold")
    for code, n in not_run_codes(results).most_common():
        who = [r.id for r in results.experiments if r.status == "NOT_RUN" and r.reason and r.reason.code == code]
        say(f"{INDENT}NOT_RUN {code} x{n}: {', '.join(who)}", "yellow")
    for r in results.experiments:
        if r.status == "FAILED" and r.reason is not None:
            say(f"{INDENT}FAILED {r.id}: {r.reason.code}: {r.reason.message}"[:400], "red")
    for exp, check in failed_checks(results):
        detail = f" ({check.detail})" if check.detail else ""
        say(f"{INDENT}check failed: {exp}: {check.name}{detail}"[:400], "red")


def final_line(results: Any, results_path: Any) -> str:
    """The run's last line (stdout): the file, the counts, NOT_RUN codes, and the failed checks by name."""
    c = counts(results)
    codes = not_run_codes(results)
    not_run = f"{c['NOT_RUN']} NOT_RUN" + (f" ({', '.join(f'{k} x{n}' for k, n in codes.most_common())})"
                                           if codes else "")
    failed = failed_checks(results)
    checks = ""
    if failed:
        names = "; ".join(f"{exp}: {check.name}" for exp, check in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        checks = f", {len(failed)} failed check{'s' if len(failed) != 1 else ''} ({names}{more})"
    return (f"{results_path}: {c['OK']} OK, {not_run}, {c['FAILED']} FAILED{checks} "
            f"in {(results.run.wall_s or 0):.1f} s")


def strict_failure(results: Any) -> bool:
    """What `--strict` turns into exit status 1: a FAILED experiment or any failed check."""
    return counts(results)["FAILED"] > 0 or bool(failed_checks(results))
