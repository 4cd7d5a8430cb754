"""The on-disk record format of spool segments.

A segment is a sequence of records, one per accepted request::

    record  = u32 payload length | u32 crc32(payload) | payload
    payload = (u8 table index | u32 length | JSONEachRow bytes)*

Rows are stored already serialised in the insert format, so a batch is a concatenation
of bytes and the writer does one raw insert per table. A record cut short by a crash
(its request was never acknowledged: the 200 waits for the fsync) fails its length or
crc check, and reading stops there.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

TABLES = ("logs", "events", "spans")
_INDEX = {name: i for i, name in enumerate(TABLES)}
_RECORD = struct.Struct("<II")
_PART = struct.Struct("<BI")


def size(tables: Mapping[str, bytes]) -> int:
    """The length ``encode(tables)`` will have, without encoding (for the size cap)."""
    return _RECORD.size + sum(_PART.size + len(data) for data in tables.values() if data)


def encode(tables: Mapping[str, bytes]) -> bytes:
    """One record. Called on the spool's syncer thread, not the event loop: zlib.crc32
    gives the GIL away for inputs over 5 KiB, which there lets the loop run meanwhile
    (on the loop it had to be taken in 4 KiB steps, and cost the loop ~3 % of its time)."""
    parts = []
    for name, data in tables.items():
        if data:
            parts.append(_PART.pack(_INDEX[name], len(data)))
            parts.append(data)
    payload = b"".join(parts)
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def decode(segment: bytes) -> tuple[dict[str, bytes], int]:
    """Rows per table (JSONEachRow bytes) of every intact record, and the count of
    bytes that were intact (less than ``len(segment)`` when the tail was torn)."""
    chunks: dict[str, list[bytes]] = {}
    pos = 0
    size = len(segment)
    while pos + _RECORD.size <= size:
        length, crc = _RECORD.unpack_from(segment, pos)
        start, end = pos + _RECORD.size, pos + _RECORD.size + length
        if end > size or zlib.crc32(segment[start:end]) != crc:
            break
        _parts(segment, start, end, chunks)
        pos = end
    return {name: b"".join(parts) for name, parts in chunks.items()}, pos


def _parts(segment: bytes, pos: int, end: int, into: dict[str, list[bytes]]) -> None:
    while pos < end:
        index, length = _PART.unpack_from(segment, pos)
        pos += _PART.size
        into.setdefault(TABLES[index], []).append(segment[pos : pos + length])
        pos += length
