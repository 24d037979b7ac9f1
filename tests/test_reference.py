"""lab/containers/reference.py: an image's environment against the H200 reference run's, and the comparison that puts
those differences first."""

from __future__ import annotations

import json
from pathlib import Path

from lab.containers.lock import parse_lock
from lab.containers.reference import describe, environment_diff

REPO = Path(__file__).resolve().parent.parent
LOCKS = {family: (REPO / "docker" / f"lock-{family}.txt").read_text() for family in ("cpu", "cuda")}


def test_the_cuda_image_differs_from_the_h200_reference_in_python_and_says_so():
    """What the resolve step reports for the cuda image: Debian 12's Python 3.11 against the H200's 3.12."""
    resolved = "\n".join(f"{p.name}=={p.version}" for p in parse_lock(LOCKS["cuda"]).values())
    described = describe("cuda", "3.11.2", resolved)
    assert described["reference"] == "manifests/reference/h200-2026-12-02-gpu/manifest.json"
    fields = {d["field"]: d for d in described["differs"]}
    assert fields["python.version"] == {"field": "python.version", "image": "3.11.2", "reference": "3.12.3"}
    assert "libraries.transformers" not in fields and "torch.version" not in fields  # 5.17.0 and 2.11.0 match


def test_environment_diff_compares_public_versions():
    ref = json.loads((REPO / "manifests/reference/h200-2026-12-02-gpu/manifest.json").read_text())
    diff = environment_diff("3.12.1", {"torch": "2.11.0", "transformers": "5.24.0", "triton": "3.6.0",
                                       "numpy": ref["libraries"]["numpy"], "jinja2": ref["libraries"]["jinja2"],
                                       "matplotlib": ref["libraries"]["matplotlib"]}, ref)
    assert [d["field"] for d in diff] == ["libraries.transformers"]


def test_compare_puts_image_against_reference_differences_first(tmp_path):
    """A run in the cuda image beside the H200 reference: Python, transformers and the image lead the comparison."""
    import copy

    from report.pages.compare import compare, load_side
    from report.pages.compare_text import format_text

    ref_path = REPO / "manifests/reference/h200-2026-12-02-gpu/manifest.json"
    image = copy.deepcopy(json.loads(ref_path.read_text()))
    image["python"]["version"] = "3.11.2"
    image["libraries"]["transformers"] = "5.24.0"
    image["container"].update(in_container=True, image="graph-lab:cuda", variant="cuda")
    (tmp_path / "manifest.json").write_text(json.dumps(image))
    c = compare(load_side(ref_path), load_side(tmp_path / "manifest.json"))
    keys = [r.key for r in c.why if r.differs]
    assert keys[:2] == ["python.version", "libraries.transformers"] and {"container.image", "container.variant"} <= set(keys)
    text = format_text(c)
    head = text.split("Manifest fields that differ")[0]
    assert f"Why it moved: {len(keys)} of the fields that can explain a move differ" in head
    assert "3.12.3  ->  3.11.2" in head and "graph-lab:cuda" in head
