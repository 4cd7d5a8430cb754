"""Reading a request body: streamed, decompressed on the fly, and stopped at a size cap.

The cap applies to the decompressed size (a 1 MB gzip bomb can expand to gigabytes), and
to the bytes read off the wire. Every decoder is asked for at most "what is left under
the cap" per step, so memory never grows past the cap however the body is compressed.
"""

from __future__ import annotations

import base64
import binascii
import io
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Protocol, cast

import brotli
import orjson
import zstandard

from errortrack.errors import BadRequest, PayloadTooLarge, Unavailable, UnsupportedContentEncoding

CHUNK = 64 * 1024


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class Truncated(Exception):
    """The input ended inside the compressed stream."""


TRUNCATED = "it ends before the compressed stream does"


class TooManyFrames(Exception):
    """More gzip members or zstd frames than ``MAX_FRAMES``, or more brotli bytes that
    decode to nothing than ``MAX_OVERHEAD``."""


# Members of a gzip body, frames of a zstd one (skippable ones too), at most. SDKs send
# one; each costs a Python step and a new decoder, and 1M empty gzip members (20 MiB)
# held the event loop ~1.5 s (96 MiB on the skim path: 9.7 s), 19 MiB of empty zstd
# frames 3.6 s, before any key was checked (DoS review, thirtieth session).
MAX_FRAMES = 1000


def _too_many(what: str) -> TooManyFrames:
    return TooManyFrames(f"it holds more than {MAX_FRAMES:,} {what}; SDKs send one")


# Compressed bytes a brotli body may hold beyond what they decode to (and an eighth of
# that): a stream's own framing costs a few bytes per meta-block, incompressible data
# included. Brotli has no member or frame to count, but metadata meta-blocks decode to
# nothing: 20 MiB of empty ones held the event loop ~1 s, 100 MiB on the skim path 4.1 s,
# before any key was checked (DoS review, thirtieth session).
MAX_OVERHEAD = 2**20


class Decoder(Protocol):
    def step(self, data: bytes, limit: int) -> bytes:
        """Up to ``limit`` bytes of output for ``data``; ``data=b""`` drains buffered output."""
        ...

    def end(self) -> None:
        """Called once the input is over: raises Truncated unless the stream was whole."""
        ...


_GZIP_MAGIC = b"\x1f\x8b"


class _Zlib:
    def __init__(self, wbits: int, *, members: bool = False) -> None:
        self.wbits = wbits
        # gzip (RFC 1952 2.2) may be several members back to back; curl, Relay and
        # `gzip -d` read them all, so a member's end is not the body's.
        self.members = members
        self.decoder = zlib.decompressobj(wbits)
        self.pending = b""
        self.count = 1

    def step(self, data: bytes, limit: int) -> bytes:
        self.pending += data
        while True:
            if self.decoder.eof:
                rest = self.decoder.unused_data + self.pending
                if not rest:
                    return b""
                if not self.members:
                    # As for gzip below: bytes the stream does not account for mean the
                    # body is not what the client meant to send, so nothing is stored.
                    raise zlib.error("bytes follow the end of the deflate stream")
                if not _GZIP_MAGIC.startswith(rest[:2]):
                    raise zlib.error("what follows the last gzip member is not gzip")
                self.count += 1
                if self.count > MAX_FRAMES:
                    raise _too_many("members")
                self.decoder = zlib.decompressobj(self.wbits)
                self.pending = rest
            out = self.decoder.decompress(self.pending, limit)
            self.pending = self.decoder.unconsumed_tail
            # An empty member gives nothing: go on to the next rather than stop early.
            if out or not self.decoder.eof:
                return out

    def end(self) -> None:
        if not self.decoder.eof:
            raise Truncated(TRUNCATED)


class _Deflate:
    # HTTP "deflate" is meant to be zlib-wrapped, but some clients send raw deflate:
    # look at the first byte (a zlib header starts with 0x?8) and pick the right one.
    def __init__(self) -> None:
        self.inner: _Zlib | None = None

    def step(self, data: bytes, limit: int) -> bytes:
        if self.inner is None:
            if not data:
                return b""
            self.inner = _Zlib(15 if data[0] & 0x0F == 8 else -15)
        return self.inner.step(data, limit)

    def end(self) -> None:
        if self.inner is None:
            raise Truncated(TRUNCATED)
        self.inner.end()


class _Brotli:
    def __init__(self) -> None:
        self.decoder = brotli.Decompressor()
        self.taken = self.given = 0

    def step(self, data: bytes, limit: int) -> bytes:
        if not data and self.decoder.is_finished():
            return b""
        # Not can_accept_more_data(): with an output limit, brotli 1.2 holds output back
        # while saying it can take more input, and an empty call gives the rest. A body
        # read a chunk at a time (ingest/skim.py) lost its end to that: "truncated".
        out = bytes(self.decoder.process(data, output_buffer_limit=max(limit, 1)))
        self.taken += len(data)
        self.given += len(out)
        if self.taken > MAX_OVERHEAD + self.given + self.given // 8:
            raise TooManyFrames(
                f"its bytes outrun what they decode to by more than {MAX_OVERHEAD:,}; "
                "SDKs send no such stream"
            )
        return out

    def end(self) -> None:
        if not self.decoder.is_finished():
            raise Truncated(TRUNCATED)


DECODERS: dict[str, Callable[[], Decoder]] = {
    "gzip": lambda: _Zlib(16 + zlib.MAX_WBITS, members=True),
    "x-gzip": lambda: _Zlib(16 + zlib.MAX_WBITS, members=True),
    "deflate": _Deflate,
    "br": _Brotli,
}
# Sent by sentry.java.android 2.0.0 for an uncompressed body; Relay ignores it too
# (middlewares/decompression.rs, should_ignore_encoding).
IDENTITY = frozenset({"identity", "utf-8"})


# What a decoder raises for a corrupt or cut-short body (a 400 naming the encoding).
CORRUPT = (zlib.error, brotli.error, zstandard.ZstdError, Truncated, TooManyFrames)


def encoding_name(encoding: str | None) -> str:
    """A Content-Encoding header as the decoders are looked up by."""
    return (encoding or "identity").strip().lower()


def read_body(stream: Readable, encoding: str | None, cap: int) -> bytes:
    """The whole decompressed body; PayloadTooLarge over ``cap``, BadRequest if corrupt
    or cut short."""
    encoding = encoding_name(encoding)
    if encoding in IDENTITY:
        return _read_plain(stream, cap)
    factory = DECODERS.get(encoding)
    if factory is None and encoding != "zstd":
        raise unsupported(encoding)
    try:
        if encoding == "zstd":
            return _read_zstd(stream, cap)
        assert factory is not None
        return _read_decoded(stream, factory(), cap)
    except CORRUPT as exc:
        raise corrupt(encoding, exc) from None


def corrupt(encoding: str, exc: Exception) -> BadRequest:
    return BadRequest(f"body is not valid {encoding}: {exc}", field="Content-Encoding")


def unsupported(encoding: str) -> UnsupportedContentEncoding:
    # 415 with the codings taken (RFC 9110 15.5.16), as the management API answers: the
    # body may be a fine envelope, in a coding this server does not read.
    return UnsupportedContentEncoding(
        f"unsupported Content-Encoding {encoding!r}; use gzip, x-gzip, deflate, br, zstd or none",
        field="Content-Encoding",
        accepted="gzip, x-gzip, deflate, br, zstd, identity",
    )


def _too_large(cap: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds {cap} bytes (decompressed)")


def _read_plain(stream: Readable, cap: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while chunk := stream.read(CHUNK):
        size += len(chunk)
        if size > cap:
            raise _too_large(cap)
        parts.append(chunk)
    return b"".join(parts)


def _read_decoded(stream: Readable, decoder: Decoder, cap: int) -> bytes:
    parts: list[bytes] = []
    size = read = 0
    while True:
        chunk = stream.read(CHUNK)
        read += len(chunk)
        if read > cap:
            raise _too_large(cap)
        data = chunk
        # Drain: a small input can expand a lot, so keep asking while output comes.
        while out := decoder.step(data, cap - size + 1):
            size += len(out)
            if size > cap:
                raise _too_large(cap)
            parts.append(out)
            data = b""
        if not chunk:
            decoder.end()
            return b"".join(parts)


def legacy_store_body(body: bytes, cap: int) -> bytes:
    """A ``/store/`` body as Relay reads one: JSON as is, or base64 of the JSON, or base64 of
    zlib-compressed JSON (how raven-python and other pre-envelope clients send events,
    with no Content-Encoding header). The inflated size is capped like any body.

    Anything that is not base64 is returned unchanged, so that the JSON parser names
    what is wrong with it; so is JSON that happens to be valid base64 (``null``,
    ``1234``), refused later as "not a JSON object".
    """
    text = body.strip()
    if not text or text[:1] == b"{":
        return body
    try:
        binary = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return body
    if binary.lstrip()[:1] == b"{":
        return binary
    try:
        return _read_decoded(io.BytesIO(binary), _Zlib(zlib.MAX_WBITS), cap)
    except (zlib.error, Truncated) as exc:
        try:
            orjson.loads(text)  # JSON after all (a scalar): refused as such by the caller
        except orjson.JSONDecodeError:
            raise BadRequest(
                f"body is base64, but neither of JSON nor of zlib-compressed JSON: {exc}"
            ) from None
        return body


_ZSTD_MAGIC = 0xFD2FB528
_FCS_SIZES = (0, 2, 4, 8)  # Frame_Content_Size bytes by flag (flag 0: 1 if single segment)
_DICT_ID_SIZES = (0, 1, 2, 4)


class _ZstdFrames:
    """Follows the compressed bytes through zstd's frame format (RFC 8878 3.1) by its
    headers alone, to tell input that ends between frames from input that ends inside
    one: zstandard's stream reader ends either quietly, with what it could decode."""

    def __init__(self) -> None:
        self.rest = b""  # a header cut by a read
        self.skip = 0  # bytes of block content (or a skippable frame) still to pass
        self.in_frame = False
        self.checksum = False
        self.frames = 0
        self.started = 0  # frames begun, skippable ones too
        self.invalid = False

    def feed(self, data: bytes) -> None:
        buf = self.rest + data if self.rest else data
        pos = 0
        while not self.invalid:
            if self.skip:
                passed = min(self.skip, len(buf) - pos)
                pos += passed
                self.skip -= passed
                if self.skip:
                    break
            used = self._header(buf, pos)
            if not used:
                break
            pos += used
        self.rest = buf[pos:]

    def _header(self, buf: bytes, pos: int) -> int:
        """Reads the header at ``pos``: its size, or 0 when it is not all there yet."""
        left = len(buf) - pos
        if self.in_frame:  # a block header
            if left < 3:
                return 0
            header = int.from_bytes(buf[pos : pos + 3], "little")
            size = header >> 3
            kind = (header >> 1) & 3
            self.skip = 1 if kind == 1 else size  # an RLE block holds one byte
            if header & 1:  # the last block
                self.skip += 4 if self.checksum else 0
                self.in_frame = False
                self.frames += 1
            return 3
        if left < 4:
            return 0
        magic = int.from_bytes(buf[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame
            if left < 8:
                return 0
            self._begin()
            self.skip = int.from_bytes(buf[pos + 4 : pos + 8], "little")
            return 8
        if magic != _ZSTD_MAGIC or left < 5:
            self.invalid = magic != _ZSTD_MAGIC
            return 0
        descriptor = buf[pos + 4]
        single = descriptor >> 5 & 1
        fcs = _FCS_SIZES[descriptor >> 6] or single
        size = 5 + (not single) + _DICT_ID_SIZES[descriptor & 3] + fcs
        if left < size:
            return 0
        self._begin()
        self.checksum = bool(descriptor >> 2 & 1)
        self.in_frame = True
        return size

    def _begin(self) -> None:
        # Raised in the middle of zstandard's read, which passes it on (as the cap's 413).
        self.started += 1
        if self.started > MAX_FRAMES:
            raise _too_many("frames")

    def whole(self) -> bool:
        return self.frames > 0 and not (self.in_frame or self.skip or self.rest or self.invalid)


class CappedInput:
    """The compressed bytes as zstandard's stream reader pulls them, capped too."""

    def __init__(self, stream: Readable, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.read_bytes = 0
        self.frames = _ZstdFrames()

    def read(self, size: int = -1, /) -> bytes:
        chunk = self.stream.read(CHUNK if size < 0 else min(size, CHUNK))
        self.read_bytes += len(chunk)
        if self.read_bytes > self.cap:
            raise _too_large(self.cap)
        self.frames.feed(chunk)
        return chunk


def zstd_pieces(stream: Readable, cap: int) -> Iterator[bytes]:
    """The decoded zstd body, at most ``CHUNK`` bytes a piece; the compressed bytes read
    are capped at ``cap``; Truncated when the input ends inside a frame.

    zstandard's decompressobj cannot bound one call's output (a tiny frame of RLE blocks
    expands enormously); its stream reader can, when it pulls the input itself (fed
    piecemeal, it would take an empty read for the end of the input)."""
    source = CappedInput(stream, cap)
    reader = zstandard.ZstdDecompressor().stream_reader(
        cast(IO[bytes], source),  # zstandard only calls read()
        read_size=CHUNK,
        read_across_frames=True,
    )
    while out := reader.read(CHUNK):
        yield out
    if not source.frames.whole():
        raise Truncated(TRUNCATED)


def _read_zstd(stream: Readable, cap: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    for out in zstd_pieces(stream, cap):
        size += len(out)
        if size > cap:
            raise _too_large(cap)
        parts.append(out)
    return b"".join(parts)


class AsyncReadable(Protocol):
    async def read(self, size: int | None = None, /) -> bytes: ...


# Seconds a request refused by the body budget is told to wait: the bodies held now are
# stored (or refused) within seconds.
BODY_BUDGET_RETRY_AFTER = 2


class BodyBudget:
    """The bytes of request bodies a worker's ingest requests hold at once
    (``ERRORTRACK_MAX_HELD_BODY_BYTES``), as received and decompressed.

    The event loop takes any number of connections, and each request holds its body
    until it is stored: 40 connections that sent 19 MiB each and then stalled (no key
    needed: the envelope header's key is read after the body) held +860 MB, so a few
    hundred killed the worker, or what shared its machine (thirty-first session). Past
    the budget a request is refused (503, ``Retry-After``), unless it is the only one
    holding anything: any body the caps admit can always go in alone. One event loop per
    worker, so the counts need no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.refused = 0  # requests refused, for /readyz


class Charge:
    """One request's share of the ``BodyBudget``: its body stream, charged per chunk read
    up to ``wire_cap`` (what the readers keep of it is at most that), and its decompressed
    body."""

    __slots__ = ("budget", "mine", "read_bytes", "stream", "wire_cap")

    def __init__(self, budget: BodyBudget, stream: AsyncReadable, wire_cap: int) -> None:
        self.budget = budget
        self.stream = stream
        self.mine = 0
        self.read_bytes = 0
        # No reader holds more of the wire than this (``ERRORTRACK_MAX_BODY_BYTES``): an
        # envelope over it is skimmed, its attachments passed through, not kept. Charged
        # in full, four 60 MiB minidump uploads holding 0.5 MiB took 240 MiB of the
        # budget, and a log envelope beside them was a 503 (diff review).
        self.wire_cap = wire_cap

    async def read(self, size: int | None = None, /) -> bytes:
        chunk = await self.stream.read(size)
        held_before = min(self.read_bytes, self.wire_cap)
        self.read_bytes += len(chunk)
        self.take(min(self.read_bytes, self.wire_cap) - held_before)
        return chunk

    def take(self, size: int) -> None:
        budget = self.budget
        self.mine += size
        budget.held += size
        if budget.held > budget.limit and budget.held > self.mine:
            budget.refused += 1
            raise Unavailable(
                "the server holds too many request bodies at once; retry later",
                retry_after=BODY_BUDGET_RETRY_AFTER,
            )

    def release(self) -> None:
        self.budget.held -= self.mine
        self.mine = 0


async def read_wire(stream: AsyncReadable, length: int | None, cap: int) -> bytes:
    """The body as sent (still compressed), at most ``cap`` bytes (else PayloadTooLarge).

    Read whole before decoding: decoding is CPU work done in one go on the event loop.
    A declared length over the cap is refused before anything is read.
    """
    if length is not None and length > cap:
        raise PayloadTooLarge(f"request body exceeds {cap} bytes")
    parts: list[bytes] = []
    size = 0
    while chunk := await stream.read(CHUNK):
        size += len(chunk)
        if size > cap:
            raise PayloadTooLarge(f"request body exceeds {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)
