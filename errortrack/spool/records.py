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
# zlib.crc32 releases the GIL for inputs over 5 KiB. On the event loop (the ingest
# request path) each release lets the writer or syncer thread take the GIL, and the loop
# then waits to get it back: measured, that cost more than the checksum. Up to 4 KiB at
# a time the GIL is kept; the value is the same.
_CRC_CHUNK = 4096


def crc32(data: bytes) -> int:
    if len(data) <= _CRC_CHUNK:
        return zlib.crc32(data)
    view = memoryview(data)
    crc = 0
    for start in range(0, len(data), _CRC_CHUNK):
        crc = zlib.crc32(view[start : start + _CRC_CHUNK], crc)
    return crc


def encode(tables: Mapping[str, bytes]) -> bytes:
    parts = []
    for name, data in tables.items():
        if data:
            parts.append(_PART.pack(_INDEX[name], len(data)))
            parts.append(data)
    payload = b"".join(parts)
    return _RECORD.pack(len(payload), crc32(payload)) + payload


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
