"""lab/containers/lock.py and the images' lock files: complete, hashed, covering
pyproject's dependencies; drift from them detected.

tests/e2e/test_docker_results.py checks the built images' `pip freeze --all` against these locks in CI.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from lab.containers.lock import freeze_drift, lock_from_report, normalize, parse_freeze, parse_lock

REPO = Path(__file__).resolve().parent.parent
LOCKS = {family: (REPO / "docker" / f"lock-{family}.txt").read_text() for family in ("cpu", "cuda")}


@pytest.mark.parametrize("family", LOCKS)
def test_every_locked_package_has_an_exact_version_and_a_sha256(family):
    pins = parse_lock(LOCKS[family])
    assert len(pins) > 30
    for pin in pins.values():
        assert pin.hashes and all(len(h) == 64 for h in pin.hashes), pin


@pytest.mark.parametrize("family", LOCKS)
def test_the_lock_pins_pip_setuptools_torch_and_every_pyproject_dependency(family):
    pins = parse_lock(LOCKS[family])
    assert {"pip", "setuptools", "torch"} <= set(pins)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        req = Requirement(dep)
        name = normalize(req.name)
        assert name in pins, f"{family}: {req.name} (pyproject.toml) is not in the lock: python -m lab image-lock {family}"
        assert req.specifier.contains(pins[name].version, prereleases=True), (family, dep, pins[name].version)


def test_the_cuda_lock_holds_the_cuda_wheels_that_were_missing():
    pins = parse_lock(LOCKS["cuda"])
    assert pins["torch"].version == "2.11.0" and pins["triton"].version == "3.6.0"
    assert {"cuda-bindings", "cuda-pathfinder"} <= set(pins)
    assert any(name.startswith("nvidia-") for name in pins)
    assert pins["transformers"].version == "5.17.0"  # the H200 reference run's


def test_the_cpu_lock_holds_the_cpu_build_of_torch():
    assert parse_lock(LOCKS["cpu"])["torch"].version == "2.13.0+cpu"


def test_parse_lock_rejects_an_entry_without_an_exact_pin():
    with pytest.raises(ValueError, match="expected NAME==VERSION"):
        parse_lock("torch>=2.6 --hash=sha256:" + "0" * 64 + "\n")


FREEZE = "graph-lab==0.1.0\nJinja2==3.1.6\npip==26.3\ntriton==3.6.0\n"
LOCK = ("jinja2==3.1.6 \\\n    --hash=sha256:" + "a" * 64 + "\npip==26.3 --hash=sha256:" + "b" * 64 +
        "\ntriton==3.6.0 --hash=sha256:" + "c" * 64 + "\n")


def test_no_drift_when_the_image_holds_exactly_the_lock():
    assert not freeze_drift(FREEZE, LOCK)
    assert freeze_drift(FREEZE, LOCK).describe() == "none"


def test_drift_names_missing_extra_and_changed_packages():
    drift = freeze_drift("graph-lab==0.1.0\njinja2==3.1.5\nrich==15.0.0\n", LOCK)
    assert drift.missing == ["pip==26.3", "triton==3.6.0"]
    assert drift.extra == ["rich==15.0.0"]
    assert drift.changed == ["jinja2 3.1.5 (lock 3.1.6)"]
    assert "not in the lock: rich==15.0.0" in drift.describe()


def test_a_variant_that_uninstalls_a_locked_package_is_not_drift():
    freeze = "jinja2==3.1.6\npip==26.3\n"
    assert freeze_drift(freeze, LOCK, frozenset({"triton"})).missing == []
    assert freeze_drift(freeze, LOCK).missing == ["triton==3.6.0"]


def test_parse_freeze_keeps_direct_installs():
    assert parse_freeze("Foo_Bar==1.0\nlab @ file:///x\n") == {"foo-bar": "1.0", "lab": "@ file:///x"}


def test_lock_from_pips_report_uses_the_reported_hash_and_hashes_a_wheelhouse_file(tmp_path):
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    report = {"install": [
        {"metadata": {"name": "Jinja2", "version": "3.1.6"},
         "download_info": {"url": "https://files.example/jinja2.whl", "archive_info": {"hashes": {"sha256": "d" * 64}}}},
        {"metadata": {"name": "torch", "version": "2.13.0+cpu"},
         "download_info": {"url": "file:///tmp/extra/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                           "archive_info": {}}},
    ]}
    text = lock_from_report(report, lambda name: tmp_path / name if (tmp_path / name).is_file() else None, "# head\n")
    pins = parse_lock(text)
    assert pins["jinja2"].hashes == ("d" * 64,)
    import hashlib

    assert pins["torch"].hashes == (hashlib.sha256(b"not really a wheel").hexdigest(),)
    with pytest.raises(ValueError, match="no sha256"):
        lock_from_report({"install": [{"metadata": {"name": "x", "version": "1"}, "download_info": {"url": "https://y"}}]},
                         lambda name: None, "# head\n")
