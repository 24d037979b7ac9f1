"""A Debian base image made from the host's apt mirror (debootstrap + docker import): no registry needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from lab.containers import engine
from lab.containers.build import ImageOutcome
from lab.containers.variants import BASE_TAG, REPO_ROOT
from lab.contract.reasons import Code, Reason

DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"


def debian_mirror(suite: str = "bookworm", sources: Sequence[Path] | None = None) -> str | None:
    """The Debian mirror this host's apt already uses for `suite` (deb822 .sources or one-line .list)."""
    if sources is None:
        d = Path("/etc/apt/sources.list.d")
        sources = [Path("/etc/apt/sources.list"), *sorted(d.glob("*.sources")), *sorted(d.glob("*.list"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                pairs = (line.partition(":") for line in stanza.splitlines()
                         if ":" in line and not line.lstrip().startswith("#"))
                fields = {key.strip().lower(): value.strip() for key, _, value in pairs}
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                if suite in fields.get("suites", "").split() and "deb" in fields.get("types", "").split():
                    return fields.get("uris", "").split()[0] if fields.get("uris") else None
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                parts = [p for p in parts if not p.startswith("[")] if parts else parts
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                    return parts[1]
    return None


def apt_sources(suite: str, mirror: str, security_mirror: str) -> str:
    """The image's apt sources (deb822): the release, its updates and its security suite."""
    return (f"Types: deb\nURIs: {mirror}\nSuites: {suite} {suite}-updates\nComponents: main\n"
            f"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {security_mirror}\nSuites: {suite}-security\nComponents: main\n"
            f"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


# What Debian's official images set for builds: dpkg skips fsync (a failed build is simply rerun),
# apt keeps neither downloaded packages nor its binary caches (pkgcache.bin, srcpkgcache.bin: about
# 75 MB that would otherwise stay in every layer that runs apt-get).
DPKG_SPEEDUP = "force-unsafe-io\n"
APT_CLEAN = ('DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
             '/var/cache/apt/*.bin || true"; };\n'
             'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
             '/var/cache/apt/*.bin || true"; };\n'
             'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n'
             'Binary::apt::APT::Keep-Downloaded-Packages "false";\n')


def configure_rootfs(rootfs: Path, suite: str, mirror: str, security_mirror: str) -> None:
    """Sources with the security suite, no package caches: what the Dockerfiles then rely on."""
    # debootstrap's downloads and apt's binary caches
    for cache in [*(rootfs / "var/cache/apt/archives").glob("*.deb"), *(rootfs / "var/cache/apt").glob("*.bin")]:
        cache.unlink()
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    for rel, text in (("etc/apt/sources.list.d/debian.sources", apt_sources(suite, mirror, security_mirror)),
                      ("etc/dpkg/dpkg.cfg.d/docker-apt-speedup", DPKG_SPEEDUP),
                      ("etc/apt/apt.conf.d/docker-clean", APT_CLEAN)):
        (rootfs / rel).parent.mkdir(parents=True, exist_ok=True)
        (rootfs / rel).write_text(text)


def make_base_image(tag: str = BASE_TAG, suite: str = "bookworm", mirror: str | None = None,
                    force: bool = False, security_mirror: str | None = None,
                    log: Callable[[str], object] = print) -> ImageOutcome:
    """A Debian base image from the host's mirror (debootstrap + docker import), for hosts without a registry."""
    why = engine.engine_reason()
    if why is not None:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(why))
    existing = engine.image_id(tag)
    if existing and not force:
        log(f"{tag} exists ({existing[:19]}): reused (force a rebuild with --force)")
        return ImageOutcome("base", "OK", tag, existing, size_MB=engine.image_size_mb(tag))
    if shutil.which("debootstrap") is None:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(Reason(
            Code.NO_DEBOOTSTRAP, "debootstrap is not installed: apt-get install debootstrap (as root)")))
    if os.geteuid() != 0:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(Reason(
            Code.NEEDS_ROOT, "debootstrap must run as root: rerun this session with sudo")))
    mirror = mirror or debian_mirror(suite)
    if mirror is None:
        return ImageOutcome("base", "NOT_RUN", tag, reason=asdict(Reason(
            Code.NO_DEBIAN_MIRROR, f"no apt source for {suite} on this host: pass --mirror URL")))
    start = time.perf_counter()
    rootfs = REPO_ROOT / "build" / f"rootfs-{suite}"
    _remove_rootfs(rootfs)
    cmd = ["debootstrap", "--variant=minbase", suite, str(rootfs), mirror]
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if proc.returncode != 0:
        return ImageOutcome("base", "FAILED", tag, reason=asdict(Reason(
            Code.DEBOOTSTRAP_FAILED, f"debootstrap exited with {proc.returncode} (see /debootstrap/debootstrap.log in "
                                    f"{rootfs})")))
    configure_rootfs(rootfs, suite, mirror, security_mirror or debian_mirror(f"{suite}-security")
                     or DEFAULT_SECURITY_MIRROR)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(["docker", "import", "--change", "CMD [\"/bin/bash\"]", "-", tag], stdin=tar.stdout,
                         capture_output=True, text=True)
    tar.wait()
    _remove_rootfs(rootfs)
    took = round(time.perf_counter() - start, 1)
    if imp.returncode != 0:
        return ImageOutcome("base", "FAILED", tag, duration_s=took, reason=asdict(Reason(
            Code.IMPORT_FAILED, f"docker import failed: {imp.stderr.strip()[:300]}")))
    log(f"{tag}: made from {mirror} in {took} s")
    return ImageOutcome("base", "OK", tag, engine.image_id(tag), duration_s=took, size_MB=engine.image_size_mb(tag))


def _remove_rootfs(rootfs: Path) -> None:
    """Delete a debootstrap tree, first unmounting what an interrupted debootstrap left mounted in it
    (deleting through a mounted /proc or /dev would reach the host's)."""
    if not rootfs.exists():
        return
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    prefix = str(rootfs.resolve()) + "/"
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    still = [m for m in mounts if m.startswith(prefix) and os.path.ismount(m)]
    if still:
        raise RuntimeError(f"{rootfs}: still mounted ({still[0]}); unmount it by hand before deleting")
    shutil.rmtree(rootfs, ignore_errors=True)
