"""Bounded streaming decompression: each encoding, the cap, corrupt bodies."""

from __future__ import annotations

import gzip
import io
import zlib

import brotli
import pytest

from errortrack.errors import BadRequest, PayloadTooLarge, UnsupportedContentEncoding
from errortrack.ingest import body
from errortrack.ingest.body import read_body
from tests.ingest_support import ENCODERS

DATA = b'{"event_id":"x"}\n' + b'{"type":"log"}\n{"items":[]}\n' * 20_000


class Trickle(io.BytesIO):
    """Returns at most 37 bytes per read, like a slow chunked upload."""

    def read(self, size: int = -1, /) -> bytes:
        return super().read(min(size, 37) if size >= 0 else 37)


@pytest.mark.parametrize("encoding", [*sorted(ENCODERS), None])
def test_each_encoding_round_trips(encoding):
    encoded = ENCODERS[encoding or "identity"](DATA)
    assert read_body(Trickle(encoded), encoding, len(DATA)) == DATA


def test_zstd_with_several_frames():
    import zstandard

    two = zstandard.ZstdCompressor().compress(DATA) + zstandard.ZstdCompressor().compress(b"end")
    assert read_body(Trickle(two), "zstd", 2 * len(DATA)) == DATA + b"end"


def test_raw_deflate_is_accepted_too():
    raw = zlib.compressobj(wbits=-15)
    encoded = raw.compress(DATA) + raw.flush()
    assert read_body(io.BytesIO(encoded), "deflate", len(DATA)) == DATA


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_decompressed_size_is_capped(encoding):
    with pytest.raises(PayloadTooLarge) as info:
        read_body(io.BytesIO(ENCODERS[encoding](DATA)), encoding, len(DATA) - 1)
    assert info.value.status == 413


def test_a_bomb_stops_at_the_cap_without_inflating_it_all():
    bomb = ENCODERS["gzip"](b"\0" * 200_000_000)  # ~200 KB on the wire
    with pytest.raises(PayloadTooLarge):
        read_body(io.BytesIO(bomb), "gzip", 1_000_000)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_corrupt_bodies_are_400(encoding):
    with pytest.raises(BadRequest) as info:
        read_body(io.BytesIO(b"definitely not compressed"), encoding, 10_000)
    assert f"not valid {encoding}" in info.value.message


def test_unknown_encoding_is_415_naming_the_codings_taken():
    with pytest.raises(UnsupportedContentEncoding) as info:
        read_body(io.BytesIO(b"x"), "compress", 10)
    assert (info.value.status, info.value.field) == (415, "Content-Encoding")
    assert info.value.headers() == {"Accept-Encoding": "gzip, x-gzip, deflate, br, zstd, identity"}


def _cut(encoding: str) -> bytes:
    """DATA compressed as a stream flushed halfway, then ended there: what a body cut off
    by a dropped connection or a proxy looks like (whole blocks, no end of stream)."""
    half = DATA[: len(DATA) // 2]
    if encoding in ("gzip", "deflate"):
        zipper = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
        return zipper.compress(half) + zipper.flush(zlib.Z_SYNC_FLUSH)
    if encoding == "br":
        import brotli

        compressor = brotli.Compressor()
        return compressor.process(half) + compressor.flush()
    import zstandard

    frame = zstandard.ZstdCompressor().compressobj()
    return frame.compress(half) + frame.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
@pytest.mark.parametrize("how", ["flushed", "last byte missing", "empty"])
def test_a_body_cut_short_is_400_not_what_it_held_so_far(encoding, how):
    encoded = {
        "flushed": _cut(encoding),
        "last byte missing": ENCODERS[encoding](DATA)[:-1],
        "empty": b"",
    }[how]
    with pytest.raises(BadRequest) as info:
        read_body(Trickle(encoded), encoding, len(DATA))
    assert info.value.message == (
        f"body is not valid {encoding}: it ends before the compressed stream does"
    )
    assert info.value.field == "Content-Encoding"


def test_every_gzip_member_is_read():
    members = ENCODERS["gzip"](DATA[:1000]) + ENCODERS["gzip"](b"") + ENCODERS["gzip"](DATA[1000:])
    assert read_body(Trickle(members), "gzip", len(DATA)) == DATA
    with pytest.raises(PayloadTooLarge):  # the cap counts all members
        read_body(io.BytesIO(members), "gzip", len(DATA) - 1)


@pytest.mark.parametrize("after", [b"garbage", b"\x1f", b"\x1f\x8b\x08"])
def test_what_follows_the_last_gzip_member_must_be_one_too(after):
    with pytest.raises(BadRequest) as info:
        read_body(io.BytesIO(ENCODERS["gzip"](DATA) + after), "gzip", len(DATA))
    assert info.value.message.startswith("body is not valid gzip: ")


@pytest.mark.parametrize("encoding", ["UTF-8", "utf-8"])
def test_content_encoding_utf8_is_no_encoding_as_relay_reads_it(encoding):
    # sentry.java.android 2.0.0 sends it with a plain body.
    assert read_body(io.BytesIO(DATA), encoding, len(DATA)) == DATA


def test_zstd_frames_of_every_block_kind_are_read_whole():
    import os

    import zstandard

    # Random bytes make raw blocks, zeros RLE blocks; with and without a checksum and a
    # content size, after a skippable frame, read 37 bytes at a time (headers cut).
    data = os.urandom(300_000) + b"\0" * 1_000_000 + DATA
    plain = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = stream.compress(data) + stream.flush()
    skippable = b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"abc"
    encoded = plain + skippable + streamed
    assert read_body(Trickle(encoded), "zstd", 2 * len(data)) == data + data


@pytest.mark.parametrize("wbits", [15, -15])
def test_bytes_after_the_end_of_a_deflate_stream_are_400(wbits):
    deflate = zlib.compressobj(wbits=wbits)
    encoded = deflate.compress(DATA) + deflate.flush()
    assert read_body(Trickle(encoded), "deflate", len(DATA)) == DATA
    with pytest.raises(BadRequest) as info:
        read_body(Trickle(encoded + b"x"), "deflate", len(DATA))
    assert info.value.message == (
        "body is not valid deflate: bytes follow the end of the deflate stream"
    )


def test_every_decoder_gives_all_its_output_in_bounded_steps():
    """Asked for at most 64 KiB a step, fed 64 KiB at a time (how ingest/skim.py reads a
    large envelope): brotli 1.2 held the end back while it said it took more input."""
    import random

    data = random.Random(7).randbytes(200_000)
    for name, encode in (
        ("br", brotli.compress),
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
    ):
        wire = encode(data)
        decoder = body.DECODERS[name]()
        out = []
        for i in range(0, len(wire), 65536):
            piece = wire[i : i + 65536]
            while chunk := decoder.step(piece, 65536):
                out.append(chunk)
                piece = b""
        while chunk := decoder.step(b"", 65536):
            out.append(chunk)
        decoder.end()
        assert b"".join(out) == data, name


def _frames(kind: str, n: int) -> bytes:
    """``n`` members (gzip) or frames (zstd, skippable) of nothing, back to back."""
    if kind == "gzip":
        return ENCODERS["gzip"](b"") * n
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(b"") * n
    return (0x184D2A50).to_bytes(4, "little") + (0).to_bytes(4, "little")  # skippable, empty


@pytest.mark.parametrize("kind", ["gzip", "zstd", "zstd-skippable"])
def test_a_body_of_more_members_or_frames_than_max_is_400(kind):
    # A Python step each: 1M empty gzip members (20 MiB) held the event loop ~1.5 s
    # before any key was checked, 19 MiB of empty zstd frames 3.6 s (DoS review,
    # thirtieth session). SDKs send one; the decoders stop past body.MAX_FRAMES.
    encoding = "gzip" if kind == "gzip" else "zstd"
    data = ENCODERS[encoding](b"tail")

    def body_of(n: int) -> bytes:
        if kind == "zstd-skippable":
            return _frames(kind, 1) * n + data
        return _frames(kind, n) + data

    assert read_body(Trickle(body_of(body.MAX_FRAMES - 1)), encoding, 2**20) == b"tail"
    with pytest.raises(BadRequest) as info:
        read_body(io.BytesIO(body_of(body.MAX_FRAMES)), encoding, 2**20)
    assert info.value.message == (
        f"body is not valid {encoding}: it holds more than {body.MAX_FRAMES:,} "
        f"{'members' if encoding == 'gzip' else 'frames'}; SDKs send one"
    )
    assert info.value.field == "Content-Encoding"


def test_a_brotli_body_of_bytes_that_decode_to_nothing_is_400():
    # Empty metadata meta-blocks (one byte each after the first) decode to nothing, in
    # C but slowly: 20 MiB held the event loop ~1 s, 100 MiB on the skim path 4.1 s
    # (DoS review, thirtieth session). Past body.MAX_OVERHEAD such bytes, a 400.
    import os

    def metadata(n: int) -> bytes:
        return bytes([0x0C]) + b"\x06" * (n - 1) + b"\x03"

    assert read_body(io.BytesIO(metadata(1000)), "br", 2**20) == b""
    with pytest.raises(BadRequest) as info:
        read_body(io.BytesIO(metadata(2 * body.MAX_OVERHEAD)), "br", 4 * body.MAX_OVERHEAD)
    assert info.value.message == (
        f"body is not valid br: its bytes outrun what they decode to by more than "
        f"{body.MAX_OVERHEAD:,}; SDKs send no such stream"
    )
    # Incompressible data (its brotli a little longer than itself) is read whole.
    noise = os.urandom(3 * body.MAX_OVERHEAD)
    packed = brotli.compress(noise, quality=0)
    assert len(packed) > len(noise)
    assert read_body(io.BytesIO(packed), "br", len(packed)) == noise
