"""lab.untrusted: the one rule for a file in a folder the lab did not create (issue 30)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab import untrusted


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert untrusted.read_bytes(tmp_path / "f") == b"abc" and untrusted.read_text(tmp_path / "f", limit=3) == "abc"


@pytest.mark.parametrize("plant, said", [
    (lambda p: p.symlink_to(p.parent / "target"), "a symbolic link; links are never followed"),
    (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),
    (lambda p: p.mkdir(), "a directory, not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "a symbolic link"),
    (lambda p: p.write_bytes(b"x" * 11), "11 bytes, more than the 10 the lab reads"),
])
def test_anything_else_is_refused_naming_the_file(tmp_path: Path, plant, said: str) -> None:
    (tmp_path / "target").write_bytes(b"secret")
    path = tmp_path / "results.json"
    plant(path)
    with pytest.raises(OSError) as caught:
        untrusted.read_bytes(path, limit=10)
    assert said in caught.value.strerror and caught.value.filename == str(path)


def test_a_character_device_is_refused() -> None:
    with pytest.raises(OSError, match="a character device"):
        untrusted.read_bytes("/dev/zero")


def test_a_file_is_written_only_when_created_here_or_a_regular_file_of_one_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"secret")
    (tmp_path / "link").symlink_to(victim)
    os.link(victim, tmp_path / "hard")
    with pytest.raises(OSError, match="a symbolic link"):
        untrusted.open_or_create(tmp_path / "link")
    with pytest.raises(OSError, match="2 hard links"):
        untrusted.open_or_create(tmp_path / "hard")
    with pytest.raises(FileExistsError):
        untrusted.create_new(tmp_path / "link")
    assert victim.read_bytes() == b"secret"
    os.close(untrusted.open_or_create(tmp_path / "new"))
    os.close(untrusted.open_or_create(tmp_path / "new"))  # a lock file its last holder left
    assert (tmp_path / "new").is_file()
