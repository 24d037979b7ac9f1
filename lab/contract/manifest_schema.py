"""The manifest's schema: pydantic models of the fields the report and `compare` read.

Every object allows fields beyond those declared (forward compatible: a newer lab may add some);
the declared ones are type-checked strictly, so a manifest whose `host` is text, or whose
`gpu.nvidia_smi` is not an object, is refused with one line naming the file and the field.
`manifest_version` is checked first. The attribute docstrings are the descriptions in
docs/results.md (`python -m lab.contract.schema_doc`). Standard library and pydantic only: no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, TypeAdapter, ValidationError

from lab.contract.schema import ResultsError, check_version, one_line

MANIFEST_VERSION = 1


class _Open(BaseModel):
    """A manifest object: the fields the lab reads are typed; any other field is allowed (forward compatible)."""

    model_config = ConfigDict(extra="allow", strict=True, use_attribute_docstrings=True, defer_build=True)
    __pydantic_extra__: dict[str, JsonValue]


class Host(_Open):
    hostname: str | None = None
    """the host's name"""
    os: str | None = None
    """`platform.platform()`"""
    kernel: str | None = None
    """`platform.release()`"""
    libc: str | None = None
    """e.g. glibc-2.39"""
    real_hostname: str | None = None
    """the machine's name: LAB_HOSTNAME where the lab's launcher sets it (a container's own hostname is its id), else the hostname"""
    load_start: list[float] | None = None
    """the 1, 5 and 15 minute load averages when the run started"""
    overloaded: bool | None = None
    """the 1-minute load at the start exceeded the usable cores: every timing of the run is suspect (null: unknown)"""
    load_end: list[float] | None = None
    """the same when the run ended (null: the run did not complete)"""


class Python(_Open):
    version: str | None = None
    """e.g. 3.12.3"""
    implementation: str | None = None
    executable: str | None = None
    """the interpreter that ran the lab"""


class Torch(_Open):
    version: str | None = None
    """torch.__version__, e.g. 2.11.0+cu130"""
    cuda_build: str | None = None
    """the CUDA version torch was built with (null: a CPU build)"""
    cudnn: int | None = None
    """cuDNN's version number (null: none)"""
    debug: bool | None = None
    """a debug build"""
    git: str | None = None
    """the commit torch was built from"""
    num_threads: int | None = None
    """torch's intra-op threads"""


class CudaView(_Open):
    """What torch sees of CUDA (lab.host.toolchain.CudaInfo)."""

    available: bool | None = None
    """torch sees a CUDA device"""
    device_count: int | None = None
    device_name: str | None = None
    capability: str | None = None
    """e.g. 9.0"""
    torch_cuda: str | None = None
    why_not: str | None = None
    """why torch sees no CUDA device"""


class NvidiaSmi(_Open):
    gpus: list[dict[str, str]] = []
    """one object per GPU: nvidia-smi's fields (name, driver_version, memory.total, clocks, power limit..., and the
    card: uuid, pci.bus_id) as text"""


class Gpu(_Open):
    torch: CudaView | None = None
    nvidia_smi: NvidiaSmi | None = None
    """null where nvidia-smi is absent"""


class Cpu(_Open):
    model: str | None = None
    """the CPU's model name"""
    logical_cores: int | None = None
    usable_cores: int | None = None
    """the cores this process may run on"""
    torch_threads: int | None = None
    """torch's intra-op threads"""
    machine: str | None = None
    """e.g. x86_64"""
    isa: list[str] | None = None
    """the CPU flags that change which kernels are picked (avx2, avx512f, amx_bf16, ...)"""
    flags_sha256: str | None = None
    """sha256 of all the CPU's flags"""
    caches: dict[str, str] | None = None
    """cache sizes as the kernel reports them, e.g. {"L1d": "32K", "L2": "512K", "L3": "32768K"}"""


class Cxx(_Open):
    compiler: str | None = None
    """the C++ compiler Inductor would use (null: its search fails)"""
    path: str | None = None
    """where it was found on PATH"""
    version: str | None = None
    """its --version line"""
    python_h: str | None = None
    """the Python.h Inductor's C++ code compiles against (null: missing)"""
    off_path: list[str] | None = None
    """compilers installed but not on PATH"""


class Triton(_Open):
    importable: bool | None = None
    """Triton can be imported"""
    version: str | None = None
    why_not: str | None = None
    """why it cannot"""


class Toolchain(_Open):
    """lab.host.toolchain's probe, as it is."""

    platform: str | None = None
    cuda: CudaView | None = None
    triton: Triton | None = None
    cxx: Cxx | None = None


class RecompileLimit(_Open):
    name: str | None = None
    """the limit under the installed torch's own name, e.g. torch._dynamo.config.recompile_limit"""
    value: int | None = None


class CompilerSettings(_Open):
    recompile_limit: RecompileLimit | None = None
    dynamo: dict[str, JsonValue] | None = None
    """Dynamo settings that change what a compile does"""
    inductor: dict[str, JsonValue] | None = None
    """Inductor settings that change what a compile does"""


class LabStamp(_Open):
    path: str | None = None
    """the stamp file read (LAB_STAMP, else build/lab-stamp.json)"""
    matched: bool | None = None
    """its source_sha256 is these sources': its commit is the one recorded (unless git said the tree is clean)"""
    commit: str | None = None
    """the commit `python -m lab stamp` recorded in a clean checkout"""
    source_sha256: str | None = None
    """the sources' sha256 when the stamp was made"""
    made_at: str | None = None
    """when the stamp was made (ISO 8601, UTC)"""
    why: str | None = None
    """why it was not used: another digest, or a file that cannot be read"""


class LabInfo(_Open):
    version: str | None = None
    """the lab's version"""
    commit: str | None = None
    """the lab's git commit"""
    dirty: bool | None = None
    """the working tree had uncommitted changes (null: unknown; false from a stamp: the lab's sources are the stamped commit's)"""
    source: str | None = None
    """where the commit came from: git, stamp (a source stamp whose digest matched), LAB_COMMIT, or a note"""
    source_sha256: str | None = None
    """sha256 of the lab's own sources (lab/ and report/)"""
    stamp: LabStamp | None = None
    """the source stamp found (`python -m lab stamp`), whether it matched and why not (absent: none found)"""


class Container(_Open):
    in_container: bool | None = None
    """the run was inside a container"""
    markers: list[str] | None = None
    image: str | None = None
    """the image's name (LAB_IMAGE)"""
    image_id: str | None = None
    variant: str | None = None
    """the image's variant (LAB_IMAGE_VARIANT)"""
    fallback_reason: str | None = None
    """why the run fell back to the host (LAB_HOST_FALLBACK)"""


class Packages(_Open):
    count: int | None = None
    """how many distributions are installed"""
    sha256: str | None = None
    """sha256 of the sorted name==version list of installed distributions"""


class Weights(_Open):
    source: str | None = None
    """random, local or hf-cache"""
    model: str | None = None
    """the model's name, e.g. gpt2-124M"""
    seed: int | None = None
    """random weights: the seed"""
    init_std: float | None = None
    """random weights: the standard deviation they were drawn with"""
    path: str | None = None
    """a checkpoint's folder"""
    sha256: str | None = None
    """a checkpoint's digest"""


class ProfileInfo(_Open):
    name: str | None = None
    """the profile's name"""
    device: str | None = None
    """cpu or cuda"""
    dtype: str | None = None
    """the model's dtype"""
    options: dict[str, dict[str, JsonValue]] | None = None
    """each experiment's options as the profile sets them"""


class HostDispatch(_Open):
    cpu_model: str | None = None
    """the CPU's model name"""
    cpu_mhz: float | None = None
    """the CPU cores' median clock when the run started (/proc/cpuinfo; null where the OS does not say)"""
    load_start: list[float] | None = None
    """the 1, 5 and 15 minute load averages when the run started"""
    load_end: list[float] | None = None
    """the same when the run ended (null: the run did not complete)"""
    launch_us_per_op: float | None = None
    """the cost of one tiny eager op, measured clean in the sentinel's fresh process (null: no sentinel ran)"""
    placement: dict[str, Any] | None = None
    """where the run's process may run (lab.host.cpuplace): LAB_CPU_BIND as applied, the allowed CPUs, the NUMA
    nodes, the GPU's node, the CPU the main thread was on at the start"""


class Manifest(_Open):
    """The environment manifest (lab.run.manifest.collect), in results.json and in manifest.json."""

    manifest_version: Literal[1]
    """1. A loader that does not know the version refuses the file."""
    created_at: str | None = None
    """ISO 8601, UTC"""
    label: str | None = None
    """the user's label for the run (`lab run --label NAME`, or LAB_LABEL)"""
    host: Host | None = None
    """the operating system and the host's name"""
    host_dispatch: HostDispatch | None = None
    """the host's dispatch speed: what sets an eager or launch-bound step time (the GPU does not)"""
    python: Python | None = None
    """the interpreter"""
    torch: Torch | None = None
    """the torch build"""
    libraries: dict[str, str | None] | None = None
    """versions of transformers, Triton, jinja2, numpy, matplotlib, nox (null: not installed)"""
    toolchain: Toolchain | None = None
    """what Inductor can compile with here (lab.host.toolchain)"""
    gpu: Gpu | None = None
    """torch's view of CUDA and nvidia-smi's"""
    cpu: Cpu | None = None
    """the CPU and the threads torch uses"""
    compiler_settings: CompilerSettings | None = None
    """Dynamo and Inductor settings in effect"""
    inductor_cache_dir: str | None = None
    """where Inductor's caches live"""
    compile_cache: dict[str, JsonValue] | None = None
    """what a compile cache made here is valid for (lab.host.compile_cache), and `state`: cold (empty) or warm when the run started"""
    lab: LabInfo | None = None
    """the lab's own version and commit"""
    container: Container | None = None
    """container or host"""
    packages: Packages | None = None
    """a digest of the installed packages"""
    weights: Weights | None = None
    """where the model's weights came from (lab.step.model)"""
    collect_env: dict[str, JsonValue] | None = None
    """torch.utils.collect_env's fields, verbatim"""
    profile: ProfileInfo | None = None
    """every knob of the profile the run used (results.json's manifest only)"""
    options: dict[str, dict[str, JsonValue]] | None = None
    """each experiment's resolved options"""


MANIFEST = TypeAdapter(Manifest)


def check_manifest(data: Any, path: Path | str) -> None:
    """Refuse a manifest off the schema with one line naming `path` and the field."""
    check_version(data, "manifest_version", MANIFEST_VERSION, "", path)
    try:
        MANIFEST.validate_python(data)
    except ValidationError as exc:
        raise ResultsError(one_line(path, exc, data)) from None
