"""Run one function in a fresh Python process and record how it ended.

Used where the parent's state must not leak in (cold and warm compiles) and where the work can kill
its process (a device-side assert leaves the CUDA context unusable). The child calls
`module:function(**kwargs)` and writes its JSON-able return value to a file; the parent gets the
value, or the exit status, the signal and the tail of stderr when the child died.

    python -m lab.childproc MODULE:FUNCTION KWARGS_JSON RESULT_PATH
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.manifest import REPO_ROOT

TAIL_CHARS = 4000


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
              env: dict[str, str] | None = None, drop_env: tuple[str, ...] = ()) -> ChildResult:
    """Call `target` ("module:function") with `kwargs` in a fresh interpreter."""
    with tempfile.TemporaryDirectory(prefix="lab-child-") as tmp:
        result_path = Path(tmp) / "result.json"
        child_env = dict(os.environ)
        for key in drop_env:
            child_env.pop(key, None)
        if env:
            child_env.update(env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), child_env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "lab.childproc", target, json.dumps(kwargs or {}), str(result_path)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=child_env,
                                  cwd=str(REPO_ROOT))
        except subprocess.TimeoutExpired as exc:
            return ChildResult(target, None, None, True, time.perf_counter() - start, None,
                               _tail(exc.stdout), _tail(exc.stderr))
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
        return ChildResult(target, proc.returncode, sig, False, duration, value, _tail(proc.stdout), _tail(proc.stderr))


def _tail(text: str | bytes | None) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text[-TAIL_CHARS:]


def _main(argv: list[str]) -> int:
    target, kwargs_json, result_path = argv
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    value = func(**json.loads(kwargs_json))
    Path(result_path).write_text(json.dumps(value))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
