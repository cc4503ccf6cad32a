"""A GPU-worker handler for the transport tests: ``echo`` answers with what it received (and what
it saw: types and digests), ``fill`` answers with a new array of a requested size, ``crash`` dies."""

from __future__ import annotations

import hashlib
import os

import numpy as np


def digest(value) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(value) if isinstance(value, np.ndarray) else value)
                          .cast("B")).hexdigest()


class EchoHandler:
    def __init__(self, device: int, options: dict):
        self.device = device

    def hello(self) -> dict:
        return {"index": self.device, "name": "Echo (tests)", "pid": os.getpid()}

    def echo(self, payload: dict) -> dict:
        seen = {key: (type(value).__name__, digest(value)) for key, value in payload.items()
                if isinstance(value, (bytes, np.ndarray))}
        return {**payload, "seen": seen}

    def fill(self, payload: dict) -> dict:
        return {"array": np.full(payload["n"], payload["value"], dtype=np.uint8)}

    def crash(self, payload: dict) -> dict:
        os._exit(11)
