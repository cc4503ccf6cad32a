"""Probe (CPU, no GPU needed): what holds the registers of gwalk's backward-weight walk.

Why: on the dev suite's grouped layers where backward-weight misses 1.5× cuDNN (C/G 8–32), the best kernels are
latency-bound in one wave or less (Nsight Compute, ``bench/results/2026-11-28_h200_s30/``). ``gwalk_16x16x64``
compiles to 115 registers, so 4 four-warp programs fit an SM, although shared memory would allow 8. This compiles its
``main`` program for sm_90, as the registry does, in four forms and prints each one's registers, spilled bytes and
shared memory:

* ``shipped``: the kernel as built;
* ``budget N``: the same source under a ptxas register budget (``Program.max_registers``);
* ``reload``: a 4-row walk re-loads each gradient tile at every use instead of keeping four;
* ``unmasked``: the gradient load without its per-element mask. This build is for counting only: it would read out
  of bounds.

The two source forms are the kernel's own source with one statement block replaced. The probe refuses to run if that
block is no longer in the source.

Result (session 33, Triton 3.6.0, ptxas of its bundled CUDA):

* shipped: 115 registers;
* budgets of 96 / 80 / 64: spills of 8 / 48 / 120 bytes;
* reload: 128 registers (the dot operands already go through shared memory);
* unmasked: 92 registers.

The per-element mask of the gradient's 2D gather is a large share of the registers.

Usage: ``PYTHONPATH=. python bench/gpu/gwalk_register_probe.py [--kernel NAME] [--budgets 96,80,64]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import inspect
import sys
import tempfile
from pathlib import Path

KERNEL = "gconv_bwd_weight_bf16_2d_gwalk_16x16x64_w4_s1_gm4_sk16_mg1_v8_i32"

_HELD_WALK = ("                held = held + (tl.load(dy_ptr + (dy_lane + step * OUT_W * K_TOTAL)[None, :] + "
              "a_row[:, None],\n                                       mask=a_ok, other=0.0),)")
_UNMASKED = ("                held = held + (tl.load(dy_ptr + (dy_lane + step * OUT_W * K_TOTAL)[None, :] + "
             "a_row[:, None]),)")
_RELOAD_FROM = "        for step in tl.static_range(ROWS + 2 if ROWS > 1 else 0):"
_RELOAD_TO = "    _store_walk(out_ptr,"
_RELOAD = '''        for step in tl.static_range(ROWS + 2 if ROWS > 1 else 0):
            ih = oh0 - PAD_H + step
            b = tl.load(x_pix[:, None] + ih * IN_W * C_TOTAL + cs[None, :],
                        mask=(pix_ok & (ih >= 0) & (ih < IN_H))[:, None] & c_ok[None, :], other=0.0)
            for i in tl.static_range(ROWS):
                if step - i >= 0 and step - i < 3:
                    ow = iw[None, :] + PAD_W - s[:, None]
                    a_ok = (k_ok[:, None] & (pix_ok & (oh0 + i < OUT_H))[None, :]) & (ow >= 0) & (ow < OUT_W)
                    a = tl.load(dy_ptr + (dy_lane + i * OUT_W * K_TOTAL)[None, :] + a_row[:, None], mask=a_ok,
                                other=0.0)
                    if step - i == 0:
                        acc0 = tl.dot(a, b, acc0)
                    elif step - i == 1:
                        acc1 = tl.dot(a, b, acc1)
                    else:
                        acc2 = tl.dot(a, b, acc2)

'''


def _variant(source: str, name: str, folder: Path):
    """The kernel module's source with one block replaced, imported from ``folder``; its jit function."""
    if name == "unmasked":
        if _HELD_WALK not in source:
            raise SystemExit("gwalk_bwd_weight.py no longer has the gradient load this probe replaces")
        patched = source.replace(_HELD_WALK, _UNMASKED)
    else:
        if _RELOAD_FROM not in source or _RELOAD_TO not in source:
            raise SystemExit("gwalk_bwd_weight.py no longer has the walk this probe replaces")
        start, end = source.index(_RELOAD_FROM), source.index(_RELOAD_TO)
        patched = source[:start] + _RELOAD + source[end:]
    path = folder / f"gwalk_{name}.py"
    path.write_text(patched)
    spec = importlib.util.spec_from_file_location(f"gwalk_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Triton reads the function's source through its module
    spec.loader.exec_module(module)
    return module._gwalk_bwd_weight_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default=KERNEL, help="a gwalk backward-weight kernel name with a 4-row walk")
    parser.add_argument("--budgets", default="96,80,64", help="comma-separated ptxas register budgets")
    args = parser.parse_args()

    import triton

    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.kernels import gwalk_bwd_weight
    from tiledispatch.native.launch import template_for
    from tiledispatch.native.registry import _resource_usage, _source, target_for

    config = parse_kernel_name(args.kernel)
    program = template_for(config).programs(config)["main"]
    source = inspect.getsource(gwalk_bwd_weight)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        forms = [("shipped", program)]
        forms += [(f"budget {cap}", dataclasses.replace(program, max_registers=int(cap)))
                  for cap in args.budgets.split(",") if cap]
        forms += [(name, dataclasses.replace(program, fn=_variant(source, name, folder)))
                  for name in ("reload", "unmasked")]
        print(f"{args.kernel} (main program, sm_90)")
        for label, form in forms:
            compiled = triton.compile(_source(form), target=target_for("sm_90"), options=form.compile_options())
            cubin = folder / "kernel.cubin"
            cubin.write_bytes(compiled.asm["cubin"])
            registers, stack, local = _resource_usage(cubin)
            print(f"  {label:10s} registers {registers:3d}  spilled bytes {stack + local:4d}  "
                  f"shared memory {compiled.metadata.shared} B", flush=True)


if __name__ == "__main__":
    main()
