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

import re
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


def encode(tables: Mapping[str, bytes]) -> list[bytes]:
    """One record, as the buffers to write in this order (``os.writev``): the rows are
    neither copied into one payload nor the payload behind its header, two copies of
    ~140 KB per 100-log request otherwise. Called on the spool's syncer thread, not the
    event loop: zlib.crc32 gives the GIL away for inputs over 5 KiB, which there lets the
    loop run meanwhile (on the loop it had to be taken in 4 KiB steps, and cost the loop
    ~3 % of its time)."""
    parts: list[bytes] = []
    crc = length = 0
    for name, data in tables.items():
        if data:
            head = _PART.pack(_INDEX[name], len(data))
            crc = zlib.crc32(data, zlib.crc32(head, crc))
            length += len(head) + len(data)
            parts += (head, data)
    return [_RECORD.pack(length, crc), *parts]


def decode(segment: bytes) -> tuple[dict[str, bytes], int]:
    """Rows per table (JSONEachRow bytes) of every intact record, and the count of
    bytes that were intact (less than ``len(segment)`` when the tail was torn).

    Records and parts are checked and cut as memoryviews, so each table's rows are
    copied once, into the joined result (slicing bytes copied them twice more: ~20 of
    the ~25 ms a 10k-row segment took here, in the writer thread)."""
    view = memoryview(segment)
    chunks: dict[str, list[memoryview]] = {}
    pos = 0
    size = len(segment)
    while pos + _RECORD.size <= size:
        length, crc = _RECORD.unpack_from(view, pos)
        start, end = pos + _RECORD.size, pos + _RECORD.size + length
        if end > size or zlib.crc32(view[start:end]) != crc:
            break
        _parts(view, start, end, chunks)
        pos = end
    return {name: b"".join(parts) for name, parts in chunks.items()}, pos


def torn_tail(segment: bytes, intact: int) -> bool:
    """Whether the bytes after the ``intact`` ones (``decode``) are at most one record cut
    short, as a crash or a failed write leaves it: part of a header, or a header whose
    record reaches the end of the segment. A write is cut short from its end, so its
    header, when there, is whole; a bad record followed by more bytes is damage."""
    rest = len(segment) - intact
    if rest < _RECORD.size:
        return True
    length, _ = _RECORD.unpack_from(segment, intact)
    if intact + _RECORD.size + length < len(segment):
        return False
    # A header whose record reaches the end: cut short, or one bit of its length field
    # flipped, which also stretches it past the end. Only the second has a whole record
    # after it.
    return not _record_after(segment, intact + 1)


# A part's table index: the payload's first byte. JSONEachRow text never holds these
# bytes (JSON escapes control characters), so they occur only in the binary headers,
# and the search for a record start looks at a few places per record.
_INDEX_BYTE = re.compile(rb"[\x00-\x%02x]" % (len(TABLES) - 1))


def _record_after(segment: bytes, start: int) -> bool:
    """Whether a whole, intact record starts anywhere from ``start`` on."""
    for found in _INDEX_BYTE.finditer(segment, start + _RECORD.size):
        pos = found.start() - _RECORD.size
        length, crc = _RECORD.unpack_from(segment, pos)
        end = pos + _RECORD.size + length
        whole = _PART.size <= length and end <= len(segment)
        if whole and zlib.crc32(memoryview(segment)[pos + _RECORD.size : end]) == crc:
            return True
    return False


def _parts(view: memoryview, pos: int, end: int, into: dict[str, list[memoryview]]) -> None:
    while pos < end:
        index, length = _PART.unpack_from(view, pos)
        pos += _PART.size
        into.setdefault(TABLES[index], []).append(view[pos : pos + length])
        pos += length
