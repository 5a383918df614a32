"""The text of an answer as it grows, piece by piece."""
from __future__ import annotations

from dataclasses import dataclass


class Pieces:
    """A text that grows by pieces. Adding one costs the piece, not the text so far: a
    string's `+=` copies the whole answer at every chunk, quadratic in its length (a
    20,000-token answer, ~80 KB in ~20,000 chunks, copied ~800 MB). The text is joined
    only when it is read whole, and kept joined; its end alone (`tail`: what a write in
    chunks takes) joins only the pieces after the one it starts in."""

    __slots__ = ("_pieces", "_size", "__weakref__")  # (the write buffer knows which text it wrote by a weak reference)

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._size = 0

    def add(self, piece: str) -> SoFar:
        self._pieces.append(piece)
        self._size += len(piece)
        return SoFar(self, self._size)

    def text(self, size: int | None = None) -> str:
        """The first `size` characters (all of them by default)."""
        if len(self._pieces) > 1:
            self._pieces[:] = ["".join(self._pieces)]
        whole = self._pieces[0] if self._pieces else ""
        return whole if size is None or size >= len(whole) else whole[:size]

    def tail(self, start: int, size: int) -> str:
        """Characters `start` up to `size`, joined from the last pieces only (not the text so far).

        The pieces after the one `start` is in are kept joined as one, so the next call, from
        the same `start` or a later one, walks that piece and what came since, not every chunk
        of the model's stream again. What is joined is bounded by the distance from `start`
        to the end (a chunk and a beat's gain, for the write buffer), never the text so far:
        the piece `start` is in is sliced, not joined."""
        if size <= start:
            return ""
        pieces = self._pieces
        at, begin = len(pieces), self._size
        while at > 0 and begin > start:
            at -= 1
            begin -= len(pieces[at])
        if len(pieces) - at > 2:
            pieces[at + 1:] = ["".join(pieces[at + 1:])]
        if len(pieces) - at == 1:
            return pieces[at][start - begin:size - begin]
        first, rest = pieces[at], pieces[at + 1]
        return (first[start - begin:] + rest)[:size - start]


@dataclass(frozen=True)
class SoFar:
    """A growing text as it was at one update: joined when read (`str()`, or bound as an
    SQL parameter: sqlite3 asks `__conform__`), so the runner's write buffer can keep the
    latest one and join it once per write."""

    pieces: Pieces
    size: int

    def __str__(self) -> str:
        return self.pieces.text(self.size)

    def __conform__(self, protocol: object) -> str:
        return str(self)

    def since(self, start: int) -> str:
        """Its characters from `start` on, joining only the pieces they are in (the write of
        a growing text's last chunks: Writes)."""
        return self.pieces.tail(start, self.size)
