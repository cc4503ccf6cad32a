"""Serialized answers of cached Selects, keyed by the request's own bytes.

Why: on a cache hit, parsing and validating the problem (~50 µs), building the response message
(~35 µs) and serializing it were most of the servicer's own time per Select; an answer already seen
is now looked up by the request's serialized bytes and sent as stored bytes (the Select method's
response serializer passes ``bytes`` through: :mod:`.handlers`).

Correctness: equal request bytes mean an equal request (problem, policy, ``top_k``, families, model
pin), so equal answers, for as long as the selector's cache holds. Each entry carries the
selector's :attr:`~.selection.Selector.generation` read *before* the ranking it came from was looked
up; anything that clears the selector's cache (a measurement, a quarantine or its lifting) bumps the
generation, so older entries are misses from then on. Models are loaded once per process, so the
model version a pin (or no pin) resolves to cannot change under an entry. Different bytes for the same
request (another client's field order, an explicit default) are merely another entry. AUTOTUNE
requests are never stored (they measure on every call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .lru import LRU


@dataclass(frozen=True)
class Answer:
    generation: int
    data: bytes              # a serialized SelectResponse (cached=true)
    counter: Any             # the selections counter child (source, model) to count the answer under


class AnswerCache:
    """A bounded LRU of ``request bytes -> Answer`` that never returns an answer of an older generation."""

    def __init__(self, size: int):
        self._entries = LRU(size)

    def get(self, key: bytes, generation: int) -> Answer | None:
        answer = self._entries.get(key)
        if answer is not None and answer.generation != generation:  # the rankings changed since
            self._entries.discard(key)
            return None
        return answer

    def put(self, key: bytes, answer: Answer) -> None:
        self._entries.put(key, answer)

    def __len__(self) -> int:
        return len(self._entries)
