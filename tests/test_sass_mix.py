"""bench/sass_mix.py's loop finding on hand-written SASS (no compiler, no GPU)."""

from __future__ import annotations

from bench.sass_mix import innermost_loops, loops

# (address, opcode, operands): an index loop 0x10-0x30, then a main loop 0x40-0xa0 holding an inner loop 0x60-0x80.
CODE = [
    (0x00, "MOV", "R0, RZ"),
    (0x10, "IMAD", "R1, R1, R2, RZ"),
    (0x20, "ISETP", "P0, PT, R1, R3, PT"),
    (0x30, "BRA", "0x10"),
    (0x40, "HGMMA", "..."),
    (0x50, "LDGSTS", "..."),
    (0x60, "FFMA", "R4, R5, R6, R4"),
    (0x70, "FFMA", "R7, R5, R6, R7"),
    (0x78, "FFMA", "R8, R5, R6, R8"),
    (0x80, "BRA", "0x60"),
    (0x90, "BAR", "SYNC"),
    (0xa0, "BRA", "0x40"),
    (0xb0, "BRA", "0xc0"),  # a forward branch closes no loop
    (0xc0, "EXIT", ""),
]


def test_every_backward_branch_closes_a_loop_with_its_opcode_counts():
    found = loops(CODE)
    assert [(start, end) for start, end, _ in found] == [(0x10, 0x30), (0x60, 0x80), (0x40, 0xa0)]
    assert found[1][2] == {"FFMA": 3, "BRA": 1}
    assert sum(found[2][2].values()) == 8


def test_innermost_loops_hold_no_other_loop_longest_first():
    inner = innermost_loops(loops(CODE))
    assert [(start, end) for start, end, _ in inner] == [(0x60, 0x80), (0x10, 0x30)]  # 4 instructions, then 3
    assert innermost_loops(loops(CODE[:4])) == loops(CODE[:4])
    assert innermost_loops([]) == []
