"""Run one registry kernel on one problem, a few times, for Nsight Compute to profile: where a kernel's
time goes (memory throughput, stalls, occupancy) when instruction counts do not explain it.

    ncu --clock-control none --nvtx --nvtx-include "profile/" --launch-count 1 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \\
        python3 bench/profile_kernel.py --registry /tmp/tdwork/registry \\
        --kernel gconv_bwd_weight_bf16_2d_direct_32x32x4_w4_s1_gm1_sk32_mg1_v8_i32 \\
        --problem "bwd_weight|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1"

The timed calls run inside the NVTX range ``profile`` (after one warm-up call); ``--launch-count``
counts every program launch there (a kernel with a split-K reduce or a packing program launches more
than one per call); ``--calls`` runs the kernel that many times (default 3). Without
ncu the script prints the median CUDA-event time of the calls. ``--kernel cudnn`` runs PyTorch's
convolution for the problem instead, as the benchmark calls it: channels-last, ``cudnn.benchmark`` on, so the
warm-up call autotunes outside the NVTX range and the profiled calls run the plan the benchmark times (the range
also leaves out the float64 reference the set-up computes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", type=Path, required=True, help="compiled registry (cache dir)")
    parser.add_argument("--kernel", required=True, help="kernel name, as the registry lists it, or 'cudnn'")
    parser.add_argument("--problem", required=True, help="problem key, as the benchmark writes it")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()

    import torch

    from tiledispatch.native import launch
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem
    from tiledispatch.native.registry import Registry

    problem = ConvProblem.from_key(args.problem)
    if args.kernel == "cudnn":
        from tiledispatch.native.bench import ProblemSetup, _cudnn_call

        torch.backends.cudnn.benchmark = True
        cudnn = _cudnn_call(problem, ProblemSetup(problem, l2_bytes=0, seed=0))

        def call() -> None:
            cudnn(0)
    else:
        config = parse_kernel_name(args.kernel)
        registry = Registry.load(args.registry, args.arch)
        dtype = launch.torch_dtype(problem.dtype)
        first, second = (torch.randn(shape, device="cuda", dtype=dtype) for shape in problem.operand_shapes[:2])
        out = torch.empty(problem.operand_shapes[2], device="cuda", dtype=dtype)

        def call() -> None:
            launch.run(problem, config, first, second, out, backend="compiled", loader=registry.loader())
    call()  # warm-up: loads the binary, and cuDNN picks its plan
    torch.cuda.synchronize()
    times = []
    torch.cuda.nvtx.range_push("profile")  # ncu --nvtx --nvtx-include "profile/": the timed calls only
    for _ in range(max(1, args.calls)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    torch.cuda.nvtx.range_pop()
    print(f"{args.kernel} on {problem.key}: median {statistics.median(times):.1f} us over {len(times)} calls "
          f"(event time, first call included)")


if __name__ == "__main__":
    main()
