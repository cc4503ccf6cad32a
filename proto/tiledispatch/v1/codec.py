"""Hand-written companion of the generated API: enum names and numpy <-> ``Tensor`` encoding.

Both sides of the wire use it (the client, which must stay torch-free, and the server), so it needs
only numpy and the generated messages. bf16 travels as raw 16-bit patterns; numpy has no bf16, so
it is converted here with integer bit operations (round to nearest even, NaN kept NaN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tiledispatch.v1 import tiledispatch_pb2 as pb

# The spellings below are the native package's enum values (``Direction.FORWARD.value == "fwd"``).
DIRECTION_TO_PROTO = {"fwd": pb.DIRECTION_FORWARD, "bwd_data": pb.DIRECTION_BACKWARD_DATA,
                      "bwd_weight": pb.DIRECTION_BACKWARD_WEIGHT}
DIRECTION_FROM_PROTO = {value: key for key, value in DIRECTION_TO_PROTO.items()}
DIRECTION_ALIASES = {"forward": "fwd", "backward_data": "bwd_data", "backward_weight": "bwd_weight",
                     "bwdd": "bwd_data", "bwdw": "bwd_weight"}

DTYPE_TO_PROTO = {"bf16": pb.DATA_TYPE_BF16, "fp16": pb.DATA_TYPE_FP16, "fp32": pb.DATA_TYPE_FP32}
DTYPE_FROM_PROTO = {value: key for key, value in DTYPE_TO_PROTO.items()}
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}

FAMILY_TO_PROTO = {"igemm": pb.FAMILY_IGEMM, "gmerge": pb.FAMILY_GMERGE, "gemm1x1": pb.FAMILY_GEMM1X1,
                   "direct": pb.FAMILY_DIRECT, "tma": pb.FAMILY_TMA, "dwroll": pb.FAMILY_DWROLL,
                   "gwalk": pb.FAMILY_GWALK, "dwrow": pb.FAMILY_DWROW,
                   "dwrun": pb.FAMILY_DWRUN, "halo": pb.FAMILY_HALO}
FAMILY_FROM_PROTO = {value: key for key, value in FAMILY_TO_PROTO.items()}

SOURCE_NAMES = {pb.SELECTION_SOURCE_TUNING_DB: "tuning_db", pb.SELECTION_SOURCE_MODEL: "model",
                pb.SELECTION_SOURCE_ANALYTIC: "analytic", pb.SELECTION_SOURCE_AUTOTUNE: "autotune"}
POLICY_TO_PROTO = {"default": pb.SELECTION_POLICY_DEFAULT, "tuning_db_only": pb.SELECTION_POLICY_TUNING_DB_ONLY,
                   "model_only": pb.SELECTION_POLICY_MODEL_ONLY, "analytic_only": pb.SELECTION_POLICY_ANALYTIC_ONLY,
                   "autotune": pb.SELECTION_POLICY_AUTOTUNE}
POLICY_FROM_PROTO = {value: key for key, value in POLICY_TO_PROTO.items()}
POLICY_FROM_PROTO[pb.SELECTION_POLICY_UNSPECIFIED] = "default"
STATUS_NAMES = {pb.MEASUREMENT_STATUS_OK: "ok", pb.MEASUREMENT_STATUS_ERROR: "error",
                pb.MEASUREMENT_STATUS_WRONG: "wrong", pb.MEASUREMENT_STATUS_FAULT: "fault"}
STATUS_TO_PROTO = {value: key for key, value in STATUS_NAMES.items()}
TARGET_NAMES = {pb.EXECUTION_TARGET_GPU: "gpu", pb.EXECUTION_TARGET_CPU_REFERENCE: "cpu_reference"}

#: Wire element type of each dtype (bf16 as its bit pattern); always little-endian.
WIRE_DTYPE = {pb.DATA_TYPE_BF16: np.dtype("<u2"), pb.DATA_TYPE_FP16: np.dtype("<f2"),
              pb.DATA_TYPE_FP32: np.dtype("<f4")}

#: Trailing-metadata key in which the server names the offending field of an INVALID_ARGUMENT.
FIELD_METADATA_KEY = "tiledispatch-field"

PROBLEM_FIELDS = ("direction", "dtype", "batch", "groups", "in_channels", "out_channels", "input_size",
                  "filter_size", "stride", "dilation", "pad_begin", "pad_end", "layout")
_SPATIAL = ("input_size", "filter_size", "stride", "dilation", "pad_begin", "pad_end")


class TensorError(ValueError):
    """A tensor does not match what was expected; ``field`` names it, ``rule`` says what must hold."""

    def __init__(self, field: str, rule: str):
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


# ---- enums ---------------------------------------------------------------------------------------
def direction_to_proto(value: Any) -> int:
    text = str(getattr(value, "value", value)).lower()
    text = DIRECTION_ALIASES.get(text, text)
    if text not in DIRECTION_TO_PROTO:
        raise ValueError(f"direction: must be one of {sorted(DIRECTION_TO_PROTO)}, got {value!r}")
    return DIRECTION_TO_PROTO[text]


def dtype_to_proto(value: Any) -> int:
    text = str(getattr(value, "value", value)).lower()
    text = DTYPE_ALIASES.get(text, text)
    if text not in DTYPE_TO_PROTO:
        raise ValueError(f"dtype: must be one of {sorted(DTYPE_TO_PROTO)}, got {value!r}")
    return DTYPE_TO_PROTO[text]


def family_to_proto(value: Any) -> int:
    text = str(getattr(value, "value", value)).lower()
    if text not in FAMILY_TO_PROTO:
        raise ValueError(f"family: must be one of {sorted(FAMILY_TO_PROTO)}, got {value!r}")
    return FAMILY_TO_PROTO[text]


# ---- problems ------------------------------------------------------------------------------------
def problem_to_proto(problem: Mapping[str, Any]) -> pb.Problem:
    """A ``Problem`` message from a mapping with the native field names (``ConvProblem.to_dict()``).

    Only spells the values; the server validates (and names the field of anything wrong).
    """
    unknown = sorted(set(problem) - set(PROBLEM_FIELDS))
    if unknown:
        raise ValueError(f"{unknown[0]}: is not a problem field (fields: {list(PROBLEM_FIELDS)})")
    message = pb.Problem()
    if problem.get("direction") is not None:
        message.direction = direction_to_proto(problem["direction"])
    if problem.get("dtype") is not None:
        message.dtype = dtype_to_proto(problem["dtype"])
    for name in ("batch", "groups", "in_channels", "out_channels"):
        if problem.get(name) is not None:
            setattr(message, name, int(problem[name]))
    for name in _SPATIAL:
        if problem.get(name) is not None:
            getattr(message, name).extend(int(v) for v in problem[name])
    layout = str(getattr(problem.get("layout"), "value", problem.get("layout")) or "").lower()
    if layout not in ("", "nhwgc", "ndhwgc"):
        raise ValueError(f"layout: only 'nhwgc' (NDHWGC in 3D) exists, got {problem['layout']!r}")
    if layout:
        message.layout = pb.LAYOUT_NHWGC
    return message


def problem_from_proto(message: pb.Problem) -> dict[str, Any]:
    """The mapping back, enum values spelled as the native package spells them; unset or unknown
    enum values come back as ``None`` (the caller decides whether that is an error)."""
    return {
        "direction": DIRECTION_FROM_PROTO.get(message.direction),
        "dtype": DTYPE_FROM_PROTO.get(message.dtype),
        "batch": message.batch,
        "groups": message.groups,
        "in_channels": message.in_channels,
        "out_channels": message.out_channels,
        **{name: list(getattr(message, name)) for name in _SPATIAL},
        "layout": "nhwgc",
    }


# ---- bf16 ----------------------------------------------------------------------------------------
def float_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float values to bf16 (nearest, ties to even) and return the 16-bit patterns."""
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))
    out = rounded.astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():  # rounding could carry a NaN's payload into infinity; keep it a quiet NaN
        out[nan] = np.uint16(0x7FC0) | (out[nan] & np.uint16(0x8000))
    return out


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    """Widen bf16 bit patterns to float32 (exact)."""
    wide = np.asarray(bits, dtype=np.uint16).astype(np.uint32, order="C")  # one new array, shifted in place
    wide <<= np.uint32(16)
    return wide.view(np.float32)


def _enum_name(value: int) -> str:
    return pb.DataType.Name(value) if value in pb.DataType.values() else str(value)


# ---- tensors -------------------------------------------------------------------------------------
def wire_array(array: np.ndarray, dtype: Any) -> tuple[int, np.ndarray]:
    """``(DataType value, array in its little-endian wire type)``; no copy when ``array`` already is
    in it. For bf16 a ``uint16`` array is taken as bit patterns; any other numeric array is rounded."""
    code = dtype if isinstance(dtype, int) else dtype_to_proto(dtype)
    array = np.asarray(array)
    if code == pb.DATA_TYPE_BF16:
        wire = array.astype("<u2", copy=False) if array.dtype == np.uint16 else float_to_bf16_bits(array)
    else:
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise TensorError("tensor", f"must be numeric, got {array.dtype}")
        wire = array.astype(WIRE_DTYPE[code], copy=False)
    return code, wire


def encode_tensor(array: np.ndarray, dtype: Any, *, out: pb.Tensor | None = None) -> pb.Tensor:
    """A ``Tensor`` holding ``array`` in ``dtype`` (a name like "bf16" or a ``DataType`` value).

    For bf16 a ``uint16`` array is taken as bit patterns; any other numeric array is rounded.
    ``out`` fills that message in place (e.g. ``request.tensors.first``) instead of a new one, which
    saves copying the bytes again with ``CopyFrom``.
    """
    code, wire = wire_array(array, dtype)
    message = pb.Tensor() if out is None else out
    message.Clear()
    message.dtype = code
    message.shape.extend(int(s) for s in wire.shape)
    message.data = wire.tobytes()  # one copy, in C order even for a non-contiguous array
    return message


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(message: Any, field: str) -> bytes:
    """The key of a length-delimited field (field number, wire type 2)."""
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | 2)


_TAG_TENSORS = _tag(pb.RunRequest, "tensors")
_TAG_FIRST, _TAG_SECOND = _tag(pb.RunInputs, "first"), _tag(pb.RunInputs, "second")
_TAG_DATA = _tag(pb.Tensor, "data")


def serialize_run_request(request: pb.RunRequest, first: np.ndarray, second: np.ndarray, dtype: Any) -> bytes:
    """The serialized ``request`` with ``tensors`` set to (first, second) encoded like
    :func:`encode_tensor`: the same message ``SerializeToString`` gives, but the tensor bytes are
    copied once, straight from the arrays into the result (building the message and serializing it
    copies them three times). ``request`` itself (problem, kernel, ...) must not hold inputs."""
    if request.WhichOneof("inputs") is not None:
        raise ValueError("inputs: the request must not hold tensors or generate already")
    pieces: list[Any] = []
    inner = 0
    for tag, array in ((_TAG_FIRST, first), (_TAG_SECOND, second)):
        code, wire = wire_array(array, dtype)
        wire = np.ascontiguousarray(wire)
        head = pb.Tensor(dtype=code, shape=[int(s) for s in wire.shape]).SerializeToString()
        size = _varint(wire.nbytes)
        body = len(head) + len(_TAG_DATA) + len(size) + wire.nbytes
        piece = [tag, _varint(body), head, _TAG_DATA, size, memoryview(wire.reshape(-1)).cast("B")]
        pieces += piece
        inner += len(tag) + len(piece[1]) + body
    return b"".join([request.SerializeToString(), _TAG_TENSORS, _varint(inner), *pieces])


def decode_tensor(tensor: pb.Tensor, *, field: str = "tensor", expected_dtype: int | None = None,
                  expected_shape: tuple[int, ...] | None = None, bf16: str = "float32",
                  data: Any = None) -> np.ndarray:
    """The array in a ``Tensor``, checked: dtype, shape and byte length, each failure naming ``field``.

    bf16 comes back widened to float32 (``bf16="float32"``) or as raw ``uint16`` bits (``"bits"``).
    ``data``, when given, is the tensor's bytes held apart from the message (a view into the received
    request, :func:`parse_run_request`); the array then reads them in place.
    """
    if tensor.dtype not in WIRE_DTYPE:
        raise TensorError(f"{field}.dtype", f"must be DATA_TYPE_BF16, _FP16 or _FP32, got {_enum_name(tensor.dtype)}")
    if expected_dtype is not None and tensor.dtype != expected_dtype:
        raise TensorError(f"{field}.dtype", f"must be {pb.DataType.Name(expected_dtype)} like the problem, "
                                            f"got {pb.DataType.Name(tensor.dtype)}")
    shape = tuple(int(s) for s in tensor.shape)
    if any(s < 0 for s in shape):
        raise TensorError(f"{field}.shape", f"must not be negative, got {list(shape)}")
    if expected_shape is not None and shape != tuple(expected_shape):
        raise TensorError(f"{field}.shape", f"must be {list(expected_shape)}, got {list(shape)}")
    wire = WIRE_DTYPE[tensor.dtype]
    expected_bytes = int(np.prod(shape, dtype=np.int64)) * wire.itemsize
    if data is None:
        data = tensor.data  # each access of a bytes field makes a new copy of it: take it once
    if len(data) != expected_bytes:
        raise TensorError(f"{field}.data", f"must be {expected_bytes} bytes ({list(shape)} x {wire.itemsize}), "
                                           f"got {len(data)}")
    array = np.frombuffer(data, dtype=wire).reshape(shape)
    if tensor.dtype == pb.DATA_TYPE_BF16 and bf16 != "bits":
        return bf16_bits_to_float(array).reshape(shape)
    return array


# ---- Run requests without copying their tensors --------------------------------------------------
class ParsedRunRequest:
    """A received ``RunRequest``: ``message`` holds everything but the tensors' ``data`` (each left
    empty), ``data`` maps ``"first"``/``"second"`` to a zero-copy view of those bytes in the request."""

    __slots__ = ("message", "data")

    def __init__(self, message: pb.RunRequest, data: dict[str, memoryview]):
        self.message = message
        self.data = data


class _Unusual(Exception):
    """Wire data the fast parser leaves to protobuf (repeated or merged fields, groups, damage)."""


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Unusual
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview):
    """``(field number, wire type, start of the field, start of its value, end)`` of each field."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _read_varint(buf, pos)
            yield number, wire, start, start, pos
            continue
        if wire == 2:
            size, value = _read_varint(buf, pos)
            end = value + size
        elif wire in (1, 5):
            value, end = pos, pos + (8 if wire == 1 else 4)
        else:
            raise _Unusual
        if end > len(buf):
            raise _Unusual
        yield number, wire, start, value, end
        pos = end


def _one(found: dict, number: int, value: tuple) -> None:
    if number in found:  # protobuf would merge or replace: leave that to it
        raise _Unusual
    found[number] = value


_NUM_TENSORS = pb.RunRequest.DESCRIPTOR.fields_by_name["tensors"].number
_NUM_GENERATE = pb.RunRequest.DESCRIPTOR.fields_by_name["generate"].number
_NUM_FIRST = pb.RunInputs.DESCRIPTOR.fields_by_name["first"].number
_NUM_SECOND = pb.RunInputs.DESCRIPTOR.fields_by_name["second"].number
_NUM_DATA = pb.Tensor.DESCRIPTOR.fields_by_name["data"].number


def _split_tensor(buf: memoryview) -> tuple[bytes, memoryview | None]:
    """A Tensor's bytes without its ``data`` field, and a view of the data."""
    head, data, found = bytearray(), None, {}
    for number, wire, start, value, end in _fields(buf):
        if number == _NUM_DATA:
            if wire != 2:
                raise _Unusual
            _one(found, number, ())
            data = buf[value:end]
        else:
            head += buf[start:end]
    return bytes(head), data


def parse_run_request(data: bytes) -> pb.RunRequest | ParsedRunRequest:
    """Parse a serialized ``RunRequest`` the way ``RunRequest.FromString`` does, but leave the tensor
    bytes where they are (views into ``data``) instead of copying each into the message and again
    out of it (two copies of every tensor, ~25 ms for 64 MiB). Anything but the plain layout a
    client writes (a field given twice, both ``tensors`` and ``generate``, damage) goes to protobuf
    itself, so the result, and any DecodeError, are the same as ``FromString``'s."""
    buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    try:
        rest, inputs = bytearray(), None
        for number, wire, start, value, end in _fields(buf):
            if number == _NUM_GENERATE:
                raise _Unusual
            if number == _NUM_TENSORS:
                if wire != 2 or inputs is not None:
                    raise _Unusual
                inputs = buf[value:end]
            else:
                rest += buf[start:end]
        if inputs is None:
            raise _Unusual
        views, reduced, found = {}, bytearray(), {}
        for number, wire, start, value, end in _fields(inputs):
            slot = "first" if number == _NUM_FIRST else "second" if number == _NUM_SECOND else None
            if slot is None:
                reduced += inputs[start:end]
                continue
            if wire != 2:
                raise _Unusual
            _one(found, number, ())
            head, view = _split_tensor(inputs[value:end])
            reduced += _varint(number << 3 | 2) + _varint(len(head)) + head
            if view is not None:
                views[slot] = view
        rest += _TAG_TENSORS + _varint(len(reduced)) + reduced
        return ParsedRunRequest(pb.RunRequest.FromString(bytes(rest)), views)
    except _Unusual:
        return pb.RunRequest.FromString(bytes(data))
