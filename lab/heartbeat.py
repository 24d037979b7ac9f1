"""The console's heartbeat: when the console may speak, the timed sections it keeps out of, and its one thread.

The console (lab.console) promises a line at least every LAB_PROGRESS_EVERY_S seconds (`interval_s`, 10 by
default; the heartbeat's own interval, `promise_s`, is at least a second) while anything is under way. The
heartbeat runs in the measuring process, so it is part of the measurement unless kept out of it. One rule
decides every write it makes (`due`), from its thread or at the edge of a timed section:
- outside a timed section it speaks once the console has been silent for the interval; on a terminal it
  redraws the live display every LIVE_REDRAW_S instead (rich's own refresh thread is not used);
- at a gap, the edge of a timed section where no samples are being taken (entering or leaving one while no
  sampling section is under way: between two timings, or between two stretches of one timing's samples),
  run on the measuring thread itself, so nothing it writes overlaps a sample, it speaks already after
  GAP_SHARE of the interval: a section shorter than the rest of the interval never needs a write inside it;
- inside a timed section it writes only when the silence reaches the interval (waiting longer would break
  the promise). Every write inside one while samples are taken (`enter(sampling=True)`: time_calls' marked
  loop, not its warm-up nor the rest of a method's turn), the heartbeat's or anyone's (`shown`), is counted
  against the outermost section under way (`take_disturbed`); the runner puts the count in the experiment's
  record with a failed non-fatal check naming the timings it fell in (lab.run.runner), so no disturbed number is silent.

A sampling loop longer than the interval would still meet the promise inside it (a slow host stretches a loop of
short calls as well as a long call), so time_calls takes its samples in stretches of about STRETCH_SHARE of the
interval by the pace of the calls so far (`stretch_s`), each a sampling section of its own; the gap between two
stretches is where the heartbeat speaks. A stretch may run four times longer than its pace said (a host that slows
that much between two stretches) and still end before the silence reaches the interval; a single call longer
than GAP_SHARE of the interval cannot be cut, and a write inside it is counted as before.

A timed section is `lab.measure.timing.time_calls` or one method's turn in `rotating_rounds` (entered through
lab.console.timed). Every write, redraw and section edge takes LOCK, so a write of the thread that is under
way when a timing starts finishes before the timing's first mark.

What the thread costs where it cannot be kept out: off a terminal it wakes once or twice an interval (10 s),
on a terminal twice a second; a wake reads the clock under LOCK and, inside a timing, draws nothing.
Measured on a shared, loaded 2-core CPU host (2026-12-01, torch 2.13), with a thread doing
that every millisecond beside a loop of tiny torch ops (5 us each), 40 interleaved pairs of 20000 calls,
twice: the wake itself took 6-8 us of CPU; the loop's median call moved by 20-55 ns (0.4-1%) at 550-770
wakes a second; the loop's total time per wake was 107 and 185 us by the median, with IQRs that span zero
(-147 to 559 us), i.e. within the host's noise. Taking 185 us per wake as the bound, the heartbeat's share
of a timing is at most about 0.04% on a terminal and 0.004% off it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

MIN_INTERVAL_S = 1.0  # the heartbeat's shortest interval (LAB_PROGRESS_EVERY_S=0 says every step, not every beat)
GAP_SHARE = 0.5  # at a timed section's edge the heartbeat speaks after this share of the interval
STRETCH_SHARE = GAP_SHARE / 4  # time_calls' samples come in stretches of about this share of the interval
LIVE_REDRAW_S = 0.5  # the live display's redraw outside timings (rich drew it at refresh_per_second=2)
LOCK = threading.RLock()  # the console's one lock: every write, redraw and timed section's edge


def interval_s() -> float:
    """The console's promise: a line at least this often (LAB_PROGRESS_EVERY_S; 0: every step)."""
    try:
        return max(0.0, float(os.environ.get("LAB_PROGRESS_EVERY_S", "10")))
    except ValueError:
        return 10.0


def promise_s() -> float:
    """The heartbeat's interval: the promise, at least MIN_INTERVAL_S."""
    return max(MIN_INTERVAL_S, interval_s())


def stretch_s() -> float:
    """How long one stretch of a timing's samples should last (time_calls): STRETCH_SHARE of the interval."""
    return promise_s() * STRETCH_SHARE


_clock: Callable[[], float] = time.monotonic


def use_clock(clock: Callable[[], float] | None) -> None:
    """Time progress and the heartbeat by `clock` (seconds, monotonic) from now on (None: time.monotonic)."""
    global _clock
    _clock = clock or time.monotonic


def now() -> float:
    return _clock()


@dataclass
class _Silence:
    last_shown: float = field(default_factory=now)  # when the console last wrote a line or redrew its display
    sections: list[tuple[str, bool]] = field(default_factory=list)  # (label, samples taken) under way, outermost first
    disturbed: Counter[str] = field(default_factory=Counter)  # writes inside them, by the outermost's label


STATE = _Silence()


def reset() -> None:
    """A new run: silent from now, nothing counted (sections under way stay)."""
    with LOCK:
        STATE.last_shown = now()
        STATE.disturbed.clear()


def shown() -> None:
    """The console wrote or redrew now: the silence starts again, and inside a timed section the write counts."""
    with LOCK:
        STATE.last_shown = now()
        if sampling():
            STATE.disturbed[STATE.sections[0][0]] += 1


def quiet() -> float:
    """Seconds since the console last showed anything."""
    return now() - STATE.last_shown


def sampling() -> bool:
    """Whether samples are being taken: a sampling section is under way (a write now would be counted)."""
    return any(taking for _, taking in STATE.sections)


def enter(label: str, sampling: bool = True) -> None:
    """A timed section begins; `sampling`: samples are taken inside it (a write counts only inside such a one)."""
    with LOCK:
        STATE.sections.append((label, sampling))


def leave() -> None:
    with LOCK:
        STATE.sections.pop()


def take_disturbed() -> dict[str, int]:
    """The writes inside timed sections since the last take, by section (outermost label), and forget them."""
    with LOCK:
        taken = dict(STATE.disturbed)
        STATE.disturbed.clear()
    return taken


def due(live: bool, edge: bool = False) -> bool:
    """The rule: whether the heartbeat speaks now. `live`: what it would do is redraw a terminal's display;
    `edge`: it is at a gap, the edge of a timed section (an edge while samples are taken is no gap)."""
    if sampling() or (STATE.sections and not edge):
        limit = promise_s()
    elif live:
        limit = LIVE_REDRAW_S
    else:
        limit = promise_s() * (GAP_SHARE if edge else 1.0)
    return quiet() >= limit


_thread: threading.Thread | None = None


def start(beat: Callable[[], None], busy: Callable[[], bool], live: Callable[[], bool]) -> None:
    """Start the heartbeat's thread unless it runs: it calls `beat` when the rule may let it speak, and ends once
    `busy()` is false. `live()`: whether a terminal's display is drawn (then it wakes to redraw it)."""
    global _thread
    with LOCK:
        if _thread is None:
            _thread = threading.Thread(target=_run, args=(beat, busy, live), name="lab-progress", daemon=True)
            _thread.start()


def _sleep_s(live: bool) -> float:
    """Until the rule may next let the thread speak (at least 50 ms): a redraw's period on a terminal, else the
    silence reaching the interval."""
    return LIVE_REDRAW_S if live else min(promise_s(), max(0.05, promise_s() - quiet()))


def _run(beat: Callable[[], None], busy: Callable[[], bool], live: Callable[[], bool]) -> None:
    global _thread
    while True:
        with LOCK:
            pause = _sleep_s(live())
        time.sleep(pause)
        with LOCK:
            if not busy():
                _thread = None
                return
        beat()
