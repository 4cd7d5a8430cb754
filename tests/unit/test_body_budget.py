"""The ingest body budget (``body.BodyBudget``): what requests hold at once is bounded,
a request alone always goes on, and every charge is given back."""

from __future__ import annotations

import asyncio

import pytest

from errortrack.errors import Unavailable
from errortrack.ingest.body import BodyBudget, Charge


class _Stream:
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def read(self, size: int | None = None, /) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


async def _drain(charge: Charge) -> int:
    total = 0
    while chunk := await charge.read(65536):
        total += len(chunk)
    return total


def test_a_request_over_the_budget_while_others_hold_bodies_is_a_503():
    budget = BodyBudget(100)
    first = Charge(budget, _Stream(b"a" * 60), 10**9)
    second = Charge(budget, _Stream(b"b" * 30, b"c" * 30), 10**9)
    assert asyncio.run(_drain(first)) == 60
    with pytest.raises(Unavailable) as refused:
        asyncio.run(_drain(second))
    assert refused.value.status == 503 and refused.value.retry_after == 2
    assert budget.refused == 1
    second.release()
    assert budget.held == 60  # the first request's body, still held
    first.release()
    assert budget.held == 0


def test_a_request_alone_goes_on_past_the_budget_and_gives_it_back():
    budget = BodyBudget(100)
    alone = Charge(budget, _Stream(b"x" * 80, b"y" * 80), 10**9)
    assert asyncio.run(_drain(alone)) == 160
    alone.take(500)  # its decompressed body too
    assert budget.held == 660 and budget.refused == 0
    alone.release()
    alone.release()  # a second release gives back nothing more
    assert budget.held == 0
    # Once it is gone the next request fits again.
    after = Charge(budget, _Stream(b"z" * 90), 10**9)
    assert asyncio.run(_drain(after)) == 90
    after.release()
    assert budget.held == 0


def test_a_request_is_charged_no_more_of_its_wire_than_a_reader_keeps():
    """An envelope over the body cap is skimmed: its attachments pass through, and what
    is kept is at most the cap, so the wire is charged up to the cap only."""
    budget = BodyBudget(10**9)
    skimmed = Charge(budget, _Stream(*[b"a" * 40] * 10), 100)
    assert asyncio.run(_drain(skimmed)) == 400
    assert budget.held == 100
    skimmed.take(90)  # what it kept, decompressed
    assert budget.held == 190
    skimmed.release()
    assert budget.held == 0
