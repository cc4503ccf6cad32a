"""Run inputs that a client on the server's host left in POSIX shared memory (``SharedMemoryInputs``).

Why: on a 2-core VM gRPC itself moves a 64 MiB message at about 1 GB/s, so a Run's tensors cost
more on the wire than everything else the server does with them. A local client (a training job
beside the server) can instead write them to a segment and send only its name and the offsets, as
NVIDIA Triton's system shared-memory extension does. The server maps the segment read-only for the
call; the worker pool then copies the tensors once into the GPU worker's own segment, as it does
for bytes that came over the wire.

Safety, each refusal naming the field:

* off unless the server is started with ``--allow-shared-memory`` (FAILED_PRECONDITION);
* only from a loopback peer: a remote client's segment would not be on this host;
* the name must be ``tiledispatch-client-`` and 1-200 of ``[A-Za-z0-9._-]``: no path, no other
  program's segment (the server's own worker segments are ``tiledispatch-<pid>-...``);
* opened with ``O_NOFOLLOW`` and must be a regular file owned by the server's user: a process
  of that user could stop the server anyway, so truncating the segment mid-call (which would end
  the server with SIGBUS) gives no one a power they did not have;
* dtype and shape must be the problem's, and each tensor must lie inside the segment.

The mapping is released when the last array over it is dropped (after the call).
"""

from __future__ import annotations

import ipaddress
import mmap
import os
import re
import stat

import numpy as np

from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

from .errors import FailedPrecondition, InvalidArgument

SEGMENT_PREFIX = "tiledispatch-client-"
SEGMENT_NAME = re.compile(re.escape(SEGMENT_PREFIX) + r"[A-Za-z0-9._-]{1,200}")
SHM_DIR = "/dev/shm"


def is_local_peer(peer: str) -> bool:
    """Whether a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``, ``unix:...``)
    is this host's loopback."""
    kind, _, rest = peer.partition(":")
    if kind == "unix":
        return True
    if kind not in ("ipv4", "ipv6"):
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def check_allowed(allowed: bool, peer: str, field: str = "shared_memory") -> None:
    if not allowed:
        raise FailedPrecondition("this server does not read shared-memory inputs (start it with "
                                 "--allow-shared-memory); send the tensors instead", field=field)
    if not is_local_peer(peer):
        raise FailedPrecondition(f"only a client on the server's host may send shared-memory inputs (this "
                                 f"call came from {peer}); send the tensors instead", field=field)


def _open(name: str, field: str) -> tuple[mmap.mmap | None, int]:
    path = os.path.join(SHM_DIR, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidArgument(f"no shared-memory segment {name!r} on the server's host (the client must "
                              "create it, on this host, before the call)", field=field) from None
    except OSError as error:
        raise InvalidArgument(f"shared-memory segment {name!r} cannot be opened ({error.strerror})",
                              field=field) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"{name!r} is not a shared-memory segment", field=field)
        if info.st_uid != os.getuid():
            raise InvalidArgument(f"shared-memory segment {name!r} must belong to the server's user "
                                  f"(uid {os.getuid()}), not uid {info.st_uid}", field=field)
        size = info.st_size
        return (mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None), size
    finally:
        os.close(fd)


def read_inputs(message: pb.SharedMemoryInputs, dtype_code: int, shapes: tuple[tuple[int, ...], ...],
                roles: tuple[str, str], field: str = "shared_memory") -> tuple[np.ndarray, np.ndarray]:
    """The two operands as read-only arrays over the segment (wire types: bf16 as uint16 bits)."""
    if not SEGMENT_NAME.fullmatch(message.segment):
        raise InvalidArgument(f"must be {SEGMENT_PREFIX!r} followed by 1 to 200 of [A-Za-z0-9._-], got "
                              f"{message.segment[:80]!r}", field=f"{field}.segment")
    wire = codec.WIRE_DTYPE[dtype_code]
    wanted = []
    for slot, shape, role in zip(("first", "second"), shapes, roles):
        where = f"{field}.{slot}"
        if not message.HasField(slot):
            raise InvalidArgument(f"is required (the {role} tensor, shape {list(shape)})", field=where)
        tensor = getattr(message, slot)
        if tensor.dtype != dtype_code:
            got = pb.DataType.Name(tensor.dtype) if tensor.dtype in pb.DataType.values() else str(tensor.dtype)
            raise InvalidArgument(f"must be {pb.DataType.Name(dtype_code)} like the problem, got {got} (the {role} "
                                  "tensor)", field=f"{where}.dtype")
        if tuple(tensor.shape) != tuple(shape):
            raise InvalidArgument(f"must be {list(shape)}, got {list(tensor.shape)} (the {role} tensor)",
                                  field=f"{where}.shape")
        wanted.append((where, tensor.offset, int(np.prod(shape, dtype=np.int64)) * wire.itemsize, shape, role))
    segment, size = _open(message.segment, f"{field}.segment")
    arrays = []
    for where, offset, nbytes, shape, role in wanted:
        if offset + nbytes > size:
            raise InvalidArgument(f"{offset} + {nbytes} bytes (the {role} tensor) runs past the end of the "
                                  f"segment ({size} bytes)", field=f"{where}.offset")
        if nbytes == 0:
            arrays.append(np.zeros(shape, dtype=wire))
            continue
        arrays.append(np.frombuffer(segment, dtype=wire, count=nbytes // wire.itemsize, offset=offset).reshape(shape))
    return arrays[0], arrays[1]
