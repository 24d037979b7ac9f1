"""What a run says of the code that made it: the lab's commit and whether its tree was clean."""

from __future__ import annotations

from lab.contract.results import Results


def source_changed_at(results: Results) -> list[int]:
    """The starts (numbered from 1) of a resumed run that ran another version of the lab's source than the first
    start (`--resume --allow-source-change`: run.starts records it); the manifest describes the first start only."""
    return [i for i, start in enumerate(results.run.starts, 1)
            if any(str(key).startswith("lab.") for key in start.manifest_changes)]


def mixed_sources(results: Results) -> str:
    """'' for a run of one source; else "; source changed at start 2 (--allow-source-change)"."""
    changed = source_changed_at(results)
    return f"; source changed at start {', '.join(map(str, changed))} (--allow-source-change)" if changed else ""


def tree_state(results: Results) -> str:
    """The lab's commit and its tree's state as the manifest recorded them: "lab 7c5301c, clean tree",
    "lab 7c5301c + uncommitted changes", "lab 7c5301c (from a stamp), clean tree", "lab commit unknown"; a resumed
    run whose source changed says so ("...; source changed at start 2 (--allow-source-change)")."""
    lab = results.manifest.get("lab") or {}
    commit = lab.get("commit") if isinstance(lab, dict) else None
    if not commit:
        return "lab commit unknown" + mixed_sources(results)
    how = {"stamp": " (from a stamp)", "LAB_COMMIT": " (from LAB_COMMIT)"}.get(str(lab.get("source")), "")
    dirty = lab.get("dirty")
    state = ", clean tree" if dirty is False else " + uncommitted changes" if dirty else ", tree state unknown"
    return f"lab {str(commit)[:7]}{how}{state}{mixed_sources(results)}"
