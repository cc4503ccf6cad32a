"""The client's side of shared-memory Run inputs (``Client.run(..., shared_memory=True)``).

Why: a client on the server's own host can skip sending a Run's tensors through gRPC (about
1 GB/s on a small VM, the largest cost of a 64 MiB Run): it writes them into a POSIX shared-memory
segment and sends only the segment's name and offsets (``SharedMemoryInputs``); the server maps it
read-only for the call. The server must be started with ``--allow-shared-memory`` and the call must
come over loopback (docs/operations.md).

One segment per :class:`~.client.Client`, created on first use, grown when a call needs more, reused
from call to call (first-touching fresh pages is most of the cost of a fresh one), and unlinked by
``Client.close()`` (Python's resource tracker unlinks it should the process die first). Its pages are
reserved when it is created, so a full ``/dev/shm`` is an ``OSError`` then, not a SIGBUS mid-copy.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import threading
from multiprocessing import shared_memory

import numpy as np

from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

#: The server accepts only segments named so (server/shm_inputs.py).
SEGMENT_PREFIX = "tiledispatch-client-"
_ALIGN = 64
_QUANTUM = 1 << 20


class InputSegment:
    """A reusable segment for the two operands of a Run; ``lock`` must be held from :meth:`write`
    until the call that reads them has returned (the next write would overwrite them)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._segment: shared_memory.SharedMemory | None = None

    @property
    def name(self) -> str | None:
        return None if self._segment is None else self._segment.name

    def _ensure(self, nbytes: int) -> shared_memory.SharedMemory:
        if self._segment is not None and self._segment.size >= nbytes:
            return self._segment
        self.close()
        size = max(_QUANTUM, -(-nbytes // _QUANTUM) * _QUANTUM)
        name = f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        segment = shared_memory.SharedMemory(name=name, create=True, size=size)
        try:
            fd = getattr(segment, "_fd", -1)
            if fd >= 0 and hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as error:
                    if error.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                        raise
        except BaseException:
            segment.close()
            segment.unlink()
            raise
        self._segment = segment
        return segment

    def write(self, first: np.ndarray, second: np.ndarray, dtype: int) -> pb.SharedMemoryInputs:
        """Copy both operands (in their wire type) into the segment; the message that points at them."""
        wires = [np.ascontiguousarray(codec.wire_array(array, dtype)[1]) for array in (first, second)]
        second_offset = -(-wires[0].nbytes // _ALIGN) * _ALIGN
        segment = self._ensure(second_offset + wires[1].nbytes)
        message = pb.SharedMemoryInputs(segment=segment.name)
        for slot, wire, offset in (("first", wires[0], 0), ("second", wires[1], second_offset)):
            view = np.ndarray(wire.shape, wire.dtype, buffer=segment.buf, offset=offset)
            np.copyto(view, wire, casting="no")
            del view
            getattr(message, slot).CopyFrom(pb.SharedMemoryTensor(dtype=dtype, shape=[int(s) for s in wire.shape],
                                                                  offset=offset))
        return message

    def close(self) -> None:
        """Unlink the segment (the server maps it only during a call)."""
        segment, self._segment = self._segment, None
        if segment is None:
            return
        with contextlib.suppress(BufferError):
            segment.close()
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()
