"""How many programs of a compiled kernel the device holds at once: what a grid barrier may rely on (the persistent
kernel, lab.step.fused.persistent) and where a grid's second wave begins (the L2 prefetch ahead, lab.step.fused.l2)."""

from __future__ import annotations

import math
import torch

from lab.step.fused.launch import Launch


def occupancy(n_regs: int, shared_bytes: int, num_warps: int, regs_per_sm: int = 65536,
              shared_per_sm: int = 228 * 1024, max_warps: int = 64, max_blocks: int = 32) -> int:
    """Programs of a compiled kernel one SM holds at once (registers allocated per warp in units of 256, Hopper's
    limits by default): what a grid barrier may rely on."""
    per_warp = math.ceil(max(n_regs, 1) * 32 / 256) * 256
    by_regs = regs_per_sm // (per_warp * num_warps)
    by_shared = shared_per_sm // shared_bytes if shared_bytes > 0 else max_blocks
    return max(0, min(by_regs, by_shared, max_warps // num_warps, max_blocks))


def max_programs(launch: Launch, sms: int) -> tuple[int, str]:
    """How many programs of `launch`'s kernel the device holds at once, from its compiled registers and shared
    memory and the device's limits as torch reports them, and how that was found."""
    props = torch.cuda.get_device_properties(launch.args[0].device)
    compiled = launch.kernel.warmup(*launch.args, grid=launch.grid, **launch.meta)
    compiled._init_handles()  # loads the cubin: what sets n_regs (Triton 3.6 fills it lazily)
    per_sm = occupancy(int(compiled.n_regs), int(compiled.metadata.shared), int(launch.meta["num_warps"]),
                       int(getattr(props, "regs_per_multiprocessor", 65536)),
                       int(getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)),
                       int(getattr(props, "max_threads_per_multi_processor", 2048)) // 32)
    return per_sm * sms, (f"{compiled.n_regs} registers a thread, {compiled.metadata.shared} B shared, "
                          f"{launch.meta['num_warps']} warps: {per_sm} programs an SM x {sms} SMs")
