"""The host-speed index: a short fixed CPU workload timed just before and just after each method's turn in a round.

The workload, declared once here: a pure-Python loop, `s += i * i` for i below `LOOP` (10 000). Why
this one: a host-bound step (eager, a compiled step's Python and guards, the CPU profile's steps) is
the interpreter and the dispatcher running on one core; what slows it on a shared host (another
tenant on the core or its sibling, a lower clock, a busier cache) slows an interpreter loop the same
way. It touches no tensor, allocates nothing that lasts, moves no memory to speak of and releases no
lock, so it measures the core's speed for Python and nothing the methods do to each other. On an
H200 host the same loop (30x longer) correlated 0.79 with eager's round medians and not at all with
graph replay's. Why 10 000 iterations: long enough that a single interrupt is a small part of a
sample (about 0.5-1.5 ms on this lab's CPU hosts, 0.5-1 ms on the H200 host), short against a turn of
a decode method on the GPU profile (30-400 ms), so there it costs a few percent of the timing at most.
On the smoke profile's tiny model, whose turns last a few ms, it costs 5-15%. `HostIndex.cost` measures
it and the run records it per timing as `host_index_cost`: the cost is stated, never assumed.

`HostIndex` takes the samples: `turn(name, fn)` runs one method's turn between two index samples; the
sample after a turn is the one before the next turn (nothing of the lab runs between them), so a
round of k methods costs k + 1 loops, and the whole timing one more. Where the turns are short against
the loop (the smoke profile's tiny model: turns of a few ms), a sample is taken only once the turns since
the last one have lasted `2 / max_cost` times the loop (40 times at the default 5%), and each of those
turns gets the samples on either side of the group: the cost stays within half of `max_cost` plus the two
samples at the ends of the timing (within `max_cost` for a timing of 80 loops or more), and the index
resolves what the host does over tens of milliseconds, far shorter than the seconds to minutes over which
a shared host's speed was seen to move. Turns of 40 loops or longer (every timing of the gpu and cpu
profiles: 30-400 ms against 0.5-1 ms) each get their own two samples. A turn with `share=False` (a paired
measurement's) always does. The statistics of what the host did are `lab.contract.hostspeed`'s.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

LOOP = 10_000
MAX_COST = 0.05  # the index's time over the turns' it may take (issue 29: at most 5% of the timing)
WORKLOAD = ("pure-Python loop s += i * i for i < 10000 (lab.measure.hostspeed): the interpreter on one core, as a "
            "host-bound step runs, with no tensor, allocation or memory traffic of its own")

T = TypeVar("T")


def workload(n: int = LOOP) -> int:
    """The fixed loop; returns its sum so that nothing can skip it."""
    s = 0
    for i in range(n):
        s += i * i
    return s


@dataclass
class HostIndex:
    """The index samples of one timing: per method, per round, the loop's ms before and after its turn; and the
    seconds spent in the loop and in the turns (the index's cost). `now` and `work` are injectable for tests."""

    now: Callable[[], float] = time.perf_counter
    work: Callable[[], object] = workload
    max_cost: float = MAX_COST
    turns: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    index_s: float = 0.0
    timed_s: float = 0.0
    _last: float | None = None
    _pending: list[tuple[str, float]] = field(default_factory=list)  # turns waiting for their sample after
    _since_s: float = 0.0  # the turns' seconds since the last sample

    def take(self) -> float:
        """One sample: the loop's time in ms; it is the sample after every turn still waiting for one."""
        t0 = self.now()
        self.work()
        t1 = self.now()
        self.index_s += t1 - t0
        ms = self._last = (t1 - t0) * 1e3
        for name, before in self._pending:
            self.turns.setdefault(name, []).append((before, ms))
        self._pending, self._since_s = [], 0.0
        return ms

    def turn(self, name: str, run: Callable[[], T], share: bool = True) -> T:
        """`run()` (one method's turn) between two samples, kept under `name` (module docstring). `share`: the
        sample after the last turn serves as this one's before (False: something else ran since: a fresh sample
        before and one after, whatever the turn's length)."""
        before = self._last if self._last is not None and share else self.take()
        t0 = self.now()
        out = run()
        took = self.now() - t0
        self.timed_s += took
        self._since_s += took
        self._pending.append((name, before))
        if not share or self._since_s * self.max_cost / 2 * 1e3 >= before:  # `before` is the last sample's ms
            self.take()
        return out

    def close(self) -> None:
        """The sample after the last turns, where they still wait for one (the end of a timing)."""
        if self._pending:
            self.take()

    def add(self, name: str, before: float, after: float) -> None:
        """A turn whose samples were taken elsewhere (a paired child's, lab.experiments.sentinel_end)."""
        self.turns.setdefault(name, []).append((before, after))

    def per_round(self, name: str) -> list[float]:
        """The index of each of `name`'s rounds: the mean of the samples before and after its turn (ms)."""
        self.close()
        return [round((b + a) / 2, 5) for b, a in self.turns.get(name, [])]

    def all_rounds(self) -> list[float]:
        """The index of every method's every round (what the reference host speed is taken from)."""
        return [x for name in self.turns for x in self.per_round(name)]

    def cost(self) -> float | None:
        """The loop's seconds over the turns' seconds (None: nothing was timed)."""
        self.close()
        return self.index_s / self.timed_s if self.timed_s > 0 else None

    def note(self) -> dict[str, Any]:
        """The raw samples and the cost, for a record's `host_index.{shape}` note (lab.contract.notes.HOST_INDEX)."""
        cost = self.cost()  # (it closes the last turns)
        every = [x for pairs in self.turns.values() for pair in pairs for x in pair]
        return {"workload": WORKLOAD, "loop": LOOP, "cost": None if cost is None else round(cost, 5),
                "index_s": round(self.index_s, 4), "timed_s": round(self.timed_s, 4),
                "median_ms": round(statistics.median(every), 5) if every else None,
                "turns": {name: [[round(b, 5), round(a, 5)] for b, a in pairs] for name, pairs in self.turns.items()}}
