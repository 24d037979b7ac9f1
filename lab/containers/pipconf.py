"""How an image build reaches Python packages: the host's pip settings, turned into build options.

Only network indexes travel into the build (file:// indexes and find-links are host paths); a local
wheelhouse is copied into the build context instead, and the CA bundle is copied into the build
stage only (it never reaches the final image).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lab.containers.engine import call


@dataclass
class PipSettings:
    """The pip settings a build uses, and those that cannot travel into it (with why)."""

    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    trusted_hosts: list[str] = field(default_factory=list)
    cert: str | None = None
    wheelhouses: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def build_args(self) -> dict[str, str]:
        args = {}
        if self.index_url:
            args["PIP_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            args["PIP_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        if self.trusted_hosts:
            args["PIP_TRUSTED_HOST"] = " ".join(self.trusted_hosts)
        return args


def parse_pip_config(text: str) -> dict[str, str]:
    """`pip config list` lines (`global.cert='/x'`, `:env:.find-links='/y'`) -> {key: value}, env last wins."""
    matches = (re.match(r"^([^.=]*)\.([\w-]+)='(.*)'$", line.strip()) for line in text.splitlines())
    return {m.group(2): m.group(3) for m in matches if m}


def host_pip_settings(config_text: str | None = None, environ: dict[str, str] | None = None) -> PipSettings:
    """The host's pip index, CA bundle and wheelhouse, from `pip config list` and PIP_* variables."""
    env = os.environ if environ is None else environ
    if config_text is None:
        out = call([sys.executable, "-m", "pip", "config", "list"])
        config_text = out.stdout if out is not None and out.returncode == 0 else ""
    cfg = parse_pip_config(config_text)
    for key in ("index-url", "extra-index-url", "trusted-host", "cert", "find-links"):
        env_key = "PIP_" + key.upper().replace("-", "_")
        if env.get(env_key):
            cfg[key] = env[env_key]
    s = PipSettings()
    for url in cfg.get("index-url", "").split():
        if url.startswith(("http://", "https://")):
            s.index_url = url
        else:
            s.ignored.append(f"index-url {url}: a host path, not reachable from a build")
    for url in cfg.get("extra-index-url", "").split():
        if url.startswith(("http://", "https://")):
            s.extra_index_urls.append(url)
        else:
            s.ignored.append(f"extra-index-url {url}: a host path, not reachable from a build")
    s.trusted_hosts = cfg.get("trusted-host", "").split()
    cert = cfg.get("cert")
    if cert and Path(cert).is_file():
        s.cert = cert
    for loc in cfg.get("find-links", "").split():
        path = loc[len("file://"):] if loc.startswith("file://") else loc
        if Path(path).is_dir():
            s.wheelhouses.append(path)
        else:
            s.ignored.append(f"find-links {loc}: not a local folder")
    return s


def settings_from_options(no_host_pip: bool, pip_cert: str | None, wheelhouses: list[str]) -> PipSettings:
    """The host's settings (unless `no_host_pip`), with a CA bundle and wheelhouses given on the command line."""
    pip = PipSettings() if no_host_pip else host_pip_settings()
    if pip_cert:
        if not Path(pip_cert).is_file():
            raise FileNotFoundError(f"--pip-cert {pip_cert}: no such file")
        pip.cert = pip_cert
    for house in wheelhouses:
        if not Path(house).is_dir():
            raise FileNotFoundError(f"--wheelhouse {house}: no such folder")
        pip.wheelhouses.append(house)
    return pip
