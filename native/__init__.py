"""Problem model, kernel config space and rule sets, arch specs, CPU reference, Triton kernels,
registry build and the tile-engine benchmark. Depends on nothing else in tiledispatch."""

from tiledispatch.native.configs import ConfigError, Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType, ProblemClass, ProblemError

__all__ = ["ConfigError", "ConvProblem", "DType", "Direction", "Family", "KernelConfig", "ProblemClass",
           "ProblemError", "parse_kernel_name"]
