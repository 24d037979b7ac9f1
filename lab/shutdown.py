"""How the lab's process ends: within a grace period of the command's last line, always, saying what held it.

Why not a plain `SystemExit`. On an H200 a whole gpu run printed its last line and then stayed alive for minutes:
53 threads, every one waiting on a futex (16+ worker threads, CUDA's event handler, jemalloc's background
thread), no child process, and no Python stack under SIGABRT: the interpreter had finalized, so the hang was in
native teardown (the libraries' exit handlers and static destructors), where no Python thread runs any more, so a
daemon timer set to fire after the grace never fired. Runs of a few experiments exited, whole runs did not.

So the lab does not enter native teardown. `leave` does, from the main thread, what Python's own exit does that
matters here, while the interpreter is still alive and a watchdog can still fire: it flushes the console, lets
the non-daemon threads finish and runs the exit handlers (`threading`'s and `atexit`'s, which shut down
compile worker pools and logging), ends the child processes still running (SIGTERM, then SIGKILL: a compile
worker or a user's workload that outlived the command), says in one line what held it when something did, and
ends the process with `os._exit`. Everything the command measured is on disk before `leave` is called (the
results file is written atomically as each experiment ends). If any step of that hangs, the watchdog, a daemon
thread that runs as long as the interpreter does, names what is still running and leaves at the grace.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

GRACE_S = 30.0  # the most the process may take to end once the command has finished
TERM_WAIT_S = 3.0  # how long a child has between SIGTERM and SIGKILL


@dataclass(frozen=True)
class Child:
    """A child process of this one, as /proc shows it."""

    pid: int
    command: str

    def describe(self) -> str:
        return f"child process {self.pid} ({self.command})"


@dataclass(frozen=True)
class Process:
    """One entry of /proc: its parent, its state letter, and the name in its stat line."""

    ppid: int
    state: str
    name: str


def processes(proc: Path = Path("/proc")) -> dict[int, Process]:
    """Every process /proc shows (Linux; {} where there is none), by pid."""
    found: dict[int, Process] = {}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # fields after the name's closing parenthesis: state, ppid, ... (the name may hold spaces and parentheses)
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            found[int(entry.name)] = Process(int(ppid), state, stat[stat.index("(") + 1:stat.rindex(")")])
        except (OSError, ValueError, IndexError):
            continue
    return found


def children(pid: int | None = None, proc: Path = Path("/proc")) -> list[Child]:
    """The live direct children of `pid` (this process by default), from /proc (empty where there is none)."""
    pid = os.getpid() if pid is None else pid
    found: list[Child] = []
    for child, p in sorted(processes(proc).items()):
        if p.ppid != pid or p.state == "Z":
            continue
        try:
            raw = (proc / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:
            continue
        found.append(Child(child, raw.decode(errors="replace")[:120] or p.name))
    return found


def live_threads() -> list[str]:
    """The names of the threads other than the main one that would keep Python from exiting (non-daemon, alive)."""
    main = threading.main_thread()
    return [t.name for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def end_children(wait_s: float = TERM_WAIT_S) -> list[Child]:
    """SIGTERM every live child, SIGKILL those still there after `wait_s`, reap them; the ones that were there."""
    left = children()
    for c in left:
        _signal(c.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(c.pid in {d.pid for d in children()} for c in left):
        _reap()
        time.sleep(0.05)
    for c in children():
        _signal(c.pid, signal.SIGKILL)
    _reap()
    return left


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):  # gone already, or not ours to signal
        os.kill(pid, sig)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def held(threads: list[str], ended: list[Child]) -> str | None:
    """The one line naming what held the process at its end, or None when nothing did."""
    what = [f"thread {name!r} (left running)" for name in threads] + [f"{c.describe()}, ended" for c in ended]
    return f"note: still running when the command had finished: {'; '.join(what)}" if what else None


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: nothing more can be said on it
            stream.flush()


def _run_exit_handlers() -> None:
    """Python's own exit sequence short of native teardown: the threading module's exit hooks and the join of
    non-daemon threads (concurrent.futures' pools are shut down there), then the atexit handlers."""
    shutdown = getattr(threading, "_shutdown", None)
    if callable(shutdown):
        shutdown()
    else:  # pragma: no cover - every CPython the lab supports has it
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
    atexit._run_exitfuncs()


def leave(code: int, grace_s: float = GRACE_S, exit_handlers: bool = True) -> None:
    """End the process with `code` within `grace_s` seconds (module docstring); never returns. `exit_handlers`
    False: a process whose work is on disk and whose descendants are reaped (a lab.run.childproc child) skips the
    threads' joins and the atexit handlers too: they would only tear down what it no longer uses (on an H200 a
    compile_cost child whose warm cache left Inductor's compile workers unused spent 7.7 s there, starting and
    then stopping them)."""
    _flush()

    def watchdog() -> None:
        threads = live_threads()
        ended = end_children(wait_s=0.5)
        line = held(threads, ended) or "note: at exit an exit handler of a library did not return"
        print(f"{line} ({grace_s:.0f} s after the command finished); leaving now", file=sys.stderr)
        _flush()
        os._exit(code)

    if exit_handlers:
        timer = threading.Timer(grace_s, watchdog)
        timer.daemon = True
        timer.name = "lab-exit-watchdog"
        timer.start()
        _run_exit_handlers()  # a thread that never ends stops here: the watchdog names it
    line = held([], end_children())
    if line:
        print(line, file=sys.stderr)
    _flush()
    os._exit(code)
