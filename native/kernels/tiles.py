"""``@triton.jit`` helpers shared by the tensor-core kernels (inlined by Triton: no call at run time)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program ``pid`` in grouped order: ``GROUP_M`` row tiles sweep every column
    tile before the next ``GROUP_M`` start, so the operand tiles they share stay in L2."""
    pids_in_group = GROUP_M * num_pid_n
    first_m = (pid // pids_in_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % pids_in_group) % group_rows
    pid_n = (pid % pids_in_group) // group_rows
    return pid_m, pid_n
