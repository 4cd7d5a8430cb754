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
from collections.abc import Callable
from typing import IO, Protocol, cast

import brotli
import orjson
import zstandard

from errortrack.errors import BadRequest, PayloadTooLarge

CHUNK = 64 * 1024


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


# Returns up to `limit` bytes of output for `data`; `data=b""` drains buffered output.
Step = Callable[[bytes, int], bytes]


def _zlib_step(wbits: int) -> Step:
    decoder = zlib.decompressobj(wbits)
    pending = b""

    def step(data: bytes, limit: int) -> bytes:
        nonlocal pending
        pending += data
        out = decoder.decompress(pending, limit)
        pending = decoder.unconsumed_tail
        return out

    return step


def _deflate_step() -> Step:
    # HTTP "deflate" is meant to be zlib-wrapped, but some clients send raw deflate:
    # look at the first byte (a zlib header starts with 0x?8) and pick the right one.
    inner: Step | None = None

    def step(data: bytes, limit: int) -> bytes:
        nonlocal inner
        if inner is None:
            if not data:
                return b""
            inner = _zlib_step(15 if data[0] & 0x0F == 8 else -15)
        return inner(data, limit)

    return step


def _brotli_step() -> Step:
    decoder = brotli.Decompressor()

    def step(data: bytes, limit: int) -> bytes:
        if not data and decoder.can_accept_more_data():
            return b""
        return bytes(decoder.process(data, output_buffer_limit=max(limit, 1)))

    return step


DECODERS: dict[str, Callable[[], Step]] = {
    "gzip": lambda: _zlib_step(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: _zlib_step(16 + zlib.MAX_WBITS),
    "deflate": _deflate_step,
    "br": _brotli_step,
}


def read_body(stream: Readable, encoding: str | None, cap: int) -> bytes:
    """The whole decompressed body; PayloadTooLarge over ``cap``, BadRequest if corrupt."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return _read_plain(stream, cap)
    factory = DECODERS.get(encoding)
    if factory is None and encoding != "zstd":
        raise BadRequest(
            f"unsupported Content-Encoding {encoding!r}; "
            "use gzip, x-gzip, deflate, br, zstd or none",
            field="Content-Encoding",
        )
    try:
        if encoding == "zstd":
            return _read_zstd(stream, cap)
        assert factory is not None
        return _read_decoded(stream, factory(), cap)
    except (zlib.error, brotli.error, zstandard.ZstdError) as exc:
        raise BadRequest(f"body is not valid {encoding}: {exc}") from None


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


def _read_decoded(stream: Readable, step: Step, cap: int) -> bytes:
    parts: list[bytes] = []
    size = read = 0
    while True:
        chunk = stream.read(CHUNK)
        read += len(chunk)
        if read > cap:
            raise _too_large(cap)
        data = chunk
        # Drain: a small input can expand a lot, so keep asking while output comes.
        while out := step(data, cap - size + 1):
            size += len(out)
            if size > cap:
                raise _too_large(cap)
            parts.append(out)
            data = b""
        if not chunk:
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
        return _read_decoded(io.BytesIO(binary), _zlib_step(zlib.MAX_WBITS), cap)
    except zlib.error as exc:
        try:
            orjson.loads(text)  # JSON after all (a scalar): refused as such by the caller
        except orjson.JSONDecodeError:
            raise BadRequest(
                f"body is base64, but neither of JSON nor of zlib-compressed JSON: {exc}"
            ) from None
        return body


class _CappedInput:
    """The compressed bytes as zstandard's stream reader pulls them, capped too."""

    def __init__(self, stream: Readable, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.read_bytes = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = self.stream.read(CHUNK if size < 0 else min(size, CHUNK))
        self.read_bytes += len(chunk)
        if self.read_bytes > self.cap:
            raise _too_large(self.cap)
        return chunk


def _read_zstd(stream: Readable, cap: int) -> bytes:
    # zstandard's decompressobj cannot bound one call's output (a tiny frame of RLE
    # blocks expands enormously); its stream reader can, when it pulls the input itself
    # (fed piecemeal, it would take an empty read for the end of the input).
    source = cast(IO[bytes], _CappedInput(stream, cap))  # zstandard only calls read()
    reader = zstandard.ZstdDecompressor().stream_reader(
        source, read_size=CHUNK, read_across_frames=True
    )
    parts: list[bytes] = []
    size = 0
    while out := reader.read(min(CHUNK, cap - size + 1)):
        size += len(out)
        if size > cap:
            raise _too_large(cap)
        parts.append(out)
    return b"".join(parts)


class AsyncReadable(Protocol):
    async def read(self, size: int | None = None, /) -> bytes: ...


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
