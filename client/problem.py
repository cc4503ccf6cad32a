"""The problem descriptor on the client side: a small frozen dataclass (no validation here; the
server validates and names the field of anything wrong)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb


@dataclass(frozen=True)
class Problem:
    """One grouped convolution: channel counts are totals over groups; sizes per spatial dim.

    Empty ``stride``/``dilation``/pads mean 1/1/0 in every dimension.
    """

    direction: str
    dtype: str
    batch: int
    groups: int
    in_channels: int
    out_channels: int
    input_size: tuple[int, ...]
    filter_size: tuple[int, ...]
    stride: tuple[int, ...] = field(default=())
    dilation: tuple[int, ...] = field(default=())
    pad_begin: tuple[int, ...] = field(default=())
    pad_end: tuple[int, ...] = field(default=())
    layout: str = "nhwgc"

    def __post_init__(self) -> None:
        for name in ("input_size", "filter_size", "stride", "dilation", "pad_begin", "pad_end"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_proto(self) -> pb.Problem:
        return codec.problem_to_proto({k: v for k, v in self.to_dict().items() if v not in ((), [])})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        return cls(**dict(data))

    @classmethod
    def from_proto(cls, message: pb.Problem) -> Problem:
        return cls.from_dict(codec.problem_from_proto(message))


ProblemLike = Problem | Mapping[str, Any] | pb.Problem


def as_proto(problem: ProblemLike) -> pb.Problem:
    """A ``Problem`` message from a :class:`Problem`, a mapping with its field names, or a message."""
    if isinstance(problem, pb.Problem):
        return problem
    if isinstance(problem, Problem):
        return problem.to_proto()
    if isinstance(problem, Mapping):
        return codec.problem_to_proto(problem)
    raise TypeError(f"problem: expected Problem, a mapping or tiledispatch.v1.Problem, got {type(problem).__name__}")
