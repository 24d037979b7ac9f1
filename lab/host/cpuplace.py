"""Where the measuring process runs on the host's CPUs: its allowed CPUs, the NUMA nodes, the GPU's own node.

An eager decode step is host work (one Python dispatch and one launch per op), so its time depends on
the CPU the measuring thread runs on. On one H200 host two fresh processes timed the same eager step at
6.65 and 4.82 ms, each steady within itself: the processes differed, not the rounds. So the placement
is provenance: the manifest records it (`host_dispatch.placement`), a fresh-process measurement records
the CPU each of its rounds ran on, and `LAB_CPU_BIND` can bind the run (and the children it starts,
which inherit it) to one declared set before anything is measured:

- `none` (default): as the scheduler places it;
- `node`: the CPUs of the GPU's NUMA node (torch.numa's "node" mode, the usual advice for GPU hosts),
  else of NUMA node 0 without a GPU;
- a CPU list such as `2-5,8`.

Everything is read from Linux's /proc and /sys; elsewhere each field is None (never a guess).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from lab.host.hostinfo import read_text

BIND_ENV = "LAB_CPU_BIND"
NODE_ROOT = Path("/sys/devices/system/node")
CPU_ROOT = Path("/sys/devices/system/cpu")
PCI_ROOT = Path("/sys/bus/pci/devices")


class BindError(ValueError):
    """LAB_CPU_BIND names no usable CPU set (the message names the variable and the value)."""


MAX_CPU = (1 << 16) - 1  # above any kernel's NR_CPUS (8192 on x86-64): a larger number is a typo, never a CPU


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Linux's CPU list format ("0-3,8,10-11") as sorted CPU numbers; ValueError on anything else, a CPU number
    above MAX_CPU included (before any list is built)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if first < 0 or last < first or last > MAX_CPU:
            raise ValueError(f"bad CPU range {part[:40]!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def cpulist_text(cpus: tuple[int, ...] | None) -> str:
    """CPU numbers in Linux's list format, ranges folded ("0-3,8"): a line stays short whatever the set."""
    parts: list[str] = []
    for cpu in sorted(cpus or ()):
        if parts and cpu == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return ",".join(parts) or "none"


def numa_nodes(root: Path = NODE_ROOT) -> dict[int, tuple[int, ...]]:
    """NUMA node -> its CPUs ({} where /sys has no node folders)."""
    texts = {int(folder.name[4:]): read_text(folder / "cpulist") for folder in sorted(root.glob("node[0-9]*"))}
    return {node: parse_cpulist(text) for node, text in texts.items() if text is not None}


def pci_address(props: Any) -> str | None:
    """The sysfs PCI address ("0000:dc:00.0") of a CUDA device's properties, where torch exposes its ids."""
    ids = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    return f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0" if all(isinstance(i, int) for i in ids) else None


def gpu_node(address: str | None, root: Path = PCI_ROOT) -> int | None:
    """The NUMA node of the PCI device at `address` (a single-node host's -1 is node 0); None if unknown."""
    text = None if address is None else read_text(root / address / "numa_node")
    if text is None:
        return None
    try:
        return max(int(text), 0)
    except ValueError:
        return None


NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers (an H200 is the latter)


def first_nvidia_gpu(root: Path = PCI_ROOT) -> str | None:
    """The PCI address of the first NVIDIA GPU in bus order, read from sysfs without loading torch or CUDA
    (on a host of identical GPUs, CUDA's default order ties on the bus id, so this is device 0)."""
    return next((dev.name for dev in sorted(root.glob("*")) if read_text(dev / "vendor") == NVIDIA_VENDOR
                 and (read_text(dev / "class") or "")[:6] in DISPLAY_CLASSES), None)


def thread_cpu(stat: Path = Path("/proc/thread-self/stat")) -> int | None:
    """The CPU the calling thread last ran on (field 39 of its stat line; the name field may hold spaces)."""
    text = read_text(stat)
    if text is None or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return int(fields[36])  # fields after the name start at field 3
    except (IndexError, ValueError):
        return None


def siblings(cpu: int, root: Path = CPU_ROOT) -> tuple[int, ...] | None:
    """The logical CPUs sharing `cpu`'s physical core (SMT siblings, `cpu` included)."""
    text = read_text(root / f"cpu{cpu}" / "topology" / "thread_siblings_list")
    return None if text is None else parse_cpulist(text)


def allowed() -> tuple[int, ...] | None:
    """The CPUs this thread may run on."""
    getter = getattr(os, "sched_getaffinity", None)
    return None if getter is None else tuple(sorted(getter(0)))


def pin_thread(cpu: int | None) -> int | None:
    """Bind the calling thread to `cpu` alone; the CPU bound to, or None where it cannot be (no CPU given, no
    sched_setaffinity on this platform, or `cpu` not allowed to this thread)."""
    setter = getattr(os, "sched_setaffinity", None)
    now = allowed()
    if cpu is None or setter is None or now is None or cpu not in now:
        return None
    setter(0, {cpu})
    return cpu


def release(cpus: Iterable[int] | None) -> None:
    """Bind the calling thread to `cpus` again (what `allowed` said before a `pin_thread`); None: nothing to do."""
    setter = getattr(os, "sched_setaffinity", None)
    if cpus is not None and setter is not None:
        setter(0, set(cpus))


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[int | None]:
    """The calling thread on `cpu` alone inside the block (`pin_thread`), its former CPUs restored after; yields the
    CPU, or None where it could not pin (then nothing was changed)."""
    before = allowed()
    on = pin_thread(cpu)
    try:
        yield on
    finally:
        if on is not None:
            release(before)


@dataclass(frozen=True)
class Placement:
    bind: str  # LAB_CPU_BIND as applied ("none" when unset)
    allowed: tuple[int, ...] | None
    numa_nodes: dict[int, tuple[int, ...]]
    gpu_node: int | None
    ran_on: int | None  # the CPU the main thread was on when this was read

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["numa_nodes"] = {str(k): list(v) for k, v in self.numa_nodes.items()}
        d["allowed"] = None if self.allowed is None else list(self.allowed)
        return d


def _cuda_address(root: Path = PCI_ROOT) -> str | None:
    """The first CUDA device's PCI address: torch's, where torch is loaded with CUDA, else sysfs's first NVIDIA GPU."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return pci_address(torch.cuda.get_device_properties(0)) or first_nvidia_gpu(root)
    return first_nvidia_gpu(root)


def placement(address: str | None = None, node_root: Path = NODE_ROOT, pci_root: Path = PCI_ROOT) -> Placement:
    return Placement(bind=os.environ.get(BIND_ENV) or "none", allowed=allowed(), numa_nodes=numa_nodes(node_root),
                     gpu_node=gpu_node(address if address is not None else _cuda_address(pci_root), pci_root),
                     ran_on=thread_cpu())


def bind_set(value: str, nodes: dict[int, tuple[int, ...]], node: int | None,
             allowed_now: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The CPUs LAB_CPU_BIND=`value` asks for, within those allowed now; None for `none`. BindError if empty."""
    value = value.strip()
    if value in ("", "none"):
        return None
    if value == "node":
        if not nodes:
            raise BindError(f"{BIND_ENV}=node: this host shows no NUMA nodes (/sys/devices/system/node)")
        wanted = nodes.get(node if node is not None else min(nodes), ())
    else:
        try:
            wanted = parse_cpulist(value)
        except ValueError:
            raise BindError(f"{BIND_ENV}={value[:40]!r}: expected none, node or a CPU list such as 2-5,8 (CPU numbers "
                            f"up to {MAX_CPU})") from None
    usable = tuple(c for c in wanted if allowed_now is None or c in allowed_now)
    if not usable:
        raise BindError(f"{BIND_ENV}={value!r}: none of CPUs {cpulist_text(wanted)} is allowed to this process "
                        f"(allowed: {cpulist_text(allowed_now)})")
    return usable


def bind_from_env() -> tuple[int, ...] | None:
    """Apply LAB_CPU_BIND to this process's main thread (threads and children started later inherit it).
    Called once at the start of a run, before torch starts its threads; returns the CPUs bound to, or None."""
    value = os.environ.get(BIND_ENV)
    if not value or value.strip() == "none":
        return None
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        raise BindError(f"{BIND_ENV}={value!r}: this platform cannot bind a process to CPUs")
    cpus = bind_set(value, numa_nodes(), gpu_node(first_nvidia_gpu()), allowed())
    assert cpus is not None
    setter(0, set(cpus))
    return cpus
