"""A fresh child process that stays alive and takes turns with its parent: one request, one answer, over a pipe.

`run_child` (lab.run.childproc) calls a function once and returns its value; a paired measurement needs
more: the child gets ready once (imports, builds, warms up), then the parent and the child alternate
rounds under the same host conditions, each round started by the parent. The child is started by the
same `python -m lab.run.childproc MODULE:FUNCTION KWARGS RESULT` with a pipe each way passed as two
extra file descriptors (named in LAB_CHILD_TURNS); its function calls `channel()` to read a request
and answer it, one JSON line each. Its stdout and stderr go to files (a chatty child cannot fill a
pipe and stall), its process group is killed when the parent is done, on a timeout or on an error, as
run_child's is. The protocol is one line per request and one answer per request (and the child's
first line, its "ready"). The time limit is per answer (the ready line, each request's, the end): a child may
stay alive, idle, for a whole run between two requests (lab.experiments.sentinel keeps two from the run's start
to its end). POSIX only (`supported`): Windows cannot pass the two descriptors.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from lab.locks import owned_tempdir
from lab.run.childproc import ChildResult, ended, kill_group, start_child

TURNS_ENV = "LAB_CHILD_TURNS"  # "READ_FD,WRITE_FD" of the child's ends of the two pipes


def supported() -> bool:
    """Whether this platform can pass the pipes to the child (POSIX: subprocess's pass_fds; not on Windows)."""
    return os.name == "posix"


class ChildGone(RuntimeError):
    """The child ended, or did not answer within the time left, before a turn was done."""


@dataclass
class Channel:
    """The child's end: requests in, answers out."""

    reader: Any
    writer: Any

    def request(self) -> dict[str, Any] | None:
        """The parent's next request; None when the parent is done (it closed its end or said stop)."""
        line = self.reader.readline()
        if not line:
            return None
        message: dict[str, Any] = json.loads(line)
        return None if message.get("stop") else message

    def answer(self, value: dict[str, Any]) -> None:
        self.writer.write(json.dumps(value) + "\n")
        self.writer.flush()


def channel() -> Channel | None:
    """In a child started by `Turns`: its channel to the parent (None in a child started otherwise)."""
    fds = os.environ.get(TURNS_ENV)
    if not fds:
        return None
    r, w = (int(x) for x in fds.split(","))
    return Channel(os.fdopen(r, "r"), os.fdopen(w, "w"))


class Turns:
    """The parent's end: start the child, `ask` it for a turn, `finish` for its return value and how it ended; each
    answer within `timeout_s` of its request (the first, of the start).

    Use as a context manager: the child's group is killed on the way out whatever happened."""

    def __init__(self, target: str, kwargs: dict[str, Any], timeout_s: float) -> None:
        self.target, self.kwargs, self.timeout_s = target, kwargs, timeout_s

    def __enter__(self) -> Turns:
        self._tmp_cm = owned_tempdir("child")
        self._tmp = tmp = self._tmp_cm.__enter__()
        self._out, self._err = (tmp / "stdout").open("w+"), (tmp / "stderr").open("w+")
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()
        self._start = self._asked = time.perf_counter()
        self.proc = start_child(self.target, self.kwargs, tmp, self._out, self._err,
                                env={TURNS_ENV: f"{to_child_r},{from_child_w}"}, pass_fds=(to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self._writer = os.fdopen(self._to_child_w, "w")
        self._reader = os.fdopen(self._from_child_r, "r")
        return self

    def _left(self) -> float:
        return self.timeout_s - (time.perf_counter() - self._asked)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its answer (ChildGone: the child ended or the time limit passed)."""
        self._asked = time.perf_counter()
        try:
            self._writer.write(json.dumps(request) + "\n")
            self._writer.flush()
        except BrokenPipeError as exc:
            raise ChildGone(f"the child ended before the request {request}") from exc
        return self.wait()

    def wait(self) -> dict[str, Any]:
        """The child's next message (its first: the one it sends when it is ready)."""
        ready, _, _ = select.select([self._reader], [], [], max(0.0, self._left()))
        if not ready:
            raise ChildGone(f"no answer from the child within its {self.timeout_s:.0f} s")
        line = self._reader.readline()
        if not line:
            raise ChildGone("the child ended without answering")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def finish(self) -> ChildResult:
        """Tell the child to stop, wait for it (within its time limit) and return how it ended, with its value."""
        self._asked = time.perf_counter()
        try:
            self._writer.write(json.dumps({"stop": True}) + "\n")
            self._writer.close()
        except (BrokenPipeError, OSError):
            pass
        timed_out = False
        try:
            self.proc.wait(timeout=max(1.0, self._left()))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(self.proc)
            self.proc.wait()
        # a turn's child says its exit status, not the name of the signal that ended it
        return dataclasses.replace(ended(self.target, self.proc, self._start, self._tmp, timed_out), signal=None)

    def __exit__(self, *exc: object) -> None:
        kill_group(self.proc)
        if self.proc.poll() is None:
            self.proc.wait()
        for f in (self._reader, self._out, self._err):
            f.close()
        if not self._writer.closed:
            try:
                self._writer.close()
            except OSError:
                pass
        self._tmp_cm.__exit__(None, None, None)

