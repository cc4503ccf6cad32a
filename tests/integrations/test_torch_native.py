"""The C++ launch path's packing (``tiledispatch/integrations/torch_native.py``), on CPU.

For every family × direction × ndim case of the kernel tests and the real model cases: the
parameter buffer the extension receives, with the call's pointers patched in where the plan says
(as ``native_launch.cpp`` does), decodes to exactly the arguments Triton's runner gets from the Python
path (``LaunchPlan.run``) for the same tensors, non-constexpr parameters in order, then the two
scratch pointers; grids, block sizes and zero-filled byte ranges match too. What cannot run there is
refused with the reason. The C++ source is compiled (syntax and types) against the installed torch
headers. The GPU side (``test_torch_native_gpu.py``) runs it.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.kernels.cases import MODEL_CASES, model_case
from tests.kernels.test_launch_plan import _all_cases, _problem_config, stand_in_loader

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

FUNCTION = 0x5EED


class FakeBinary:
    """A registry binary as the packer sees it (Triton's ``src``, ``metadata``, ``function``) that,
    called through ``binary[grid](*args)`` as the Python path does, records (program, grid, args)."""

    def __init__(self, name, program, log, **metadata):
        from tiledispatch.native.registry import _source

        self.name, self.log = name, log
        self.src = _source(program)
        fields = {"num_warps": program.num_warps, "shared": 1024, "num_ctas": 1, "global_scratch_size": 0,
                  "global_scratch_align": 1, "profile_scratch_size": 0, "launch_cooperative_grid": False,
                  "launch_pdl": False}
        fields.update(metadata)
        self.metadata = SimpleNamespace(**fields)
        self.function = None

    def _init_handles(self):
        self.function = FUNCTION

    def __getitem__(self, grid):
        def record(*args):
            self.log.append((self.name, tuple(grid),
                             tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)))
        return record


def fake_loader(log, **metadata):
    return stand_in_loader(log, lambda name, program, calls: FakeBinary(name, program, calls, **metadata))


@pytest.fixture
def compiled_on_cpu(monkeypatch):
    from tiledispatch.native import launch

    monkeypatch.setitem(launch._DEVICE_TYPE, launch.Backend.COMPILED, "cpu")


def _pytorch_operand(shape, dtype, weight):
    from tiledispatch.native import launch

    pytorch = launch.pytorch_shape(tuple(shape), weight=weight)
    fmt = torch.channels_last if len(pytorch) == 4 else torch.channels_last_3d
    return torch.empty(pytorch, dtype=dtype).contiguous(memory_format=fmt)


def _decode(spec_launch, pointers, signature_types):
    """What the kernel receives from a packed launch: the buffer with pointers patched (as the C++
    does), read at each parameter's offset as its type (pointers as 8-byte integers)."""
    function, grid, threads, shared, data, offsets, patches, scratch, fills = spec_launch
    buffer = bytearray(data)
    for at, slot, offset in patches:
        buffer[at:at + 8] = struct.pack("=Q", pointers[slot] + offset)
    from tiledispatch.integrations.torch_native import _POINTER, _SCALAR_FORMATS

    values = []
    for kind, offset in zip(signature_types + ["*scratch", "*scratch"], offsets):
        fmt = _POINTER if kind.startswith("*") else _SCALAR_FORMATS[kind]
        values.append(struct.unpack_from("=" + fmt, buffer, offset)[0])
    return values


@pytest.mark.parametrize("spec", _all_cases())
def test_packed_parameters_are_what_the_runner_gets(spec, compiled_on_cpu):
    from tiledispatch.integrations import torch_native
    from tiledispatch.native import launch

    prob, config = _problem_config(spec)
    log: list = []
    plan = launch.build_plan(prob, config, "compiled", fake_loader(log))
    assert not plan.untraced
    dtype = launch.torch_dtype(prob.dtype)
    weights = [weight for _, weight in launch._OPERANDS[prob.direction]]
    first, second = (_pytorch_operand(shape, dtype, weight)
                     for shape, weight in zip(prob.operand_shapes[:2], weights[:2]))
    workspaces = []
    real_empty = torch.empty

    def empty(*args, **kwargs):  # the workspace the Python path allocates: kept, to know its pointer
        tensor = real_empty(*args, **kwargs)
        if kwargs.get("dtype") is torch.float32 and len(args) == 1 and args[0] == plan.workspace_elements:
            workspaces.append(tensor)
        return tensor

    torch.empty = empty
    try:
        result = plan.run(first, second)
    finally:
        torch.empty = real_empty
    pointers = [first.data_ptr(), second.data_ptr(), result.data_ptr(),
                workspaces[0].data_ptr() if plan.workspace_elements else 0]
    spec_args = torch_native.plan_spec(plan, 0)
    name, device, dtype_name, is_3d, shapes, names, workspace_elements, packed = spec_args
    assert (device, dtype_name, is_3d, workspace_elements) == (0, prob.dtype.value, prob.ndim == 3,
                                                                plan.workspace_elements)
    assert shapes == [list(s.pytorch) for s in plan.operands] and names == [s.name for s in plan.operands]
    launches = [planned for planned in plan.launches if not planned.empty]
    assert len(packed) == len(launches) == len(log) and log
    tensors = plan._grouped(first, True, second, True, result, True, workspaces[0] if workspaces else None)
    for planned, spec_launch, (program, grid, args) in zip(launches, packed, log):
        binary = plan.binaries[program]
        assert planned.program == program and list(grid) == spec_launch[1]
        assert spec_launch[0] == FUNCTION and spec_launch[2] == 32 * binary.metadata.num_warps
        assert spec_launch[3] == binary.metadata.shared
        kept = [(arg, kind) for arg, kind in zip(args, (binary.src.signature[n] for n in binary.src.fn.arg_names))
                if kind != "constexpr"]
        decoded = _decode(spec_launch, pointers, [kind for _, kind in kept])
        expected = [arg for arg, _ in kept] + [0, 0]
        assert decoded == pytest.approx(expected, rel=0, abs=0) if not any(k.startswith("fp") for _, k in kept) \
            else decoded == pytest.approx(expected, rel=1e-7)
        # the zero fills: the same byte ranges the Python path zeroes
        want = []
        for ref in planned.zero_fill:
            tensor = launch._bind(ref, tensors)
            assert tensor.is_contiguous()
            want.append([ref.slot, tensor.data_ptr() - pointers[ref.slot], tensor.numel() * tensor.element_size()])
        assert spec_launch[8] == want


def test_scratch_and_pointer_positions(compiled_on_cpu):
    """A kernel that needs Triton's global scratch gets ``grid × size`` bytes at the first trailing
    pointer; pointers sit 8-byte aligned after 4-byte integers."""
    from tiledispatch.integrations import torch_native
    from tiledispatch.native import launch

    label, _, _ = MODEL_CASES[0]
    prob, config = model_case(label)
    plan = launch.build_plan(prob, config, "compiled", fake_loader([], global_scratch_size=128,
                                                                   global_scratch_align=64))
    packed = torch_native.plan_spec(plan, 1)[-1]
    assert packed
    for _, grid, _, _, data, offsets, patches, scratch, _ in packed:
        assert scratch == [offsets[-2], grid[0] * grid[1] * grid[2] * 128, 64]
        assert all(at % 8 == 0 for at, _, _ in patches) and offsets[-2] % 8 == 0
        assert len(data) == offsets[-1] + 8


@pytest.mark.parametrize("metadata, reason", [
    ({"num_ctas": 2}, "num_ctas 2"),
    ({"launch_cooperative_grid": True}, "cooperative"),
    ({"profile_scratch_size": 64}, "profile scratch"),
])
def test_launches_the_cpp_path_cannot_run_are_refused(metadata, reason, compiled_on_cpu):
    from tiledispatch.integrations import torch_native
    from tiledispatch.native import launch

    prob, config = model_case(MODEL_CASES[0][0])
    plan = launch.build_plan(prob, config, "compiled", fake_loader([], **metadata))
    with pytest.raises(torch_native.PackError, match=reason):
        torch_native.plan_spec(plan, 0)


def test_plans_other_than_traced_registry_ones_are_refused(compiled_on_cpu, monkeypatch):
    from tiledispatch.integrations import torch_native
    from tiledispatch.native import launch

    prob, config = model_case(MODEL_CASES[0][0])
    with pytest.raises(torch_native.PackError, match="backend interpret"):
        torch_native.plan_spec(launch.build_plan(prob, config, "interpret"), 0)
    template = launch.template_for(config)
    monkeypatch.setattr(type(template), "plan", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no meta")))
    untraced = launch.build_plan(prob, config, "compiled", fake_loader([]))
    with pytest.raises(torch_native.PackError, match="untraced plan"):
        torch_native.plan_spec(untraced, 0)


def test_unknown_parameter_types_are_refused(compiled_on_cpu):
    from tiledispatch.integrations import torch_native
    from tiledispatch.native import launch

    prob, config = model_case(MODEL_CASES[0][0])
    plan = launch.build_plan(prob, config, "compiled", fake_loader([]))
    binary = plan.binaries[plan.launches[0].program]
    name = next(n for n in binary.src.fn.arg_names if binary.src.signature[n] == "i32")
    binary.src.signature[name] = "nvTmaDesc"
    with pytest.raises(torch_native.PackError, match=f"parameter {name} of type nvTmaDesc"):
        torch_native.plan_spec(plan, 0)


def test_without_cuda_the_python_path_serves(monkeypatch, runtime_factory):
    from tiledispatch.integrations import torch_native

    torch_native.reset()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_native.extension() is None and torch_native.status()["reason"] == "no CUDA device"
    torch_native.reset()
    monkeypatch.setenv(torch_native.ENABLE_ENV, "0")
    assert torch_native.extension() is None
    assert torch_native.status() == {"enabled": False, "built": False, "reason": "TILEDISPATCH_TORCH_NATIVE=0",
                                     "plans": 0, "refused": []}
    torch_native.reset()
    runtime = runtime_factory()
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 1, 3, 3)
    assert runtime.native_conv(x, w, 4, (1, 1), (1, 1), (1, 1), (1, 1), True, True) is None


def _torch_include_dirs():
    from torch.utils import cpp_extension

    return cpp_extension.include_paths()


@pytest.mark.slow
def test_extension_source_compiles(tmp_path):
    """``native_launch.cpp`` against the installed torch's headers (syntax and types; linking needs
    CUDA's torch libraries, which the GPU tests do). CPU builds of torch ship c10/cuda's headers
    without the generated ``cuda_cmake_macros.h``; an empty one stands in for it here."""
    from tiledispatch.integrations import torch_native

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    import triton

    stub = tmp_path / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
    cuda_headers = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    includes = [*_torch_include_dirs(), str(tmp_path), str(cuda_headers), sysconfig.get_paths()["include"]]
    command = [compiler, "-std=c++20", "-fsyntax-only", "-Wall", "-Werror=return-type",
               f"-DTORCH_EXTENSION_NAME={torch_native.EXTENSION_NAME}",
               *[f"-I{d}" for d in includes], str(torch_native.SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LC_ALL": "C"})
    errors = [line for line in done.stderr.splitlines() if "native_launch.cpp" in line and "error" in line]
    assert done.returncode == 0, "\n".join(errors) or done.stderr[-4000:]


def test_fastest_times_ours_on_the_cpp_path_where_it_serves(monkeypatch, runtime_factory):
    """A direction's ``fastest`` decision times ours as it will run: the C++ path's run of the entry's
    plan for registry binaries on CUDA once the extension is built, else the Python launch."""
    from tiledispatch.integrations import torch_native
    from tiledispatch.integrations.torch_runtime import Entry

    runtime = runtime_factory()
    ran = []

    class Extension:
        def run(self, first, second, plan):
            ran.append(plan)
            return "cpp result"

    class CudaTensor:
        is_cuda = True

        def get_device(self):
            return 0

    monkeypatch.setattr(torch_native, "_tried", True)
    monkeypatch.setattr(torch_native, "_extension", Extension())
    monkeypatch.setattr(torch_native, "plan_id", lambda plan, device: 42 if device == 0 else None)
    monkeypatch.setattr(runtime, "_launch", lambda entry, first, second: "python result")
    compiled = Entry(None, None, "compiled", plan=object())
    ours, path = runtime._ours_for_timing(compiled, CudaTensor(), CudaTensor())
    assert (path, ours(), ran) == ("cpp", "cpp result", [42])
    ours, path = runtime._ours_for_timing(Entry(None, None, "jit", plan=object()), CudaTensor(), CudaTensor())
    assert (path, ours()) == ("python", "python result")
    monkeypatch.setattr(torch_native, "plan_id", lambda plan, device: None)  # a plan the C++ path refused
    assert runtime._ours_for_timing(compiled, CudaTensor(), CudaTensor())[1] == "python"
    monkeypatch.setattr(torch_native, "_extension", None)  # not built
    assert runtime._ours_for_timing(compiled, CudaTensor(), CudaTensor())[1] == "python"


def test_torch_ext_build_command_says_why_without_cuda(monkeypatch, capsys, tmp_path):
    from tiledispatch.cli import main
    from tiledispatch.integrations import torch_native

    for name in ("_extension", "_unavailable", "_tried"):
        monkeypatch.setattr(torch_native, name, getattr(torch_native, name))
    torch_native.reset()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(torch_native.EXT_DIR_ENV, raising=False)
    assert main(["torch-ext", "build", "--dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert '"built": false' in out and str(tmp_path) in out
    assert "not built: no CUDA device" in err
    with pytest.raises(SystemExit):
        main(["torch-ext", "rebuild"])
