"""Hosts are machines, not names: a run's host is its hostname together with its hardware (the CPU model and cores,
the GPU and its driver), so two machines that share a hostname ("vm" on a cloud) are two hosts.

History groups runs by `machine(...).key`, the comparison's "previous run of this host" is the previous run of the
same machine, and both say which machine in words (`Machine.label`). A field the manifest does not record is "?":
two runs that both lack it still match on it (an older manifest is not a new machine by itself).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lab.contract.results import Results


@dataclass(frozen=True)
class Machine:
    hostname: str
    cpu: str
    cores: str
    gpu: str
    driver: str

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return self.hostname, self.cpu, self.cores, self.gpu, self.driver

    @property
    def label(self) -> str:
        """'vm (Intel(R) Xeon(R) Processor, 16 cores; NVIDIA H200, driver 580.159.04)'."""
        gpu = "" if self.gpu == "?" else f"; {self.gpu}, driver {self.driver}"
        return f"{self.hostname} ({self.cpu}, {self.cores} cores{gpu})"


def slug(label: str) -> str:
    """A label as an HTML id's part: letters, digits and dashes."""
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")


def _text(value: Any) -> str:
    return "?" if value in (None, "") else str(value)


def machine(results: Results) -> Machine:
    """The machine a run ran on, from its manifest."""
    return machine_of(results.manifest)


def machine_of(m: dict[str, Any]) -> Machine:
    """The machine a manifest describes (a side of `lab compare` may be a manifest alone)."""
    def part(d: dict[str, Any], key: str) -> dict[str, Any]:
        return d[key] if isinstance(d.get(key), dict) else {}

    host, cpu, gpu = part(m, "host"), part(m, "cpu"), part(m, "gpu")
    smi = part(gpu, "nvidia_smi")
    gpus = smi.get("gpus") if isinstance(smi.get("gpus"), list) else []
    first = gpus[0] if gpus and isinstance(gpus[0], dict) else {}
    return Machine(hostname=_text(host.get("real_hostname") or host.get("hostname")), cpu=_text(cpu.get("model")),
                   cores=_text(cpu.get("logical_cores")), gpu=_text(first.get("name")),
                   driver=_text(first.get("driver_version")))
