"""Run one function in a fresh Python process and record how it ended.

Used where the parent's state must not leak in (cold and warm compiles) and where the work can kill
its process (a device-side assert leaves the CUDA context unusable). The child calls
`module:function(**kwargs)` and writes its JSON-able return value to a file; the parent gets the
value, or the exit status, the signal and the tail of stderr when the child died.

A child never outlives the run that started it. It leads its own process group (with whatever it
starts: Inductor's compile workers, the compiler), which the parent kills on a timeout, on Ctrl-C
or SIGTERM, and when the child is done; and on Linux the kernel kills the child when its parent dies
(PR_SET_PDEATHSIG: even a SIGKILLed parent takes its child along; Inductor's workers watch their
own parent). Its temporary directory is owned (lab.locks): one left by a killed run is removed when
the next run starts.

    python -m lab.run.childproc MODULE:FUNCTION KWARGS_JSON RESULT_PATH
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.locks import owned_tempdir
from lab.run.manifest import REPO_ROOT

TAIL_CHARS = 4000
PARENT_ENV = "LAB_CHILD_PARENT"  # the parent's pid, for the child's parent-death setup
PR_SET_PDEATHSIG = 1


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
        result_path = tmp / "result.json"
        child_env = dict(os.environ)
        for key in drop_env:
            child_env.pop(key, None)
        if env:
            child_env.update(env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), child_env.get("PYTHONPATH", "")) if p)
        child_env[PARENT_ENV] = str(os.getpid())
        cmd = [sys.executable, "-m", "lab.run.childproc", target, json.dumps(kwargs or {}), str(result_path)]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env,
                                cwd=str(cwd or REPO_ROOT), start_new_session=os.name == "posix")
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            stdout, stderr = proc.communicate()
            return ChildResult(target, None, None, True, time.perf_counter() - start, None,
                               _tail(stdout), _tail(stderr))
        except BaseException:  # Ctrl-C, SIGTERM (lab.run.runstate.Stopped): the child goes with us
            kill_group(proc)
            proc.wait()
            raise
        finally:
            kill_group(proc)  # whatever the child left running in its group
        duration = time.perf_counter() - start
        value = None
        if proc.returncode == 0 and result_path.exists():
            value = json.loads(result_path.read_text())
        sig = None
        if proc.returncode < 0:
            try:
                sig = signal.Signals(-proc.returncode).name
            except ValueError:
                sig = f"signal {-proc.returncode}"
        return ChildResult(target, proc.returncode, sig, False, duration, value, _tail(stdout), _tail(stderr))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (the child and what it started); nothing if it is gone."""
    if os.name != "posix":  # pragma: no cover - Windows: the child only
        if proc.poll() is None:
            proc.kill()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent() -> None:
    """In the child: ask the kernel for SIGKILL when the parent dies (Linux), and exit if it already has."""
    parent = os.environ.get(PARENT_ENV)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if parent and parent.isdigit() and os.getppid() != int(parent):
        os._exit(70)  # the parent died before the request above took effect


def _tail(text: str | bytes | None) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text[-TAIL_CHARS:]


def _main(argv: list[str]) -> int:
    die_with_parent()
    target, kwargs_json, result_path = argv
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    value = func(**json.loads(kwargs_json))
    Path(result_path).write_text(json.dumps(value))
    return 0


if __name__ == "__main__":
    from lab.shutdown import leave

    leave(_main(sys.argv[1:]))  # the result is written: end without native teardown (lab/shutdown.py)
