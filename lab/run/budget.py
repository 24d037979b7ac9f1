"""A start's time budget (`lab run --stop-after SECONDS`): between experiments, stop before one expected to cross it.

A host may cap one command (10 minutes on some GPU hosts) while a profile takes longer (gpu-full); the run
is then made in chunks, each a `--resume` of the same run directory. Before each experiment the runner asks
`Budget.stop_before`: the start stops (state `stopped`, `run.starts[-1].stop`; exit status 75, resume to
continue) when the seconds since the command started plus what the experiment is expected to take exceed
the budget. What it is expected to take:
- its duration in an earlier start of this run directory where it has one (a FAILED record, or one cut off
  by a signal: at least that long), since the same run on the same host repeats it;
- otherwise nothing: the lab declares no per-experiment durations. They vary by an order of magnitude with
  the host, the profile, the options and the state of Inductor's cache (compile_cost: 234 s on a CPU host,
  57 s on an H200; max-autotune's compile of the GPT-2 step 34.5 s on one H200 and 46.4 s on another the same
  day), so a declared figure would be a guess passed off as a measurement. Then the rule is the elapsed time alone: no experiment starts once the budget is spent, and a
  start lasts at most the budget plus its last experiment. Choose the budget as the host's limit minus the
  longest experiment you expect (docs/results.md, "A run in chunks").
A start always runs its first experiment whatever the budget says, so every chunk makes progress (a budget
smaller than a start's setup would otherwise stop every start before anything ran).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from lab.contract.reasons import Code
from lab.contract.names import Status
from lab.contract.results import Record, Stop

EXIT_STOPPED = 75  # sysexits' EX_TEMPFAIL: not done, try again (`lab run --resume` with the same options)


def refused(shown: str) -> ValueError:
    """The one refusal of a budget that is not a positive, finite number of seconds (`shown`: as the user gave it)."""
    return ValueError(f"--stop-after {shown}: give the budget in seconds, a number more than 0 (e.g. --stop-after 480 "
                      "on a host that stops a command after 10 minutes)")


def parse_seconds(text: str) -> float:
    """--stop-after's text in seconds; `refused` (one line) for anything but a positive, finite number."""
    try:
        seconds = float(text)
    except ValueError:
        raise refused(repr(text)) from None
    if not 0 < seconds < float("inf"):
        raise refused(repr(text))
    return seconds


def now() -> float:
    """The budget's clock: monotonic seconds."""
    return time.monotonic()


def earlier_durations(records: list[Record]) -> dict[str, float]:
    """What each experiment a resume runs again took in an earlier start: the duration of its record that is not OK
    (FAILED, or NOT_RUN cut off during it); a record of one never started holds no duration and says nothing."""
    return {r.id: float(r.duration_s) for r in records if r.status != Status.OK and r.duration_s}


@dataclass
class Budget:
    """`seconds` from `started` (a reading of `now`, taken when the command started)."""

    seconds: float
    started: float
    clock: Callable[[], float] = field(default=lambda: now())
    expected: dict[str, float] = field(default_factory=dict)  # from earlier starts (earlier_durations)

    def __post_init__(self) -> None:
        if not 0 < self.seconds < float("inf"):
            raise refused(f"{self.seconds:g}")

    def elapsed(self) -> float:
        return self.clock() - self.started

    def stop_before(self, next_id: str, not_started: list[str], ran: int) -> Stop | None:
        """The Stop for not starting `next_id` (with `not_started`, itself first, left), or None to run it; `ran`:
        experiments this start has run so far (the first always runs)."""
        elapsed, expected = self.elapsed(), self.expected.get(next_id)
        if ran == 0 or elapsed + (expected or 0.0) <= self.seconds:
            return None
        if expected is None:
            why = (f"{elapsed:.0f} s of the {self.seconds:g} s budget are spent (how long {next_id} takes is not "
                   f"known before it first runs)")
        else:
            why = (f"{elapsed:.0f} s of the {self.seconds:g} s budget are spent and {next_id} took {expected:.0f} s "
                   f"in an earlier start")
        message = (f"stopped before {next_id} at --stop-after {self.seconds:g}: {why}; {len(not_started)} "
                   f"experiment(s) not started, `--resume` runs them")
        return Stop(code=Code.STOP_AFTER.value, message=message, budget_s=self.seconds, elapsed_s=round(elapsed, 3),
                    next=next_id, expected_s=expected, not_started=list(not_started))

    def too_long_alone(self, next_id: str) -> str | None:
        """A warning when the experiment a start runs first took longer than the whole budget in an earlier start."""
        expected = self.expected.get(next_id)
        if expected is None or expected <= self.seconds:
            return None
        return (f"{next_id} took {expected:.0f} s in an earlier start, more than --stop-after {self.seconds:g}: it "
                f"runs anyway (a start runs at least one experiment); if the host's limit cuts it off again, split "
                f"it with its options (`--set`, `python -m lab list --options`)")
