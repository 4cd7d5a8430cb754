"""Bounded streaming decompression: each encoding, the cap, corrupt bodies."""

from __future__ import annotations

import io
import zlib

import pytest

from errortrack.errors import BadRequest, PayloadTooLarge
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


def test_unknown_encoding_is_400():
    with pytest.raises(BadRequest) as info:
        read_body(io.BytesIO(b"x"), "compress", 10)
    assert info.value.field == "Content-Encoding"
