"""Whether a run finished, what it was asked to run and never recorded, and each of its starts.

A run whose state is not `complete` (a run still under way or killed: `running`; stopped by Ctrl-C or
SIGTERM: `interrupted`; at its `--stop-after` budget: `stopped`) is *incomplete*: the front page and its own page say so, with the experiments asked
for (`--only`, else the profile's as this lab's catalogue lists them) that have no record. A complete run
recorded everything it was asked for (the runner sees to it). A run started more than
once (`lab run --resume`) lists every start with what it kept and which manifest fields changed since the
first start (`run.starts[].manifest_changes`), so a reader knows which records another commit made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.contract.catalogue import resolve
from lab.contract.profiles import get as get_profile
from lab.contract.results import Results

from report.draw.tables import Cell, Table

COMPLETE = "complete"
WHY = {"running": "still under way, or killed before it could record the rest",
       "interrupted": "stopped by Ctrl-C or SIGTERM; the experiments it had not finished are NOT_RUN interrupted",
       "stopped": "stopped at its --stop-after time budget between experiments; `lab run --resume` runs the ones not "
                  "started"}


@dataclass
class Status:
    """What the report says about a run's completeness."""

    state: str
    incomplete: bool
    why: str = ""
    missing: list[str] = field(default_factory=list)  # asked for, never recorded (in catalogue order)
    asked_known: bool = True  # False: the profile is not one this lab version knows; `missing` is empty
    starts: Table | None = None  # one row per start, when there were several

    @property
    def text(self) -> str:
        """One line for the front page and the run header ('' for a complete run with every record)."""
        if not self.incomplete:
            return ""
        parts = [f"incomplete: the run is {self.state} ({self.why})"]
        if self.missing:
            parts.append(f"{len(self.missing)} experiment{'' if len(self.missing) == 1 else 's'} asked for and not "
                         f"recorded: {', '.join(self.missing)}")
        elif not self.asked_known:
            parts.append("which experiments it was asked for is not known here (profile unknown to this lab)")
        return "; ".join(parts)


def asked_for(results: Results) -> list[str] | None:
    """The experiments the run was asked for: --only, else its profile's; None when the profile is unknown."""
    run = results.run
    try:
        profile = get_profile(run.profile)
    except ValueError:
        return list(run.only) if run.only else None
    default = list(profile.experiments) if profile.experiments else None
    try:
        return [spec.id for spec in resolve(list(run.only) if run.only else default, sweeps=profile.sweeps)]
    except ValueError:  # an id this lab version does not know: keep the names as recorded
        return list(run.only or default or [])


def starts_table(results: Results) -> Table | None:
    """Every start of a run started more than once, with what it kept and what changed since the first."""
    starts = results.run.starts
    if len(starts) < 2:
        return None
    table = Table(columns=["start", "started", "host", "command", "load (1, 5, 15 min)", "usable cores",
                           "kept from earlier starts", "manifest fields changed since the first start"], id="starts",
                  caption=f"This run was started {len(starts)} times (lab run --resume): each start made the "
                          "records it did not keep, under the load shown")
    for n, s in enumerate(starts, 1):
        changed = ", ".join(s.manifest_changes) if n > 1 else "(the first start)"
        load = ", ".join(f"{x:.2f}" for x in s.load_average) if s.load_average else "—"
        table.rows.append([Cell(str(n), cls="num"), Cell(s.started_at), Cell(s.host), Cell(" ".join(s.argv)),
                           Cell(load), Cell(str(s.usable_cores) if s.usable_cores else "—"),
                           Cell(", ".join(s.kept) or "—"),
                           Cell(changed or "none", cls="changed" if n > 1 and s.manifest_changes else "")])
    return table


def status(results: Results) -> Status:
    """A complete run recorded everything it was asked for (the runner guarantees it; the catalogue may have
    grown since, so it is not recomputed); any other state is incomplete, with what has no record."""
    state = results.run.state
    if state == COMPLETE:
        return Status(state=state, incomplete=False, starts=starts_table(results))
    asked = asked_for(results)
    recorded = {rec.id for rec in results.experiments}
    return Status(state=state, incomplete=True, why=WHY.get(state, f"state {state!r}"),
                  missing=[i for i in asked or [] if i not in recorded], asked_known=asked is not None,
                  starts=starts_table(results))
