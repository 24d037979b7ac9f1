"""What a run says besides its experiments' lines: its start (header, load warning, --force, --resume of a
manifest-only run, temporary files removed), the folders of killed runs cleaned, what a resume keeps, a start
stopped at its --stop-after budget.

lab.console words every line; these are the runner's own occasions.
"""

from __future__ import annotations

from pathlib import Path

from lab import console as out
from lab.contract.profiles import Profile
from lab.contract.results import Stop
from lab.run import rundir


def start(profile: Profile, n: int, out_dir: Path, claim: rundir.Claim, warning: str | None = None) -> None:
    out.run_header(profile.name, profile.device, n, out_dir / "results.json")
    if warning:
        out.say(f"{out.INDENT}warning: {warning}")
    if claim.moved_to is not None:
        out.say(f"{out.INDENT}--force: the run that was in {out_dir} is now in {claim.moved_to}")
    if claim.manifest_only:
        out.say(f"{out.INDENT}--resume: the run in {out_dir} had saved no record (only its manifest): starting it "
                f"afresh there")
    if claim.removed:
        out.say(f"{out.INDENT}removed {len(claim.removed)} temporary file(s) of an interrupted save: "
                f"{', '.join(p.name for p in claim.removed[:3])}{' ...' if len(claim.removed) > 3 else ''}")


def cleaned(removed: list[Path]) -> None:
    if removed:
        out.say(f"{out.INDENT}removed {len(removed)} temporary folder(s) left by killed runs: "
                f"{', '.join(str(p) for p in removed[:3])}{' ...' if len(removed) > 3 else ''}")


def resume(kept: list[str], todo: int) -> None:
    out.say(f"{out.INDENT}--resume: keeping {len(kept)} OK record(s) ({', '.join(kept) or 'none'}), running {todo}")


def too_long(warning: str | None) -> None:
    if warning:
        out.say(f"{out.INDENT}warning: {warning}", "yellow")


def stopped(stop: Stop) -> None:
    out.say(stop.message, "bold")
