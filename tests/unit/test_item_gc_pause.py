"""Large items are read with the cyclic GC paused (``items._gc_paused``): 12 MiB of nested
arrays in one attribute value took 1.2-1.6 s of the event loop, ~80 % of it the GC's."""

from __future__ import annotations

import datetime as dt
import gc

import pytest

from errortrack.errors import BadRequest
from errortrack.ingest import items
from errortrack.ingest.items import GC_PAUSE_FROM, ItemContext, dispatch

CTX = ItemContext(1, dt.datetime.now(dt.UTC), 90, {})


def test_the_gc_is_paused_for_a_large_item_only_and_back_on_after_it(monkeypatch):
    seen = []

    def handler(payload, headers, ctx):
        seen.append(gc.isenabled())
        if payload.startswith(b"!"):
            raise BadRequest("refused")
        return items.ItemRows()

    monkeypatch.setitem(items.HANDLERS, "probe", handler)
    assert gc.isenabled()
    dispatch("probe", b"x" * GC_PAUSE_FROM, {}, CTX)
    dispatch("probe", b"x" * (GC_PAUSE_FROM + 1), {}, CTX)
    with pytest.raises(BadRequest):
        dispatch("probe", b"!" * (GC_PAUSE_FROM + 1), {}, CTX)
    assert seen == [True, False, False]
    assert gc.isenabled()  # on again, after a refusal too
    # Left off when it was off already (someone else paused it).
    gc.disable()
    try:
        dispatch("probe", b"x" * (GC_PAUSE_FROM + 1), {}, CTX)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_large_log_item_of_nested_arrays_reads_the_same_with_the_gc_paused():
    nested = b"[" + b",".join([b"[[]]"] * 100_000) + b"]"
    log = b'{"items":[{"body":"x","attributes":{"k":{"value":' + nested + b',"type":"array"}}}]}'
    assert len(log) > GC_PAUSE_FROM
    rows = dispatch("log", log, {"type": "log"}, CTX)
    assert rows.log_count == 1 and nested in rows.log_lines
