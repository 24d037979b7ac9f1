"""Library output kept as data: what torch and its friends say while an experiment runs.

Torch's warnings and log records are findings (the cudagraph "skipping cudagraphs due to mutated
inputs" traces, the TF32 hint, the profiler's notices), not console output. While an experiment
runs, three kinds are caught and stored in its record (`Record.library_logs`), identical ones once
with a count:
- Python warnings: `warnings.showwarning` is replaced inside `warnings.catch_warnings()`, so the
  user's filters decide what is shown, as always, and what is shown is recorded instead of printed;
- log records of torch's loggers: a handler on every `torch` logger that does not propagate (torch's
  registered loggers and its artifact loggers, TORCH_LOGS's) and as `logging.lastResort`, while
  torch's own stream handlers are muted; a record from any logger that has no handler lands there too;
- what is written to standard error, below Python (e.g. kineto's `USDT: ... profiler_start` lines,
  c10's `[W... file.cpp:N] Warning: ...`) or through `sys.stderr`: fd 2 goes to a file for the whole
  run (`RUN_DIR/stderr.log`, deleted at the end; if the process dies, what it wrote last is there),
  and so does `sys.stderr` while an experiment runs; the file is read after each experiment.
  Timestamps and process ids are removed so that repeats are counted as one message.

The console (lab.console) writes to a duplicate of the real standard error meanwhile, so only the
lab's own lines reach the user. With `-v` each message is also shown live, as it comes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator, TextIO

from lab import console, untrusted
from lab.contract.results import LibraryLog

MAX_MESSAGE = 4000  # characters kept of one message
MAX_DISTINCT = 200  # distinct messages kept per experiment; the rest are counted in one entry
STDERR_NAME = "stderr.log"

# kineto:  USDT:2026-11-29 13:03:52 9417:9417 SyncActivityProfilerHandler.cpp:52] profiler_start
_KINETO = re.compile(r"^(?P<tag>[A-Z]+):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \d+:\d+ (?P<loc>[^\s\]]+)\] ?(?P<msg>.*)$")
# glog, c10 and torch's log format: [W1129 13:03:52.512063306 1234 file.cpp:42] msg  /  W1129 13:03:52.123 1234 f.py:9] msg
_GLOG = re.compile(r"^(?:\[rank\d+\]:)?\[?(?P<tag>[DIWEFC])\d{4} \d\d:\d\d:\d\d(?:\.\d+)?(?: +\d+)? "
                   r"(?P<loc>[^\s\]]+)\] ?(?P<msg>.*)$")


def short_path(path: str) -> str:
    """A source path from its package on (torch/_inductor/x.py), not the machine's folders."""
    norm = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in norm:
            return norm.split(marker, 1)[1]
    parts = norm.split("/")
    return "/".join(parts[-3:])


class Collected:
    """One experiment's library output, deduplicated in order of first appearance."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self._entries: dict[tuple[str, str, str, str, str], LibraryLog] = {}
        self._dropped: dict[str, LibraryLog] = {}
        self._lock = threading.Lock()
        self.offset = 0  # where this experiment's stderr starts in the run's file
        self.tail: _Tail | None = None
        self.stack = contextlib.ExitStack()

    def add(self, source: str, origin: str, level: str, message: str, location: str = "") -> None:
        message = message.rstrip()
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + f" ... ({len(message) - MAX_MESSAGE} more characters)"
        key = (source, origin, level, location, message)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.count += 1
                return
            if len(self._entries) >= MAX_DISTINCT:
                extra = self._dropped.setdefault(source, LibraryLog(
                    source=source, origin="lab", level="", count=0,  # type: ignore[arg-type]
                    message=f"more distinct {source} messages than the {MAX_DISTINCT} kept (count: how many)"))
                extra.count += 1
                return
            self._entries[key] = LibraryLog(source=source, origin=origin, level=level, message=message,  # type: ignore[arg-type]
                                            location=location)
        if self.echo and source != "stderr":  # stderr lines are echoed by the tail, as they are written
            console.library_line(source, origin, message)

    def entries(self) -> list[LibraryLog]:
        with self._lock:
            return list(self._entries.values()) + list(self._dropped.values())


# ---------------------------------------------------------------------------- stderr text

def parse_stderr(text: str) -> list[tuple[str, str, str]]:
    """Lines written to fd 2 as (level, location, message): a known prefix (kineto, glog/c10, torch's log
    format) gives the level tag and the source location and is removed with its timestamp and ids;
    indented lines continue the message above; blank lines are dropped."""
    out: list[list[str]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        m = _KINETO.match(raw) or _GLOG.match(raw)
        if m:
            out.append([m.group("tag"), m.group("loc"), m.group("msg")])
        elif out and raw[:1] in (" ", "\t"):
            out[-1][2] += "\n" + raw
        else:
            out.append(["", "", raw])
    return [(a, b, c) for a, b, c in out]


class _Tail(threading.Thread):
    """-v: shows lines appended to the stderr file while the experiment runs."""

    def __init__(self, path: Path, offset: int) -> None:
        super().__init__(name="lab-stderr-tail", daemon=True)
        self.path, self.offset = path, offset
        self.stop = threading.Event()

    def run(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            pending = b""
            while True:
                stopping = self.stop.wait(0.2)
                pending += f.read()
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    if raw.strip():
                        console.library_line("stderr", "fd 2", raw.decode("utf-8", "replace"))
                if stopping:
                    return


# ---------------------------------------------------------------------------- logging

class _Mute(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


_MUTE = _Mute()


def _torch_stream_handlers() -> list[logging.Handler]:
    """Torch's own handlers that print to a stream (not a user's handler, not a TORCH_LOGS_OUT file)."""
    try:
        from torch._logging import _internal

        tracked = list(_internal.handlers)
    except (ImportError, AttributeError):  # another torch: torch's handlers are plain StreamHandlers
        tracked = [h for name in _torch_logger_names() for h in logging.getLogger(name).handlers]
    return [h for h in tracked if type(h) is logging.StreamHandler]


def _mute_torch_stream_handlers() -> None:
    for handler in _torch_stream_handlers():
        if _MUTE not in handler.filters:
            handler.addFilter(_MUTE)


def _torch_logger_names() -> list[str]:
    """torch's loggers that stop propagation: a record of any torch logger reaches one of them first."""
    names = [n for n, lg in list(logging.root.manager.loggerDict.items())
             if (n == "torch" or n.startswith("torch.")) and isinstance(lg, logging.Logger) and not lg.propagate
             and not n.endswith(".__trace")]  # torch's structured trace log: attaching a handler would switch it on
    return names


class _Records(logging.Handler):
    """Records what torch's loggers say (each record once, however many of its loggers it passes); at WARNING, it is
    where a record of a logger without handlers goes (Python's lastResort prints it): recorded instead."""

    def __init__(self, collected: Collected, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.collected = collected

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "_lab_recorded", False):
            return
        record._lab_recorded = True
        _mute_torch_stream_handlers()  # torch may have made new ones since (torch._logging.set_logs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string in a library's call: keep what there is
            message = f"{record.msg} {record.args}"
        if record.exc_info:
            message += "\n" + logging.Formatter().formatException(record.exc_info)
        self.collected.add("logging", record.name, record.levelname, message,
                           f"{short_path(record.pathname)}:{record.lineno}")


@contextlib.contextmanager
def _logging_caught(collected: Collected) -> Iterator[None]:
    handler = _Records(collected)
    last_resort = logging.lastResort
    loggers = [logging.getLogger(n) for n in _torch_logger_names()]
    for lg in loggers:
        lg.addHandler(handler)
    _mute_torch_stream_handlers()
    logging.lastResort = _Records(collected, logging.WARNING)
    try:
        yield
    finally:
        logging.lastResort = last_resort
        for lg in loggers:
            lg.removeHandler(handler)
        for h in _torch_stream_handlers():
            h.removeFilter(_MUTE)


# ---------------------------------------------------------------------------- warnings

@contextlib.contextmanager
def _warnings_caught(collected: Collected) -> Iterator[None]:
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        collected.add("warning", category.__name__, "WARNING", str(message), f"{short_path(filename)}:{lineno}")

    with warnings.catch_warnings():  # the filters stay the user's; their state is restored after
        warnings.showwarning = show
        yield


def _retarget_handlers(old: TextIO | None, new: TextIO) -> None:
    """Stream handlers made while sys.stderr was the run's file (torch makes new ones on set_logs) write to
    `new` from now on, not to a closed file."""
    if old is None:
        return
    loggers = [logging.getLogger()] + [lg for lg in list(logging.root.manager.loggerDict.values())
                                       if isinstance(lg, logging.Logger)]
    for lg in loggers:
        for handler in list(lg.handlers):
            if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                handler.setStream(new)


# ---------------------------------------------------------------------------- the run

class Capture:
    """Library output of a run, experiment by experiment: `with Capture(run_dir) as cap: with cap.experiment() ...`."""

    def __init__(self, run_dir: Path, echo: bool = False) -> None:
        self.path = run_dir / STDERR_NAME
        self.echo = echo
        self._saved: int | None = None
        self._real: TextIO | None = None
        self._file: Any = None
        self._text: TextIO | None = None  # sys.stderr while an experiment runs: the same file

    def __enter__(self) -> Capture:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> Capture:
        """Send fd 2 to RUN_DIR/stderr.log and the console to the real standard error."""
        try:
            sys.stderr.flush()
            with contextlib.suppress(FileNotFoundError):  # a killed run's (its content is in its records), or a link
                self.path.unlink()
            fd = untrusted.create_new(self.path, flags=os.O_APPEND)  # never written through a link (lab.untrusted)
            self._file = open(fd, "ab", buffering=0)
            saved = os.dup(2)
            self._real = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
            os.dup2(self._file.fileno(), 2)
            self._saved = saved
            self._text = open(os.dup(fd), "a", buffering=1, encoding="utf-8", errors="backslashreplace")
            console.use_stream(self._real)
        except (OSError, ValueError, AttributeError):  # no usable fd 2 (an embedded interpreter...): Python-level only
            self._close_file(delete=True)
        return self

    def close(self) -> None:
        """Give fd 2 back and delete the file (its content is in the records)."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        if self._saved is not None:
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._saved = None
        console.use_stream(None)
        _retarget_handlers(self._text, sys.stderr)
        for stream in (self._real, self._text):
            if stream is not None:
                stream.close()
        self._real = self._text = None
        self._close_file(delete=True)

    def _close_file(self, delete: bool) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            if delete:
                with contextlib.suppress(OSError):
                    self.path.unlink()

    def begin(self) -> Collected:
        """Start catching what libraries say (an experiment starts); `end` stops and returns it."""
        collected = Collected(echo=self.echo)
        collected.offset = self._size()
        collected.tail = _Tail(self.path, collected.offset) if self.echo and self._file is not None else None
        if collected.tail:
            collected.tail.start()
        collected.stack = contextlib.ExitStack()
        if self._text is not None:  # sys.stderr may not be fd 2 (pytest, IDEs): Python-level writes go there too
            collected.stack.enter_context(contextlib.redirect_stderr(self._text))
        collected.stack.enter_context(_warnings_caught(collected))
        collected.stack.enter_context(_logging_caught(collected))
        return collected

    def end(self, collected: Collected) -> list[LibraryLog]:
        """Stop catching; what was caught, deduplicated, with the stderr lines written since `begin`."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        collected.stack.close()
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        if collected.tail:
            collected.tail.stop.set()
            collected.tail.join(timeout=5)
        if self._file is not None:
            with open(self.path, "rb") as f:
                f.seek(collected.offset)
                text = f.read().decode("utf-8", "replace")
            for level, location, message in parse_stderr(text):
                collected.add("stderr", "stderr", level, message, location)
        return collected.entries()

    @contextlib.contextmanager
    def experiment(self) -> Iterator[Collected]:
        """`begin` ... `end` around the body; the yielded Collected holds what was caught afterwards."""
        collected = self.begin()
        try:
            yield collected
        finally:
            self.end(collected)

    def _size(self) -> int:
        try:
            return self.path.stat().st_size if self._file is not None else 0
        except OSError:
            return 0

