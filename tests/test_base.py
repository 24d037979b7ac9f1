"""lab/containers/base.py: the local base image's Debian mirror, security suite and apt caches."""

from __future__ import annotations

from lab.containers import base


def test_debian_mirror_from_deb822_and_one_line_sources(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nEnabled: no\n\n"
                      "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
                      "Components: main\n")
    assert base.debian_mirror("bookworm", [deb822]) == "http://mirror.example/debian"
    one = tmp_path / "sources.list"
    one.write_text("# deb http://old.example/debian bookworm main\ndeb [arch=amd64] http://line.example/debian bookworm main\n")
    assert base.debian_mirror("bookworm", [one]) == "http://line.example/debian"
    assert base.debian_mirror("trixie", [deb822, one]) is None


def test_the_base_image_has_the_security_suite_and_keeps_no_apt_caches(tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc/apt/apt.conf.d").mkdir(parents=True)
    (root / "var/cache/apt/archives").mkdir(parents=True)
    (root / "var/cache/apt/pkgcache.bin").write_bytes(b"x")
    (root / "var/cache/apt/archives/a.deb").write_bytes(b"x")
    (root / "etc/apt/sources.list").write_text("deb http://m.example/debian bookworm main\n")
    base.configure_rootfs(root, "bookworm", "http://m.example/debian", "http://s.example/debian-security")
    sources = (root / "etc/apt/sources.list.d/debian.sources").read_text()
    assert "Suites: bookworm bookworm-updates" in sources and "Suites: bookworm-security" in sources
    assert "URIs: http://s.example/debian-security" in sources and not (root / "etc/apt/sources.list").exists()
    assert not list((root / "var/cache/apt").rglob("*.bin")) and not list((root / "var/cache/apt").rglob("*.deb"))
    clean = (root / "etc/apt/apt.conf.d/docker-clean").read_text()
    assert 'Dir::Cache::pkgcache "";' in clean and 'Dir::Cache::srcpkgcache "";' in clean


def test_the_security_mirror_is_the_hosts(tmp_path):
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://m.example/debian\nSuites: bookworm bookworm-updates\n\n"
                   "Types: deb\nURIs: http://m.example/debian-security\nSuites: bookworm-security\n")
    assert base.debian_mirror("bookworm-security", [src]) == "http://m.example/debian-security"
