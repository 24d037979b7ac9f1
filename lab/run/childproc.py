"""Run one function in a fresh Python process and record how it ended.

Used where the parent's state must not leak in (cold and warm compiles) and where the work can kill
its process (a device-side assert leaves the CUDA context unusable). The child calls
`module:function(**kwargs)` and writes its JSON-able return value to a file; the parent gets the
value, or the exit status, the signal and the tail of stderr when the child died. Its target is of its caller's
wing or one below, named by a literal or a module constant (tests/test_layers.py checks every call of the lab).

A child never outlives the run that started it. It leads its own process group (with whatever it
starts: Inductor's compile workers, the compiler), which the parent kills on a timeout, on Ctrl-C
or SIGTERM, and when the child is done (on a timeout or an interruption, every descendant of the child too,
found in /proc whatever session it moved to: `kill_group`); and on Linux the kernel kills the child when its parent dies
(PR_SET_PDEATHSIG: even a SIGKILLed parent takes its child along; Inductor's workers watch their
own parent). When the function has returned, the child kills what it started and left behind, even a
process in a session of its own (Linux: the child is their subreaper, so such orphans become its children),
before the parent kills the group. The child's output goes to files in its temporary directory, never a pipe:
a process left holding the pipe cannot make the parent wait out the timeout, output of any size costs no
memory (only its tail is read, as bytes: output that is not UTF-8 is shown, not fatal). Its temporary directory
is owned (lab.locks): one left by a killed run is removed when the next run starts.

    python -m lab.run.childproc MODULE:FUNCTION KWARGS_JSON RESULT_PATH
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.locks import owned_tempdir
from lab.shutdown import leave, processes
from lab.run.manifest import REPO_ROOT

TAIL_CHARS = 4000
PARENT_ENV = "LAB_CHILD_PARENT"  # the parent's pid, for the child's parent-death setup
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


@dataclass
class ChildResult:
    target: str
    exit_code: int | None  # None when killed by the timeout
    signal: str | None  # name of the signal that killed it, if any
    timed_out: bool
    duration_s: float
    value: Any  # the function's return value, None if the child did not finish
    stdout_tail: str
    stderr_tail: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self) -> str:
        """One line saying how the child ended."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s"
        if self.signal:
            return f"killed by {self.signal} (exit status {self.exit_code})"
        if self.exit_code != 0:
            last = last_error_line(self.stderr_tail)
            return f"exit status {self.exit_code}" + (f": {last}" if last else "")
        return "exit status 0"

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "exit_code": self.exit_code, "signal": self.signal,
                "timed_out": self.timed_out, "duration_s": round(self.duration_s, 3),
                "how_it_ended": self.describe(), "stderr_tail": self.stderr_tail[-1500:]}


def last_error_line(text: str) -> str:
    """The most telling line of a traceback or an error dump."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "Assertion" in ln or "assert" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else ""


def run_child(target: str, kwargs: dict[str, Any] | None = None, timeout_s: float = 600,
              env: dict[str, str] | None = None, drop_env: tuple[str, ...] = (),
              cwd: Path | str | None = None) -> ChildResult:
    """Call `target` ("module:function") with `kwargs` in a fresh interpreter (see the module's docstring), in
    `cwd` (default: the lab's root; the child imports from there first)."""
    with owned_tempdir("child") as tmp:
        out_path, err_path = tmp / "stdout", tmp / "stderr"
        start = time.perf_counter()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = start_child(target, kwargs, tmp, out, err, env=env, drop_env=drop_env, cwd=cwd)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            return ended(target, proc, start, tmp, timed_out=True)
        except BaseException:  # Ctrl-C, SIGTERM (lab.run.runstate.Stopped): the child goes with us
            kill_group(proc)
            proc.wait()
            raise
        finally:
            kill_group(proc)  # whatever the child left running in its group
        return ended(target, proc, start, tmp)


def start_child(target: str, kwargs: dict[str, Any] | None, tmp: Path, stdout: Any, stderr: Any,
                env: dict[str, str] | None = None, drop_env: tuple[str, ...] = (), cwd: Path | str | None = None,
                pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[Any]:
    """Start `python -m lab.run.childproc TARGET KWARGS TMP/result.json` leading its own session, the lab's root
    first on its PYTHONPATH and the parent's pid in PARENT_ENV (`run_child`'s, and lab.run.turns.Turns's)."""
    child_env = dict(os.environ)
    for key in drop_env:
        child_env.pop(key, None)
    child_env.update(env or {})
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), child_env.get("PYTHONPATH", "")) if p)
    child_env[PARENT_ENV] = str(os.getpid())
    cmd = [sys.executable, "-m", "lab.run.childproc", target, json.dumps(kwargs or {}), str(tmp / "result.json")]
    return subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=child_env, cwd=str(cwd or REPO_ROOT),
                            pass_fds=pass_fds, start_new_session=os.name == "posix")


def ended(target: str, proc: subprocess.Popen[Any], start: float, tmp: Path, timed_out: bool = False) -> ChildResult:
    """How a child started by `start_child` in `tmp` ended: its exit status (None: `timed_out`) and the signal that
    killed it, its value (TMP/result.json, where it exited 0), the tails of its output."""
    result = tmp / "result.json"
    value = json.loads(result.read_text()) if proc.returncode == 0 and not timed_out and result.exists() else None
    sig = None
    if proc.returncode < 0 and not timed_out:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
    return ChildResult(target, None if timed_out else proc.returncode, sig, timed_out, time.perf_counter() - start,
                       value, _tail(tmp / "stdout"), _tail(tmp / "stderr"))


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child and everything it started: first, while the stopped child still holds them (it is their
    subreaper), every descendant found in /proc, whatever session or group it moved to; then the child's process
    group. Nothing if they are gone."""
    if os.name != "posix":  # pragma: no cover - Windows: the child only
        if proc.poll() is None:
            proc.kill()
        return
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGSTOP)  # it forks no more while its descendants are found and killed
        for _ in range(10):
            found = descendants(proc.pid)
            if not found:
                break
            for pid in found:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """The live descendants of process `root` (children, their children...), from /proc."""
    parents = {pid: p.ppid for pid, p in processes().items()}
    found: list[int] = []
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier and pid not in found}
        found += sorted(frontier)
    return found


def die_with_parent() -> None:
    """In the child: ask the kernel for SIGKILL when the parent dies (Linux), and to become the parent of the
    orphans among its descendants (`reap_descendants`); exit if the parent has already died."""
    parent = os.environ.get(PARENT_ENV)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if parent and parent.isdigit() and os.getppid() != int(parent):
        os._exit(70)  # the parent died before the request above took effect


def reap_descendants() -> None:
    """In the child, once its function has returned: SIGKILL and reap every process it left behind. Killing a
    child makes its own children orphans, which the kernel gives to this process (its subreaper), so the next
    round finds them, whatever session or group they moved to."""
    if not sys.platform.startswith("linux"):
        return
    for _ in range(100):
        me = os.getpid()
        children = [pid for pid, p in processes().items() if p.ppid == me]
        if not children:
            return
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _tail(path: Path) -> str:
    """The last TAIL_CHARS characters of a file of output, whatever its size and its bytes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4 * TAIL_CHARS))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")[-TAIL_CHARS:]


def _main(argv: list[str]) -> int:
    die_with_parent()
    target, kwargs_json, result_path = argv
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    code = 0
    try:
        value = func(**json.loads(kwargs_json))
        Path(result_path).write_text(json.dumps(value))
    except Exception:  # the traceback on stderr and exit status 1, as Python's own exit gives them
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        reap_descendants()
    return code


if __name__ == "__main__":
    # The result (or the traceback) is written and the descendants reaped: end without exit handlers or native
    # teardown (lab/shutdown.py), which after a device-side assert spends seconds on a broken CUDA context.
    leave(_main(sys.argv[1:]), exit_handlers=False)
