"""The C++ launch path of eager calls (``csrc/native_launch.cpp``): a swapped layer's forward and
backward without Python per call.

Why: a batch-32 training step of a grouped or depthwise network is host-bound (its eager step takes
1.8–4.5× its CUDA-graph replay on an H200), so every microsecond a swapped layer spends in Python is
step time. The Python path of a call (``EagerConv``: autograd.Function, the runtime's route lookup,
``LaunchPlan.run``'s checks, Triton's Python runner per launch) costs more host time than PyTorch's
own convolution; this path moves all of it to C++: a launch plan is packed once per (plan, device)
and registered with the extension, and :func:`conv` is one pybind call into a C++
``torch::autograd::Function`` whose forward and backward check the operands, allocate from PyTorch's
caching allocator and ``cuLaunchKernel`` the registry's binaries on the current stream.

Packing a launch (:func:`pack_launch`), the kernel's parameters as Triton's launcher passes them:
every parameter whose signature type is not ``constexpr``, in definition order, at its natural
alignment (pointers 8 bytes; ``i32`` 4; ``fp32`` as its 4 bytes; …), then Triton's two trailing
scratch pointers (global scratch: ``grid × global_scratch_size`` bytes from the caching allocator when
the kernel needs it, e.g. device-side TMA descriptors; profile scratch: null). The call's data
pointers are patched in at the positions the plan recorded (:class:`~tiledispatch.native.launch.PlannedLaunch`
``pointers``), zero fills become ``cuMemsetD8Async`` of byte ranges.

Used when: CUDA tensors, the ``compiled`` backend (registry binaries), a traced plan (its arguments
fixed by the problem), every direction the call needs routed to our kernels, and the extension
built (``torch.utils.cpp_extension``, once per machine and torch version, into
``$TILEDISPATCH_TORCH_EXT_DIR`` or ``~/.cache/tiledispatch/torch_ext``; a failed build is logged once
and the Python path serves). ``TILEDISPATCH_TORCH_NATIVE=0`` turns the path off. Results are the
same bytes as the Python path's (same binaries, same arguments); ``tests/integrations/test_torch_native*.py``
checks both.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("tiledispatch.integrations")

ENABLE_ENV = "TILEDISPATCH_TORCH_NATIVE"
EXT_DIR_ENV = "TILEDISPATCH_TORCH_EXT_DIR"
SOURCE = Path(__file__).resolve().parent / "csrc" / "native_launch.cpp"
EXTENSION_NAME = "tiledispatch_native"

#: struct formats of Triton's scalar parameter types (``ty_to_cpp`` of Triton's CUDA launcher;
#: floats are passed as their own bytes, fp32 as 4).
_SCALAR_FORMATS = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H",
                   "u32": "I", "u64": "Q", "fp16": "e", "fp32": "f", "f32": "f", "fp64": "d"}
_POINTER = "Q"

_state_lock = threading.Lock()
_extension: Any = None
_unavailable = ""          # why the extension is not used ("" while it is, or not tried yet)
_tried = False
_built: Any = None         # the loaded module, kept across reset()
_plan_ids: dict[tuple[Any, int], int | str] = {}   # (plan, device) -> plan id, or the reason it is not eligible


class PackError(ValueError):
    """A launch that the C++ path cannot run (the Python path serves it); the message says why."""


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def build_directory() -> Path:
    import torch

    base = os.environ.get(EXT_DIR_ENV) or str(Path.home() / ".cache" / "tiledispatch" / "torch_ext")
    tag = f"torch{torch.__version__}".replace("+", "_").replace(".", "_")
    return Path(base) / tag


def extension() -> Any:
    """The built extension module, or None (path off, no CUDA, or the build failed: logged once;
    :func:`status` says why). Built on first use."""
    global _extension, _unavailable, _tried
    if _tried:
        return _extension
    with _state_lock:
        if _tried:
            return _extension
        _extension, _unavailable = _load()
        _tried = True
        if _extension is None:
            log.info("tiledispatch: eager calls use the Python launch path (%s)", _unavailable)
    return _extension


def _load() -> tuple[Any, str]:
    if not enabled():
        return None, f"{ENABLE_ENV}=0"
    import torch

    if not torch.cuda.is_available():
        return None, "no CUDA device"
    global _built
    if _built is not None:  # loaded once per process (a second load would re-run the module's init)
        return _built, ""
    try:
        from torch.utils import cpp_extension

        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        module = cpp_extension.load(name=EXTENSION_NAME, sources=[str(SOURCE)], build_directory=str(directory),
                                    extra_cflags=["-O2"], with_cuda=True, verbose=False)
    except Exception as error:  # noqa: BLE001 - any build failure: the Python path serves, said once
        log.warning("tiledispatch: the C++ launch path did not build (%s: %s); eager calls use the Python path",
                    type(error).__name__, str(error).splitlines()[0] if str(error) else "")
        return None, f"build failed: {type(error).__name__}"
    _built = module
    return module, ""


def status() -> dict[str, Any]:
    """Whether the C++ path is in use, why not, and how many plans it holds / refused."""
    ids = list(_plan_ids.values())
    return {"enabled": enabled(), "built": _extension is not None, "reason": _unavailable,
            "plans": sum(isinstance(v, int) for v in ids), "refused": sorted({v for v in ids if isinstance(v, str)})}


def reset() -> None:
    """Forget the registered ids (tests; the extension's plans stay, unreferenced) and the load attempt."""
    global _extension, _unavailable, _tried
    with _state_lock:
        _plan_ids.clear()
        _extension, _unavailable, _tried = None, "", False


# ---- packing ---------------------------------------------------------------------------------------
def _align(offset: int, size: int) -> int:
    return -(-offset // size) * size


def pack_launch(planned: Any, binary: Any, workspace_elements: int, operand_bytes: tuple[int, int, int]) -> tuple:
    """One :class:`~tiledispatch.native.launch.PlannedLaunch` as the extension's launch spec:
    ``(function, grid, threads, shared bytes, parameter bytes, parameter offsets, patches, scratch,
    zero fills)`` (see ``register_plan`` in the C++ source). ``binary``: its Triton ``CompiledKernel``
    (``src.signature``, ``metadata``, ``function`` once loaded); ``operand_bytes``: byte sizes of
    the first, second and result tensors (for whole-tensor zero fills). Raises :class:`PackError`."""
    metadata = binary.metadata
    if getattr(metadata, "num_ctas", 1) != 1:
        raise PackError(f"{planned.program}: num_ctas {metadata.num_ctas} (thread-block clusters)")
    if getattr(metadata, "launch_cooperative_grid", False) or getattr(metadata, "launch_pdl", False):
        raise PackError(f"{planned.program}: cooperative or programmatic-dependent launch")
    if getattr(metadata, "profile_scratch_size", 0):
        raise PackError(f"{planned.program}: profile scratch")
    names = binary.src.fn.arg_names
    signature = binary.src.signature
    if len(names) != len(planned.full):
        raise PackError(f"{planned.program}: {len(planned.full)} arguments for {len(names)} parameters")
    patches_at = {position: (slot, offset) for position, slot, offset in planned.pointers}
    data = bytearray()
    offsets: list[int] = []
    patches: list[list[int]] = []
    for position, name in enumerate(names):
        kind = signature[name]
        if kind == "constexpr":
            continue
        value = planned.full[position]
        if kind.startswith("*"):
            fmt = _POINTER
            if position in patches_at:
                slot, byte_offset = patches_at[position]
                patches.append([_align(len(data), 8), slot, byte_offset])
                value = 0
            elif value is None:
                value = 0  # a null pointer argument (an absent optional operand)
            elif not isinstance(value, int):
                raise PackError(f"{planned.program}: pointer parameter {name} gets {type(value).__name__}")
        elif kind in _SCALAR_FORMATS:
            fmt = _SCALAR_FORMATS[kind]
            if value is None:
                raise PackError(f"{planned.program}: parameter {name} has no value")
        else:
            raise PackError(f"{planned.program}: parameter {name} of type {kind}")
        size = struct.calcsize(fmt)
        start = _align(len(data), size)
        data.extend(b"\0" * (start - len(data)))
        try:
            data.extend(struct.pack("=" + fmt, value))
        except struct.error as error:
            raise PackError(f"{planned.program}: parameter {name} ({kind}) = {value!r}: {error}") from None
        offsets.append(start)
    scratch_size = getattr(metadata, "global_scratch_size", 0) or 0
    scratch = [-1, 0, 1]
    for trailing in ("global_scratch", "profile_scratch"):
        start = _align(len(data), 8)
        data.extend(b"\0" * (start - len(data)) + struct.pack("=Q", 0))
        offsets.append(start)
        if trailing == "global_scratch" and scratch_size:
            grid_size = planned.grid[0] * planned.grid[1] * planned.grid[2]
            scratch = [start, grid_size * scratch_size, getattr(metadata, "global_scratch_align", 1) or 1]
    fills = []
    for ref in planned.zero_fill:
        fills.append(list(_fill_range(ref, workspace_elements, operand_bytes)))
    binary._init_handles()
    return (int(binary.function), list(planned.grid), 32 * metadata.num_warps, metadata.shared, bytes(data),
            offsets, patches, scratch, fills)


def _fill_range(ref: Any, workspace_elements: int, operand_bytes: tuple[int, int, int]) -> tuple[int, int, int]:
    """(slot, byte offset, bytes) of a zero fill: a whole slot, or a contiguous view of one."""
    from tiledispatch.native.launch import WORKSPACE

    if ref.view is None:
        total = workspace_elements * 4 if ref.slot == WORKSPACE else operand_bytes[ref.slot]
        return ref.slot, ref.offset, total
    dtype, shape, strides = ref.view
    expected, contiguous = 1, True
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            contiguous = False
        expected *= size
    if not contiguous:
        raise PackError(f"zero fill of a non-contiguous view {shape} / {strides}")
    count = 1
    for size in shape:
        count *= size
    return ref.slot, ref.offset, count * dtype.itemsize


def plan_spec(plan: Any, device_index: int) -> tuple:
    """``register_plan``'s arguments for a :class:`~tiledispatch.native.launch.LaunchPlan` on one
    device. Raises :class:`PackError` for a plan the C++ path cannot run."""
    from tiledispatch.native.launch import Backend

    if plan.backend is not Backend.COMPILED:
        raise PackError(f"backend {plan.backend.value} (the C++ path runs registry binaries)")
    if plan.untraced:
        raise PackError(f"untraced plan ({plan.untraced})")
    if plan.grid_error:
        raise PackError(plan.grid_error)
    if plan.unsupported:
        raise PackError(f"unsupported problem ({plan.unsupported})")
    itemsize = plan.problem.dtype.itemsize
    operand_bytes = tuple(_count(spec.grouped) * itemsize for spec in plan.operands)
    launches = [pack_launch(planned, plan.binaries[planned.program], plan.workspace_elements, operand_bytes)
                for planned in plan.launches if not planned.empty]
    return (f"{plan.config.name} on {plan.problem.key}", device_index, plan.problem.dtype.value,
            plan.problem.ndim == 3, [list(spec.pytorch) for spec in plan.operands],
            [spec.name for spec in plan.operands], plan.workspace_elements, launches)


def _count(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def plan_id(plan: Any, device_index: int) -> int | None:
    """The extension's id of ``plan`` on ``device_index`` (registered on first use), or None when the
    extension is not built or the plan cannot run there (the reason is kept for :func:`status`)."""
    key = (plan, device_index)  # a LaunchPlan hashes by identity (and the key keeps it alive)
    found = _plan_ids.get(key)
    if found is not None:
        return found if isinstance(found, int) else None
    ext = extension()
    if ext is None:
        return None
    with _state_lock:
        found = _plan_ids.get(key)
        if found is None:
            try:
                found = ext.register_plan(*plan_spec(plan, device_index))
            except PackError as error:
                found = str(error)
                log.debug("tiledispatch: %s runs on the Python path: %s", plan.config.name, error)
            _plan_ids[key] = found
    return found if isinstance(found, int) else None


def conv(x: Any, weight: Any, bias: Any, plans: tuple[int, int, int]) -> Any:
    """``conv(x, w) + bias`` through the C++ autograd node with ``plans`` from
    :meth:`~tiledispatch.integrations.torch_runtime.Runtime.native_conv` (the extension is built).
    ``bias``: None, or a tensor of ``x``'s dtype and device (:func:`bias_fits`); its gradient is
    ``dY`` summed over N and space, in the node."""
    return _extension.conv(x, weight, bias, *plans)


def run(first: Any, second: Any, plan: int) -> Any:
    """One direction of a registered plan on PyTorch-shaped operands (the result allocated, channels-last)."""
    return _extension.run(first, second, plan)


def bias_fits(bias: Any, x: Any) -> bool:
    """Whether the C++ node can add ``bias`` itself: same dtype and device as ``x`` (else PyTorch adds
    it, with its type promotion)."""
    return bias.dtype == x.dtype and bias.device == x.device


def main(argv: list[str]) -> int:
    """``tiledispatch torch-ext build``: build (or find built) the extension now, so that a training
    run's first steps do not pay the build; prints :func:`status` as JSON. Exit 0 when built, 1 with
    the reason otherwise."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="tiledispatch torch-ext",
                                     description="The PyTorch integration's C++ launch path (torch_native).")
    parser.add_argument("action", choices=["build"])
    parser.add_argument("--dir", help=f"build directory (default ${EXT_DIR_ENV} or ~/.cache/tiledispatch/torch_ext)")
    args = parser.parse_args(argv[1:])
    if args.dir:
        os.environ[EXT_DIR_ENV] = args.dir
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    built = extension() is not None
    print(json.dumps({**status(), "directory": str(build_directory())}))
    if not built:
        print(f"tiledispatch torch-ext: not built: {_unavailable}", file=sys.stderr)
    return 0 if built else 1
