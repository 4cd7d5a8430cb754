"""Envelopes larger than the body cap because of items ingest drops unread.

SDKs attach files to an event (``attachment`` items: log files, minidumps, view
hierarchies) and send replays and profiles in the same envelope. errortrack stores none
of them: their payloads are never read (``items.dispatch``). Until the twenty-third
session they still counted towards ``ERRORTRACK_MAX_BODY_BYTES`` (20 MiB), so an event
sent with a 25 MiB attachment was a 413 and the SDK dropped the event with it.

Only an envelope over the body cap comes here; every other one is read whole, as
before (``body.read_body``), so the common path costs nothing more. Here the body is
read as it arrives, decompressed piece by piece, and ``Skimmer`` keeps the envelope
minus the payloads of items without a handler that say their ``length`` (an item
without one runs to the next newline and is kept; SDKs give a length for binary
items). Such an item stays in the envelope with ``"length": 0`` and no payload, so it
is counted as dropped as ever and the item numbers in a 400 are those the client sent.
What is kept is capped by ``ERRORTRACK_MAX_BODY_BYTES``; the whole envelope, on the wire
and decompressed, by ``ERRORTRACK_MAX_ENVELOPE_BYTES``.

zstd is not read here: its decoder cannot bound one step's output when fed piecemeal
(``body._read_zstd``), so a zstd envelope over the body cap on the wire stays a 413. One
whose compressed bytes fit but that expands past the cap is read from memory.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Callable

import orjson

from errortrack.errors import BadRequest, PayloadTooLarge
from errortrack.ingest import body, envelope, surrogates
from errortrack.ingest.body import CHUNK, AsyncReadable

_NEWLINES = re.compile(rb"\n+")
# How the skimmer is placed in the envelope.
_ENVELOPE_HEADER, _ITEM_HEADER, _LINE_PAYLOAD, _PAYLOAD, _AFTER_PAYLOAD, _AS_IS = range(6)


class Skimmer:
    """The decompressed envelope, fed in pieces (``feed``), minus the payloads of the
    items ``wanted`` says no to (``end`` gives what is kept). Malformed envelopes are
    left for ``envelope.parse`` to name, except what only this reader can see: a
    skipped payload cut short or not followed by a newline."""

    def __init__(self, wanted: Callable[[str], bool], cap: int, envelope_cap: int) -> None:
        self.wanted = wanted
        self.cap = cap
        self.envelope_cap = envelope_cap
        self.kept: list[bytes] = []
        self.kept_size = 0
        self.seen = 0  # decompressed bytes fed
        self.state = _ENVELOPE_HEADER
        self.line = bytearray()
        self.items = 0  # item headers met, for messages
        self.kind = ""
        self.length = 0
        self.left = 0  # payload bytes still to pass
        self.keeping = True

    def _keep(self, data: bytes) -> None:
        self.kept_size += len(data)
        if self.kept_size > self.cap:
            raise PayloadTooLarge(
                f"request body exceeds {self.cap} bytes (decompressed, not counting the "
                "payloads of items that are not stored, such as attachments)"
            )
        self.kept.append(data)

    def feed(self, data: bytes) -> None:
        self.seen += len(data)
        if self.seen > self.envelope_cap:
            raise PayloadTooLarge(f"envelope exceeds {self.envelope_cap} bytes (decompressed)")
        pos, size = 0, len(data)
        while pos < size:
            if self.state == _AS_IS:
                self._keep(data[pos:])
                return
            if self.state == _PAYLOAD:
                step = min(self.left, size - pos)
                if self.keeping:
                    self._keep(data[pos : pos + step])
                self.left -= step
                pos += step
                if not self.left:
                    self.state = _AFTER_PAYLOAD
                continue
            if self.state == _AFTER_PAYLOAD:
                if data[pos] != 0x0A:
                    if self.keeping:  # envelope.parse names the wrong length
                        self.state = _AS_IS
                        continue
                    raise self._wrong_length()
                self._keep(b"\n")  # an empty payload is followed by its newline too
                pos += 1
                self.state = _ITEM_HEADER
                continue
            if self.state == _ITEM_HEADER and not self.line and data[pos] == 0x0A:
                # A run of blank lines between items, kept in one piece (line by line,
                # a flood of them cost a Python call each).
                end = _NEWLINES.match(data, pos).end()  # type: ignore[union-attr]  # data[pos] is one
                self._keep(data[pos:end])
                pos = end
                continue
            end = data.find(b"\n", pos)
            if end < 0:
                self.line += data[pos:]
                self._check_header_size()
                if len(self.line) > self.cap:
                    self._keep(bytes(self.line))  # too large either way: refused there
                return
            self.line += data[pos:end]
            self._check_header_size()
            pos = end + 1
            line = bytes(self.line)
            self.line.clear()
            self._on_line(line)

    def _check_header_size(self) -> None:
        """A header line (the envelope's, or an item's) over envelope.MAX_HEADER_BYTES is
        refused as it arrives, as ``envelope.parse`` refuses it."""
        if len(self.line) > envelope.MAX_HEADER_BYTES and self.state in (
            _ENVELOPE_HEADER,
            _ITEM_HEADER,
        ):
            what = "envelope header (line 1)" if self.state == _ENVELOPE_HEADER else None
            raise envelope.header_too_large(what or f"item {self.items + 1} header")

    def _on_line(self, line: bytes) -> None:
        if self.state != _ITEM_HEADER or not line.strip():
            # The envelope header, a payload without a length, or a blank line.
            self._keep(line + b"\n")
            if self.state != _ITEM_HEADER:
                self.state = _ITEM_HEADER
            return
        self.items += 1
        if self.items > envelope.MAX_ENVELOPE_ITEMS:
            # As it is read: each header kept costs a JSON read, and 20 MiB of tiny ones
            # beside an attachment held the loop 3.5-4.4 s before parse's 413 (diff review).
            raise envelope.too_many_items()
        try:
            # Repaired as envelope.parse repairs it: sentry-sdk copies an attachment's
            # file name into its header, and a lone surrogate there kept the whole
            # attachment, over the cap (diff review).
            # The repaired bytes are what is kept: envelope.parse would otherwise repair
            # them again, charging the request's repair budget twice (diff review).
            header, line = surrogates.read_repaired(orjson.loads, line, orjson.JSONDecodeError)
        except orjson.JSONDecodeError:
            header = None
        kind = header.get("type") if isinstance(header, dict) else None
        length = header.get("length") if isinstance(header, dict) else None
        valid = isinstance(length, int) and not isinstance(length, bool) and length >= 0
        if not isinstance(kind, str) or not kind or header is None:
            # envelope.parse refuses it, with its words; nothing further is skipped.
            self._keep(line + b"\n")
            self.state = _AS_IS
            return
        if not valid:
            self._keep(line + b"\n")
            self.state = _LINE_PAYLOAD if length is None else _AS_IS
            return
        assert isinstance(length, int) and header is not None
        self.kind, self.length, self.left = kind, length, length
        self.keeping = self.wanted(kind)
        if self.keeping:
            self._keep(line + b"\n")
        else:
            self._keep(_emptied(header) + b"\n")
        self.state = _PAYLOAD if length else _AFTER_PAYLOAD

    def _wrong_length(self) -> BadRequest:
        return BadRequest(
            f"item {self.items} ({self.kind}): the payload of length {self.length} is not "
            "followed by a newline; is the length wrong?"
        )

    def end(self) -> bytes:
        if self.state == _PAYLOAD and not self.keeping:
            raise BadRequest(
                f"item {self.items} ({self.kind}) is truncated: its header says length "
                f"{self.length}, but only {self.length - self.left} bytes follow"
            )
        if self.line:
            self._keep(bytes(self.line))
        return b"".join(self.kept)


def _emptied(header: dict[str, object]) -> bytes:
    """The item header as it stays in the envelope once its payload is left out."""
    try:
        return orjson.dumps({**header, "length": 0})
    except TypeError:  # orjson writes no integer beyond 64 bits; the type is what counts
        return orjson.dumps({"type": header["type"], "length": 0})


async def read_envelope(
    stream: AsyncReadable,
    length: int | None,
    encoding: str | None,
    wanted: Callable[[str], bool],
    cap: int,
    envelope_cap: int,
) -> bytes:
    """The decompressed envelope, with the payloads of items ``wanted`` refuses left out
    when (and only when) the whole of it is over ``cap`` (the module's docstring)."""
    envelope_cap = max(envelope_cap, cap)
    if length is not None and length > envelope_cap:
        raise PayloadTooLarge(f"request body exceeds {envelope_cap} bytes")
    parts: list[bytes] = []
    wire = 0
    while chunk := await stream.read(CHUNK):
        wire += len(chunk)
        parts.append(chunk)
        if wire > cap:
            break
    else:
        raw = b"".join(parts)
        try:
            return body.read_body(io.BytesIO(raw), encoding, cap)
        except PayloadTooLarge:
            # Compressed under the cap, over it once decompressed: skim it from memory.
            return await _skim_held(raw, encoding, wanted, cap, envelope_cap)
    # Over the cap on the wire: read on as it arrives.
    skimmer = Skimmer(wanted, cap, envelope_cap)
    decoder = _decoder(encoding, cap)
    for part in parts:
        await _feed(skimmer, decoder, part, encoding)
    del parts
    while chunk := await stream.read(CHUNK):
        wire += len(chunk)
        if wire > envelope_cap:
            raise PayloadTooLarge(f"request body exceeds {envelope_cap} bytes")
        await _feed(skimmer, decoder, chunk, encoding)
    await _finish(skimmer, decoder, encoding)
    return skimmer.end()


def _decoder(encoding: str | None, cap: int) -> body.Decoder | None:
    name = body.encoding_name(encoding)
    if name in body.IDENTITY:
        return None
    if name == "zstd":
        raise PayloadTooLarge(
            f"request body exceeds {cap} bytes; a zstd body larger than that is not "
            "read (gzip, deflate and br are, up to ERRORTRACK_MAX_ENVELOPE_BYTES)"
        )
    factory = body.DECODERS.get(name)
    if factory is None:
        raise body.unsupported(name)
    return factory()


async def _feed(
    skimmer: Skimmer, decoder: body.Decoder | None, data: bytes, encoding: str | None
) -> None:
    if decoder is None:
        skimmer.feed(data)
        return
    while True:
        try:
            # A small input can expand a lot: ask again while output comes, a chunk a
            # time, giving the loop back between chunks (64 KiB of compressed newlines
            # held it for seconds when decoded in one go; diff review).
            out = decoder.step(data, CHUNK)
        except body.CORRUPT as exc:
            raise body.corrupt(body.encoding_name(encoding), exc) from None
        if not out:
            return
        skimmer.feed(out)
        data = b""
        await asyncio.sleep(0)


async def _finish(skimmer: Skimmer, decoder: body.Decoder | None, encoding: str | None) -> None:
    if decoder is None:
        return
    await _feed(skimmer, decoder, b"", encoding)
    try:
        decoder.end()
    except body.CORRUPT as exc:
        raise body.corrupt(body.encoding_name(encoding), exc) from None


async def _skim_held(
    raw: bytes, encoding: str | None, wanted: Callable[[str], bool], cap: int, envelope_cap: int
) -> bytes:
    """A body held in memory (its compressed bytes under the cap), decoded into the
    skimmer a piece at a time, zstd included (its stream reader pulls from memory). It
    can expand to ``envelope_cap``: the loop is given back between pieces."""
    skimmer = Skimmer(wanted, cap, envelope_cap)
    pieces = (raw[i : i + CHUNK] for i in range(0, len(raw), CHUNK))
    if body.encoding_name(encoding) != "zstd":
        decoder = _decoder(encoding, cap)
        for piece in pieces:
            await _feed(skimmer, decoder, piece, encoding)
        await _finish(skimmer, decoder, encoding)
        return skimmer.end()
    try:
        for out in body.zstd_pieces(io.BytesIO(raw), envelope_cap):
            skimmer.feed(out)
            await asyncio.sleep(0)
    except body.CORRUPT as exc:
        raise body.corrupt("zstd", exc) from None
    return skimmer.end()
