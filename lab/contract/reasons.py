"""Why something did not run or failed: the `Reason` record and every reason code, in one place.

A code is machine-readable and stable (reports, compare and tests match on it); the message beside
it is the sentence that tells the user how to make the thing run. Producers build the message where
they know the facts (the toolchain probe, the runner, the container tools); the codes live here.
Standard library only: nox, the container tools and the report import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Reason:
    """Why something did not run (or failed): a machine-readable code and the sentence for a human."""

    code: Code
    message: str


class Code(StrEnum):
    # prerequisites of the host (lab.host.toolchain)
    NO_CUDA = "no_cuda"
    NO_TRITON = "no_triton"
    NO_CXX_COMPILER = "no_cxx_compiler"
    COMPILER_NOT_ON_PATH = "compiler_not_on_path"
    NO_PYTHON_HEADERS = "no_python_headers"
    NO_OPENSSL = "no_openssl"
    DRIVER_TOO_OLD = "driver_too_old"  # lab.host.driver: the NVIDIA driver cannot run the build's CUDA version
    WINDOWS_HOST_REQUIRED = "windows_host_required"
    LINUX_HOST_REQUIRED = "linux_host_required"
    # the runner
    EXCEPTION = "exception"
    CHECK_FAILED = "check_failed"
    CHILD_DIED = "child_died"
    NOT_IMPLEMENTED = "not_implemented"
    # parts of an experiment (ctx.skip)
    FLAG_OFF = "flag_off"
    PROFILE_BUDGET = "profile_budget"
    DISABLED_IN_PROFILE = "disabled_in_profile"
    NOT_ON_THIS_DEVICE = "not_on_this_device"
    NOT_APPLICABLE = "not_applicable"
    NOT_MEASURED = "not_measured"
    NO_TIMINGS = "no_timings"
    NO_PEAK = "no_peak"
    COMPILE_FAILED = "compile_failed"
    NOT_IN_THIS_TORCH = "not_in_this_torch"  # a switch (e.g. an Inductor config name) the installed torch lacks
    DEPTH_EXCEEDS_MODEL = "depth_exceeds_model"
    NO_TLPARSE = "no_tlparse"  # compile traces: tlparse not on PATH (the structured trace summary is kept instead)
    # containers (lab.containers)
    NO_DOCKER = "no_docker"
    DOCKER_DAEMON_UNREACHABLE = "docker_daemon_unreachable"
    IMAGE_MISSING = "image_missing"
    NO_NVIDIA_CONTAINER_TOOLKIT = "no_nvidia_container_toolkit"
    HOST_REQUESTED = "host_requested"
    BASE_IMAGE_UNAVAILABLE = "base_image_unavailable"
    BUILD_FAILED = "build_failed"
    NO_DEBOOTSTRAP = "no_debootstrap"
    NEEDS_ROOT = "needs_root"
    NO_DEBIAN_MIRROR = "no_debian_mirror"
    DEBOOTSTRAP_FAILED = "debootstrap_failed"
    IMPORT_FAILED = "import_failed"
    # the run's own fate (lab.run.runner) and the compiler probe (lab.host.toolchain)
    INTERRUPTED = "interrupted"  # the run was stopped (Ctrl-C, SIGTERM, a runner error) before this finished
    STOP_AFTER = "stop_after"  # a start ended at its --stop-after budget, between experiments (run.starts[].stop)
    COMPILER_BROKEN = "compiler_broken"  # a compiler was found but cannot compile and run a tiny program
    CXX_NOT_FOUND = "cxx_not_found"  # $CXX (or $CC) names a compiler that does not exist
    INDUCTOR_CACHE_UNWRITABLE = "inductor_cache_unwritable"  # the cache directory every compile writes is read-only
