"""lab/containers/context.py: the build context holds the tracked files, the certificate and the wheels, nothing stale."""

from __future__ import annotations

import subprocess

from lab.containers import context
from lab.containers.pipconf import PipSettings


def test_stage_context_copies_tracked_files_cert_and_wheels(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docker").mkdir(parents=True)
    (repo / "docker" / "Dockerfile.cpu").write_text("FROM x\n")
    (repo / "a.py").write_text("print(1)\n")
    (repo / "untracked.txt").write_text("no\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "a.py", "docker/Dockerfile.cpu"], check=True)
    house = tmp_path / "house"
    house.mkdir()
    (house / "torch-0-py3-none-any.whl").write_bytes(b"w")
    cert = tmp_path / "ca.pem"
    cert.write_text("ca")
    dest = tmp_path / "ctx"
    (dest / "src").mkdir(parents=True)
    (dest / "src" / "stale.py").write_text("old")
    info = context.stage_context(dest, PipSettings(cert=str(cert), wheelhouses=[str(house)]), repo=repo)
    assert (dest / "src" / "a.py").is_file() and not (dest / "src" / "untracked.txt").exists()
    assert not (dest / "src" / "stale.py").exists()
    assert (dest / "docker" / "Dockerfile.cpu").is_file() and (dest / "extra" / "pip-ca.pem").read_text() == "ca"
    assert (dest / "extra" / "wheels" / "torch-0-py3-none-any.whl").is_file()
    assert info["wheels"] == ["torch-0-py3-none-any.whl"]
