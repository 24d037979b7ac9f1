"""What a run says of the code that made it: the lab's commit and whether its tree was clean."""

from __future__ import annotations

from lab.contract.results import Results


def tree_state(results: Results) -> str:
    """The lab's commit and its tree's state as the manifest recorded them: "lab 7c5301c, clean tree",
    "lab 7c5301c + uncommitted changes", "lab 7c5301c (from a stamp), clean tree", "lab commit unknown"."""
    lab = results.manifest.get("lab") or {}
    commit = lab.get("commit") if isinstance(lab, dict) else None
    if not commit:
        return "lab commit unknown"
    how = " (from a stamp)" if lab.get("source") == "stamp" else " (from LAB_COMMIT)" if lab.get("source") == \
        "LAB_COMMIT" else ""
    dirty = lab.get("dirty")
    state = ", clean tree" if dirty is False else " + uncommitted changes" if dirty else ", tree state unknown"
    return f"lab {str(commit)[:7]}{how}{state}"
