"""The spool on a real disk: records, group fsync, sealing, torn tails, orphan adoption."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from errortrack.errors import Unavailable
from errortrack.spool import records
from errortrack.spool.segments import Spool
from errortrack.spool.writer import Writer


def _spool(root: Path, **kw) -> Spool:
    spool = Spool(
        root, max_bytes=kw.pop("max_bytes", 10**9), batch_rows=kw.pop("batch_rows", 1000), **kw
    )
    spool.open()
    return spool


def test_records_round_trip_and_stop_at_a_torn_tail():
    one = b"".join(records.encode({"logs": b'{"a":1}\n', "events": b'{"e":1}\n'}))
    two = b"".join(records.encode({"logs": b'{"a":2}\n', "spans": b""}))
    tables, intact = records.decode(one + two + two[:-3])
    assert tables == {"logs": b'{"a":1}\n{"a":2}\n', "events": b'{"e":1}\n'}
    assert intact == len(one) + len(two)
    flipped = bytearray(one)
    flipped[-2] ^= 0xFF
    assert records.decode(bytes(flipped)) == ({}, 0)


def test_record_size_is_known_before_encoding():
    # The size cap counts queued requests by this, before the syncer thread encodes them.
    for tables in (
        {"logs": b'{"a":1}\n'},
        {"logs": b"x" * 100_000, "events": b"", "spans": b'{"s":1}\n'},
        {"events": b""},
    ):
        assert records.size(tables) == len(b"".join(records.encode(tables)))


def test_concurrent_appends_share_fsyncs(tmp_path):
    spool = _spool(tmp_path)
    barrier = threading.Barrier(16)

    def send(i: int) -> None:
        barrier.wait()
        for j in range(20):
            spool.append({"logs": f'{{"n":{i * 100 + j}}}\n'.encode()}, 1)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0 < spool.syncs < 320  # fewer fsyncs than appends
    spool.seal()
    (path,) = spool.sealed()
    tables, _ = records.decode(path.read_bytes())
    assert sorted(tables["logs"].splitlines()) == sorted(
        f'{{"n":{i * 100 + j}}}'.encode() for i in range(16) for j in range(20)
    )


def test_seals_racing_group_commits_lose_and_repeat_nothing(tmp_path):
    # Appends seal at 7 rows while another thread seals by age all the time: every
    # waiter must be woken (no hang) and every record be in exactly one sealed segment.
    spool = _spool(tmp_path, batch_rows=7)
    stop = threading.Event()

    def send(i: int) -> None:
        for j in range(40):
            spool.append({"logs": f'{{"n":{i * 100 + j}}}\n'.encode()}, 1)

    def sealer() -> None:
        while not stop.is_set():
            spool.seal_due(0.0)

    senders = [threading.Thread(target=send, args=(i,)) for i in range(12)]
    ager = threading.Thread(target=sealer)
    ager.start()
    for t in senders:
        t.start()
    for t in senders:
        t.join(timeout=30)
        assert not t.is_alive()
    stop.set()
    ager.join()
    spool.seal()
    lines = []
    for path in spool.sealed():
        lines += records.decode(path.read_bytes())[0].get("logs", b"").splitlines()
    assert sorted(lines) == sorted(
        f'{{"n":{i * 100 + j}}}'.encode() for i in range(12) for j in range(40)
    )


def _lines(spool: Spool) -> list[bytes]:
    spool.seal()
    lines: list[bytes] = []
    for path in spool.sealed():
        lines += records.decode(path.read_bytes())[0].get("logs", b"").splitlines()
    return sorted(lines)


def test_async_appends_resolve_only_once_durable_and_share_fsyncs(tmp_path, monkeypatch):
    spool = _spool(tmp_path)
    real = os.fdatasync
    synced: dict[str, int] = {}  # segment file -> bytes covered by its last fdatasync

    def fdatasync(fd: int) -> None:
        size = os.fstat(fd).st_size
        real(fd)
        synced[os.readlink(f"/proc/self/fd/{fd}")] = size

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    early = []

    async def send(i: int) -> None:
        await spool.append_async({"logs": b'{"n":%d}\n' % i}, 1)
        # Resolved only once a sync covered the record's bytes in its segment.
        for path, size in synced.items():
            at = Path(path).read_bytes().find(b'{"n":%d}\n' % i)
            if at >= 0 and at + 8 <= size:
                return
        early.append(i)

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(*(send(i) for i in range(200))), 30)

    asyncio.run(main())
    assert early == []
    assert spool._synced == spool._written == 200
    assert 0 < spool.syncs < 200  # the loop's 200 requests shared fsyncs
    assert _lines(spool) == sorted(b'{"n":%d}' % i for i in range(200))
    spool.close()


def test_async_appends_over_the_cap_are_503_at_once(tmp_path):
    spool = _spool(tmp_path, max_bytes=300)

    async def main() -> None:
        await spool.append_async({"logs": b"x" * 400}, 1)
        with pytest.raises(Unavailable):
            spool.append_async({"logs": b"y"}, 1)

    asyncio.run(main())
    spool.close()


def test_async_and_blocking_appends_mix_with_seals_and_lose_nothing(tmp_path):
    # Loop requests, thread requests and an age sealer all at once, segments sealing at
    # 7 rows: nobody hangs, every record is in exactly one sealed segment.
    spool = _spool(tmp_path, batch_rows=7)
    stop = threading.Event()

    def send(i: int) -> None:
        for j in range(30):
            spool.append({"logs": b'{"t":%d}\n' % (i * 100 + j)}, 1)

    def sealer() -> None:
        while not stop.is_set():
            spool.seal_due(0.0)

    async def loop_sends() -> None:
        sends = [spool.append_async({"logs": b'{"a":%d}\n' % i}, 1) for i in range(300)]
        await asyncio.wait_for(asyncio.gather(*sends), 30)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    threads.append(threading.Thread(target=sealer))
    for t in threads:
        t.start()
    asyncio.run(loop_sends())
    for t in threads[:-1]:
        t.join(timeout=30)
        assert not t.is_alive()
    stop.set()
    threads[-1].join()
    assert _lines(spool) == sorted(
        [b'{"a":%d}' % i for i in range(300)]
        + [b'{"t":%d}' % (i * 100 + j) for i in range(6) for j in range(30)]
    )
    spool.close()


def test_async_appends_seal_full_segments_off_the_loop(tmp_path):
    spool = _spool(tmp_path, batch_rows=5)

    async def main() -> None:
        for i in range(12):  # one at a time: each leads its own sync
            await spool.append_async({"logs": b'{"i":%d}\n' % i}, 1)

    asyncio.run(main())
    for _ in range(100):  # the syncer seals right after resolving the request
        if len(spool.sealed()) == 2:
            break
        time.sleep(0.01)
    assert [records.decode(p.read_bytes())[0]["logs"].count(b"\n") for p in spool.sealed()] == [
        5,
        5,
    ]
    spool.close()


def test_a_failed_sync_fails_the_request_that_waits_for_it(tmp_path, monkeypatch):
    spool = _spool(tmp_path)
    real = os.fdatasync
    failing = {"left": 1}

    def fdatasync(fd: int) -> None:
        if failing["left"]:
            failing["left"] -= 1
            raise OSError(5, "injected: disk error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def main() -> None:
        with pytest.raises(Unavailable, match=r"cannot sync: .*injected"):
            await spool.append_async({"logs": b'{"i":1}\n'}, 1)
        await asyncio.wait_for(spool.append_async({"logs": b'{"i":2}\n'}, 1), 10)

    asyncio.run(main())
    assert spool._synced == 2  # the next sync covered both records
    spool.close()


def _failing_once(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """The ``call``-th fdatasync from now fails with EIO, the others sync."""
    real = os.fdatasync
    calls = {"n": 0}

    def fdatasync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == call:
            raise OSError(5, "injected: disk error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)


def test_a_failed_sync_ends_its_segment_so_no_acknowledged_record_follows_a_hole(
    tmp_path, monkeypatch
):
    # Linux may drop the pages of a failed writeback and let the next fdatasync succeed:
    # on disk the failed record is then zeros, and reading a segment stops at a record
    # that fails its checksum. What is acknowledged after it must not be in that file.
    spool = _spool(tmp_path)
    spool.append({"logs": b'{"i":1}\n'}, 1)
    path = spool._current.path  # type: ignore[union-attr]
    start = path.stat().st_size
    _failing_once(monkeypatch, 1)
    with pytest.raises(Unavailable, match="cannot sync"):
        spool.append({"logs": b'{"i":2,"pad":"%s"}\n' % (b"x" * 20000)}, 1)
    end = path.stat().st_size
    for i in range(3, 8):
        spool.append({"logs": b'{"i":%d}\n' % i}, 1)
    spool.close()
    # What the disk may hold after a crash: the pages wholly inside the failed record
    # never written.
    page = 4096
    first_page, last_page = (start + page - 1) // page * page, end // page * page
    assert last_page > first_page
    with path.open("r+b") as f:
        f.seek(first_page)
        f.write(b"\0" * (last_page - first_page))
    replay = Spool(tmp_path, max_bytes=10**9, batch_rows=1000)
    replay.open()
    found = [
        json.loads(line)["i"]
        for path in replay.sealed()
        for line in records.decode(path.read_bytes())[0].get("logs", b"").splitlines()
    ]
    assert sorted(found) == [1, 3, 4, 5, 6, 7]
    replay.close()


def test_a_failed_seal_hands_its_segment_to_the_writer(tmp_path, monkeypatch):
    # Not left off the books until the next start: the records acknowledged in it before
    # are inserted now, and its bytes stop counting against the cap once they are.
    spool = _spool(tmp_path)
    spool.append({"logs": b'{"i":1}\n'}, 1)
    _failing_once(monkeypatch, 1)
    spool.seal()  # its fdatasync fails: logged, not raised (stop and close go on)
    spool.append({"logs": b'{"i":2}\n'}, 1)
    inserted: list[bytes] = []
    writer = Writer(spool, lambda table, data, token: inserted.extend(data.splitlines()))
    writer.drain()
    assert sorted(inserted) == [b'{"i":1}', b'{"i":2}']
    assert spool.pending() == 0 and spool.size == 0
    spool.close()


def _wait_queued(spool: Spool, n: int) -> None:
    """Until ``n`` records wait in the syncer thread's queue (it is busy syncing)."""
    deadline = time.monotonic() + 10
    while spool._syncer_queue().qsize() < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert spool._syncer_queue().qsize() == n


def test_a_failed_sync_fails_every_request_it_covered(tmp_path, monkeypatch):
    # Not only its leader: a retried fdatasync could succeed although the kernel dropped
    # the pages the failed one should have written, so nobody it covered gets a 200.
    spool = _spool(tmp_path)
    real = os.fdatasync
    calls = {"n": 0}
    first_sync, release = threading.Event(), threading.Event()

    def fdatasync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # request 0's sync; 1-5 queue for the next one meanwhile
            first_sync.set()
            release.wait(10)
        elif calls["n"] == 2:  # the next sync covers 1-5, and fails
            raise OSError(5, "injected: disk error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    results: dict[int, str] = {}

    def send(i: int) -> None:
        try:
            spool.append({"logs": b'{"i":%d}\n' % i}, 1)
            results[i] = "ok"
        except Unavailable:
            results[i] = "503"

    first = threading.Thread(target=send, args=(0,))
    first.start()
    assert first_sync.wait(10)
    others = [threading.Thread(target=send, args=(i,)) for i in range(1, 6)]
    for t in others:
        t.start()
    _wait_queued(spool, 5)
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert results == {0: "ok", 1: "503", 2: "503", 3: "503", 4: "503", 5: "503"}
    send(6)
    assert results[6] == "ok"  # the spool goes on
    spool.close()


def test_a_request_whose_loop_is_gone_does_not_stop_the_spool(tmp_path):
    # A request on a loop that closed before its sync (a server stopping): the sync that
    # covers it must still finish, and the spool must still seal and close.
    spool = _spool(tmp_path)
    gate, release = threading.Event(), threading.Event()

    def slow() -> None:
        spool.append({"logs": b'{"t":1}\n'}, 1)  # its sync blocks below

    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if not gate.is_set():
            gate.set()
            release.wait(10)
        real(fd)

    os_patch = pytest.MonkeyPatch()
    os_patch.setattr(os, "fdatasync", fdatasync)
    try:
        leader = threading.Thread(target=slow)
        leader.start()
        assert gate.wait(10)
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_queue_one(spool))  # queued behind that sync
        _wait_queued(spool, 1)
        loop.close()
        release.set()
        leader.join(10)
        assert not leader.is_alive()
    finally:
        os_patch.undo()
    spool.close()  # seals both records; no hang, no error
    assert _lines(spool) == [b'{"a":1}', b'{"t":1}']


async def _queue_one(spool: Spool) -> None:
    spool.append_async({"logs": b'{"a":1}\n'}, 1)  # not awaited: its loop goes away


def test_close_ends_the_syncer_thread(tmp_path):
    spool = _spool(tmp_path)
    before = set(threading.enumerate())

    async def main() -> None:
        await spool.append_async({"logs": b'{"i":1}\n'}, 1)

    asyncio.run(main())
    syncers = [t for t in set(threading.enumerate()) - before if t.name == "spool-sync"]
    assert len(syncers) == 1
    spool.close()
    for t in syncers:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in syncers)


def test_an_append_after_close_is_503_and_writes_nothing(tmp_path):
    # Writer.stop during a reload while a slow request is still read: the directory's
    # lock is let go, so another worker may adopt (insert, delete) what is in it.
    spool = _spool(tmp_path)
    spool.append({"logs": b'{"n":1}\n'}, 1)
    spool.close()
    [sealed] = spool.sealed()
    before = set(threading.enumerate())
    with pytest.raises(Unavailable) as info:
        spool.append({"logs": b'{"n":2}\n'}, 1)
    assert info.value.status == 503 and info.value.headers()["Retry-After"]
    assert not [t for t in set(threading.enumerate()) - before if t.name == "spool-sync"]
    assert spool.pending() == 1 and list(spool.dir.glob("*.seg")) == [sealed]
    other = _spool(tmp_path)  # adopts the closed worker's segment
    assert records.decode(other.sealed()[0].read_bytes())[0] == {"logs": b'{"n":1}\n'}


def test_requests_the_syncer_had_not_written_when_close_gave_up_fail_instead_of_hanging(
    tmp_path, monkeypatch
):
    from errortrack.spool import segments

    spool = _spool(tmp_path)
    monkeypatch.setattr(segments, "CLOSE_WAIT_SECONDS", 0.2)
    entered, release = threading.Event(), threading.Event()
    encode = records.encode

    def stuck(tables):  # a syncer thread held up (a hung disk) with a request in hand
        entered.set()
        release.wait(10)
        return encode(tables)

    monkeypatch.setattr(records, "encode", stuck)

    async def main() -> list[BaseException | None]:
        taken = spool.append_async({"logs": b'{"n":1}\n'}, 1)
        assert await asyncio.to_thread(entered.wait, 5)
        queued = spool.append_async({"logs": b'{"n":2}\n'}, 1)
        await asyncio.to_thread(spool.close)  # gives up on the thread after 0.2 s
        release.set()
        done = await asyncio.wait_for(
            asyncio.gather(taken, queued, return_exceptions=True), timeout=5
        )
        return list(done)

    answers = asyncio.run(main())
    assert all(isinstance(a, Unavailable) for a in answers), answers
    # Nothing was written into the directory let go, and the spool's count is back to 0.
    assert list(spool.dir.glob("*.seg")) == [] and spool.pending() == 0
    assert spool._queued_in == spool._queued_out


def test_segment_seals_at_batch_rows_and_writer_deletes_after_insert(tmp_path):
    spool = _spool(tmp_path, batch_rows=3)
    inserted = []
    writer = Writer(spool, lambda table, data, token: inserted.append((table, data, token)))
    for i in range(4):
        spool.append({"logs": b'{"i":%d}\n' % i}, 1)
    assert spool.pending() == 2  # one sealed (3 rows), one open (1 row)
    writer.drain()
    assert [d.count(b"\n") for _, d, _ in inserted] == [3, 1]
    assert len({t for _, _, t in inserted}) == 2
    assert list(spool.dir.glob("*.seg")) == [] and spool.size == 0


def test_segment_seals_at_batch_bytes_whatever_its_rows(tmp_path):
    """Big rows (900 KB events) are sealed by size too: a segment holding few rows grew to
    615 MB while the writer was busy, and the writer holds a batch several times over."""
    spool = _spool(tmp_path, batch_rows=1000, batch_bytes=10_000)
    inserted = []
    writer = Writer(spool, lambda table, data, token: inserted.append((table, data)))
    row = b'{"payload":"%s"}\n' % (b"x" * 4000)
    for _ in range(7):
        spool.append({"events": row}, 1)
    # 3 records reach 10,000 bytes (each is a row and a small header): two sealed, one open.
    assert len(spool.sealed()) == 2 and spool.pending() == 3
    assert all(p.stat().st_size < 10_000 + 2 * len(row) for p in spool.sealed())
    writer.drain()
    assert [data.count(b"\n") for _, data in inserted] == [3, 3, 1]


def _sealed_soon(spool: Spool) -> list[Path]:
    """The sealed segments once there are any. A full segment is sealed by the syncer
    thread just after the sync that answered its last append, so the append can return
    first (a CI run of the thirty-first session saw none yet)."""
    deadline = time.monotonic() + 5
    while not spool.sealed() and time.monotonic() < deadline:
        time.sleep(0.01)
    return spool.sealed()


def test_deleting_an_inserted_segment_does_not_hold_up_appends(tmp_path, monkeypatch):
    """Deleting a big segment takes milliseconds; requests appended meanwhile are written
    and synced (their 200s sent) without waiting for it."""
    spool = _spool(tmp_path, batch_rows=1)
    spool.append({"logs": b'{"i":0}\n'}, 1)  # a full segment: sealed
    [inserted] = _sealed_soon(spool)
    entered, release = threading.Event(), threading.Event()
    unlink = Path.unlink

    def slow_unlink(self, *args, **kwargs):
        if self == inserted:
            entered.set()
            release.wait(10)
        return unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", slow_unlink)
    deleting = threading.Thread(target=spool.done, args=(inserted,))
    deleting.start()
    assert entered.wait(5)
    appending = threading.Thread(target=spool.append, args=({"logs": b'{"i":1}\n'}, 1))
    appending.start()
    appending.join(3)
    appended_meanwhile = not appending.is_alive()
    release.set()
    deleting.join(5)
    appending.join(5)
    assert appended_meanwhile
    [later] = _sealed_soon(spool)
    assert later != inserted and not inserted.exists()
    assert records.decode(later.read_bytes())[0] == {"logs": b'{"i":1}\n'}
    assert spool.size == later.stat().st_size


def _three_records(spool: Spool) -> tuple[Path, int]:
    for i in range(3):
        spool.append({"logs": f'{{"n":{i}}}\n'.encode()}, 1)  # three 200s
    spool.seal()
    return spool.sealed()[-1], len(b"".join(records.encode({"logs": b'{"n":0}\n'})))


def test_a_bad_record_before_others_keeps_its_segment_in_damaged_after_inserting_those_before(
    tmp_path, caplog
):
    spool = _spool(tmp_path)
    segment, one = _three_records(spool)
    raw = bytearray(segment.read_bytes())
    raw[one + 9] ^= 0xFF  # one flipped bit in record 2 (bit rot, a bad sector)
    segment.write_bytes(bytes(raw))
    inserted: list[bytes] = []
    writer = Writer(spool, lambda table, data, token: inserted.append(data))
    with caplog.at_level("WARNING", logger="errortrack.spool.writer"):
        assert writer.step()
    assert inserted == [b'{"n":0}\n']  # record 3 is not read past the bad one...
    kept = tmp_path / "damaged" / segment.name
    assert kept.read_bytes() == raw and not segment.exists()  # ...but kept, not deleted
    assert spool.pending() == 0 and spool.size == 0
    [said] = caplog.records
    assert said.levelname == "ERROR" and "damaged" in said.getMessage()
    assert f"at byte {one} of {len(raw)}" in said.getMessage()
    # The same in the last record of a segment this process wrote and synced whole: no
    # crash can have cut it short, so it is damage too.
    segment, one = _three_records(spool)
    raw = bytearray(segment.read_bytes())
    raw[-1] ^= 0xFF
    segment.write_bytes(bytes(raw))
    assert writer.step()
    assert (tmp_path / "damaged" / segment.name).exists() and not segment.exists()


def test_an_adopted_segment_loses_only_a_torn_tail_and_is_kept_when_more_follows(tmp_path, caplog):
    crashed = _spool(tmp_path)
    torn, one = _three_records(crashed)
    torn.write_bytes(torn.read_bytes()[: 2 * one + 5])  # a crash cut record 3 short
    damaged, _ = _three_records(crashed)
    raw = bytearray(damaged.read_bytes())
    raw[one + 9] ^= 0xFF  # a bad record followed by a whole one: not a torn write
    damaged.write_bytes(bytes(raw))
    # One bit of record 2's length: its stated end passes the segment's, as a torn
    # write's does, but a whole record follows (it was dropped with a warning).
    stretched, _ = _three_records(crashed)
    raw = bytearray(stretched.read_bytes())
    raw[one + 3] ^= 0x01
    stretched.write_bytes(bytes(raw))
    # A crash in a record's rows (its header whole): torn, whatever those bytes hold.
    torn_rows, _ = _three_records(crashed)
    torn_rows.write_bytes(torn_rows.read_bytes()[: 2 * one + 20])
    os.close(crashed._lock_file)  # the process dies
    spool = _spool(tmp_path)  # adopts them all
    inserted: list[bytes] = []
    writer = Writer(spool, lambda table, data, token: inserted.append(data))
    with caplog.at_level("WARNING", logger="errortrack.spool.writer"):
        writer.drain()
    two, first = b'{"n":0}\n{"n":1}\n', b'{"n":0}\n'
    assert inserted == [two, first, first, two]
    assert sorted(p.name for p in (tmp_path / "damaged").iterdir()) == sorted(
        [damaged.name, stretched.name]
    )
    assert not list(tmp_path.glob("w-*/*.seg")) and spool.size == 0
    warned, error, stretched_error, torn_warning = caplog.records
    assert warned.levelname == "WARNING" and "5 bytes of a record cut short" in warned.message
    assert error.levelname == "ERROR" and damaged.name in error.getMessage()
    assert stretched_error.levelname == "ERROR" and stretched.name in stretched_error.getMessage()
    assert torn_warning.levelname == "WARNING" and "20 bytes" in torn_warning.getMessage()


def test_a_failed_sync_of_the_move_to_damaged_does_not_stall_the_writer(tmp_path, monkeypatch):
    # The segment was renamed, then an EIO from the directory's fsync left it in the
    # writer's queue under its old name: every retry met FileNotFoundError, and no later
    # segment was inserted until a restart.
    from errortrack.spool import ownership

    spool = _spool(tmp_path)
    segment, one = _three_records(spool)
    raw = bytearray(segment.read_bytes())
    raw[one + 9] ^= 0xFF
    segment.write_bytes(bytes(raw))
    spool.append({"logs": b'{"later":1}\n'}, 1)  # acknowledged after it
    spool.seal()
    real = ownership.fsync_dir
    refused = []

    def eio_once(path):
        if path.name == "damaged" and not refused:
            refused.append(path)
            raise OSError(5, "Input/output error")
        return real(path)

    monkeypatch.setattr(ownership, "fsync_dir", eio_once)
    inserted: list[bytes] = []
    writer = Writer(spool, lambda table, data, token: inserted.append(data))
    writer.drain()
    assert refused and inserted == [b'{"n":0}\n', b'{"later":1}\n']
    assert (tmp_path / "damaged" / segment.name).exists()
    assert spool.pending() == 0 and spool.size == 0


def test_failed_insert_keeps_the_segment(tmp_path):
    spool = _spool(tmp_path)

    def broken(table, data, token):
        raise ConnectionError("clickhouse down")

    writer = Writer(spool, broken)
    spool.append({"logs": b'{"i":1}\n'}, 1)
    with pytest.raises(ConnectionError):
        writer.drain()
    assert len(list(spool.dir.glob("*.seg"))) == 1 and spool.pending() == 1


def test_hook_failure_counts_as_a_failed_insert(tmp_path):
    spool = _spool(tmp_path)
    seen = []

    def hook(rows, token, enclosing, counted=False):
        raise RuntimeError("relational store down")

    writer = Writer(spool, lambda *a: seen.append(a), hooks={"events": hook})
    spool.append({"logs": b'{"i":1}\n', "events": b'{"e":1}\n'}, 2)
    with pytest.raises(RuntimeError):
        writer.drain()
    assert spool.pending() == 1
    writer.hooks["events"] = lambda rows, token, enclosing, counted=False: [
        {**r, "issue_id": 7} for r in rows
    ]
    writer.drain()
    assert seen[-1][0] == "events" and seen[-1][1] == b'{"e":1,"issue_id":7}\n'
    assert seen[-1][2].endswith(":events")


def test_over_the_cap_is_503(tmp_path):
    spool = _spool(tmp_path, max_bytes=100)
    spool.append({"logs": b"x" * 200}, 1)
    with pytest.raises(Unavailable) as info:
        spool.append({"logs": b"y"}, 1)
    assert info.value.status == 503 and info.value.headers()["Retry-After"]


def test_a_new_process_adopts_orphans_but_not_live_directories(tmp_path):
    # A live owner in another process keeps its directory.
    live = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom errortrack.spool.segments import Spool\n"
            "s = Spool(Path(sys.argv[1]), max_bytes=10**9, batch_rows=10); s.open()\n"
            "s.append({'logs': b'{\"l\":1}\\n'}, 1); s.seal(); print(s.dir.name, flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        live_dir = tmp_path / live.stdout.readline().strip()
        dead = _spool(tmp_path)
        dead.append({"logs": b'{"d":1}\n'}, 1)
        dead.seal()
        dead.close()  # as if its process were gone: lock released, segment left behind
        new = _spool(tmp_path)
        names = [p.parent for p in new.sealed()]
        assert names == [new.dir]  # the dead one's segment, moved in
        assert not dead.dir.exists()
        assert len(list(live_dir.glob("*.seg"))) == 1
    finally:
        live.kill()
        live.wait()
    newest = _spool(tmp_path)
    assert len(newest.sealed()) == 1  # the live one died: now adopted too


def test_workers_starting_together_never_adopt_each_other(tmp_path):
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom errortrack.spool.segments import Spool\n"
        "s = Spool(Path(sys.argv[1]), max_bytes=10**9, batch_rows=10); s.open()\n"
        "s.append({'logs': b'{}\\n'}, 1); s.seal(); print(s.dir.name, flush=True); time.sleep(3)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    try:
        names = [p.stdout.readline().strip() for p in procs]
        assert all(names) and len(set(names)) == 6
        for name in names:
            assert len(list((tmp_path / name).glob("*.seg"))) == 1
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_orphan_adopted_by_another_worker_meanwhile_is_skipped(tmp_path, monkeypatch):
    # Workers starting together after a crash: another one adopts and removes an orphan
    # directory between this one's listing and its lock. Nothing is left there for this
    # one, and its start must not fail (gunicorn stops the server on a failed boot).
    from errortrack.spool import ownership

    orphan = _spool(tmp_path)
    orphan.append({"logs": b'{"o":1}\n'}, 1)
    orphan.close()
    other = _spool(tmp_path / "elsewhere")
    real = ownership.lock
    raced: list[Path] = []

    def lock_after_the_other_adopted(directory: Path) -> int | None:
        if directory == orphan.dir and not raced:
            raced.append(directory)
            ownership.adopt_orphans(tmp_path, other.dir, ".seg")  # the other worker
        return real(directory)

    monkeypatch.setattr(ownership, "lock", lock_after_the_other_adopted)
    new = _spool(tmp_path)
    assert raced and new.sealed() == []
    assert [p.parent for p in other.dir.glob("*.seg")] == [other.dir]


def test_decode_row_leaves_a_trailing_payload_raw_and_round_trips():
    import orjson

    from errortrack.spool.writer import decode_row

    payload = b'{"a": [1, 2.50], "payload":{"b":"\\"x\\""},"c":"\xc3\xa9"}'
    row = {
        "project_id": 1,
        "title": 'KeyError: \',"payload":\' said "no"',  # the key's text inside a value
        "retention_days": 30,
        "payload": orjson.Fragment(payload),
    }
    line = orjson.dumps(row)
    decoded = decode_row(line)
    assert isinstance(decoded["payload"], orjson.Fragment)
    assert {k: v for k, v in decoded.items() if k != "payload"} == {
        k: v for k, v in row.items() if k != "payload"
    }
    decoded["issue_id"] = 7
    assert orjson.loads(orjson.dumps(decoded)) == {**orjson.loads(line), "issue_id": 7}
    assert orjson.dumps(decoded["payload"]) == payload
    # A payload sent as a JSON string (a body with newlines) is passed through too.
    text = orjson.dumps({"project_id": 1, "payload": "{\n}"})
    assert orjson.dumps(decode_row(text)) == text
    # Rows of another shape (an older spool with retention_days last) are parsed whole.
    old = orjson.dumps({"project_id": 1, "payload": "{}", "retention_days": 30})
    assert decode_row(old) == orjson.loads(old)
    assert decode_row(b'{"a":1}') == {"a": 1}


# A full disk, for real: the child process may grow no file past a limit
# (RLIMIT_FSIZE; Python ignores SIGXFSZ, so a write past it is short, then fails with
# EFBIG, as one on a full disk is short, then fails with ENOSPC), or open no more files
# (RLIMIT_NOFILE). In a child, so that no file of pytest's meets the limits.
_LIMITED_CHILD = r"""
import asyncio, json, os, resource, sys
from pathlib import Path
from errortrack.errors import Unavailable
from errortrack.spool import records
from errortrack.spool.segments import Spool

root, case = Path(sys.argv[1]), sys.argv[2]
spool = Spool(root, max_bytes=10**9, batch_rows=10**6)
spool.open()
loop = asyncio.new_event_loop()  # made before any limit: it needs descriptors of its own
acked, refused = [], []

def send(n):
    try:
        line = b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * 1000)

        async def durable():
            await spool.append_async({"logs": line}, 1)

        loop.run_until_complete(durable())
        acked.append(n)
    except Unavailable as exc:
        refused.append(str(exc))

def limited(which, soft, sends):
    old = resource.getrlimit(which)
    resource.setrlimit(which, (soft, old[1]))
    try:
        for n in sends:
            send(n)
    finally:
        resource.setrlimit(which, old)

send(0)
if case == "file size":
    limited(resource.RLIMIT_FSIZE, 16384, range(1, 40))
elif case == "file size, no cut":
    def refuse(fd, length):
        raise OSError(5, "injected: cannot truncate")
    os.ftruncate = refuse
    limited(resource.RLIMIT_FSIZE, 16384, range(1, 40))
else:  # descriptors
    spool.seal()  # the next record needs a new segment
    lowest = os.dup(0)
    os.close(lowest)
    limited(resource.RLIMIT_NOFILE, lowest, [1])  # none left for the segment
    limited(resource.RLIMIT_NOFILE, lowest + 1, [2])  # one: none to sync its directory
send(100)
spool.seal()
stored, torn = [], 0
for path in spool.sealed():
    data = path.read_bytes()
    tables, intact = records.decode(data)
    stored += [json.loads(line)["n"] for line in bytes(tables.get("logs", b"")).splitlines()]
    torn += len(data) - intact
print(json.dumps({"acked": acked, "refused": refused, "stored": stored, "torn": torn,
                  "files": sorted(p.name for p in spool.dir.iterdir())}))
"""


def _limited(tmp_path: Path, case: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _LIMITED_CHILD, str(tmp_path), case],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_full_disk_refuses_requests_with_503_and_keeps_every_acknowledged_record(tmp_path):
    got = _limited(tmp_path, "file size")
    # Records fit until the file reaches the limit; from there every append is refused
    # (a 503 with Retry-After at the endpoint), and one after the space is back lands.
    assert 5 < len(got["acked"]) < 20
    assert got["acked"] == [*range(len(got["acked"]) - 1), 100]
    assert len(got["refused"]) == 40 - len(got["acked"]) + 1
    assert all("the ingest spool cannot write: " in why for why in got["refused"])
    # Each partial record was cut off, so the one written after them is read back.
    assert got["stored"] == got["acked"]
    assert got["torn"] == 0


def test_a_partial_record_that_cannot_be_cut_off_ends_its_segment(tmp_path):
    got = _limited(tmp_path, "file size, no cut")
    # The torn bytes stay at the end of a sealed segment, and the next record goes into
    # a new one: every acknowledged record is still read back.
    assert got["acked"][-1] == 100 and len(got["acked"]) > 5
    assert got["stored"] == got["acked"]
    assert got["torn"] > 0


def test_a_segment_that_cannot_be_made_durable_takes_no_records(tmp_path):
    got = _limited(tmp_path, "descriptors")
    assert got["acked"] == [0, 100]
    assert len(got["refused"]) == 2
    assert all("the ingest spool cannot write: " in why for why in got["refused"])
    assert "Too many open files" in got["refused"][0]
    # The segment whose directory entry could not be synced was removed, not reused.
    assert len([name for name in got["files"] if name.endswith(".seg")]) == 2
    assert got["stored"] == [0, 100]


def test_staging_directories_left_by_a_crash_are_removed_but_not_fresh_or_locked_ones(
    tmp_path,
):
    # A crash between a worker's mkdir of .new-w-* and its rename leaves the directory
    # (with its lock file) behind; nothing adopts it, so the next start removes it.
    from errortrack.spool import ownership

    def staging(name: str, age: float) -> Path:
        path = tmp_path / f".new-w-{name}"
        path.mkdir(parents=True)
        (path / "lock").touch()
        then = time.time() - age
        os.utime(path, (then, then))
        return path

    stale = staging("1-dead", ownership.STALE_STAGING_SECONDS + 5)
    fresh = staging("2-fresh", 0)  # maybe a worker starting now, about to lock it
    held = staging("3-held", ownership.STALE_STAGING_SECONDS + 5)
    fd = ownership.lock(held)  # a live process between its lock and its rename
    try:
        spool = _spool(tmp_path)
        assert not stale.exists()
        assert fresh.is_dir() and held.is_dir()
        assert spool.dir is not None and spool.dir.name.startswith("w-")
    finally:
        assert fd is not None
        os.close(fd)


def test_a_torn_marker_line_is_cut_before_the_next_range_and_never_read(tmp_path):
    from errortrack.spool.segments import bisect_marker

    spool = _spool(tmp_path)
    spool.append({"logs": b'{"a":1}\n'}, 1)
    spool.seal()
    [segment] = spool.sealed()
    spool.mark_bisect(segment, "logs")
    marker = bisect_marker(segment, "logs")
    marker.write_bytes(b"0-8\n4-")  # a crash cut the second line short
    assert spool.splits(segment, "logs") == {(0, 8)}
    spool.record_split(segment, "logs", 4, 8)
    assert marker.read_bytes() == b"0-8\n4-8\n"  # not "4-4-8"
    # A marker where a range joined a torn line (written before the cut): that line is
    # skipped, the others are read.
    marker.write_bytes(b"0-8\n4-4-8\n4-6\n")
    assert spool.splits(segment, "logs") == {(0, 8), (4, 6)}


# A marker line written short, for real (RLIMIT_FSIZE, in a child as _LIMITED_CHILD).
_SHORT_MARKER_CHILD = r"""
import json, resource, sys
from pathlib import Path
from errortrack.spool.segments import Spool, bisect_marker

spool = Spool(Path(sys.argv[1]), max_bytes=10**9, batch_rows=1000)
spool.open()
spool.append({"logs": b'{"n":1}\n'}, 1)
spool.seal()
[segment] = spool.sealed()
spool.mark_bisect(segment, "logs")
spool.record_split(segment, "logs", 0, 8)  # "0-8\n": 4 bytes
old = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (6, old[1]))  # room for 2 more: "4-8\n" is 4
try:
    spool.record_split(segment, "logs", 4, 8)
    error = None
except OSError as exc:
    error = str(exc)
finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, old)
print(json.dumps({"error": error, "marker": bisect_marker(segment, "logs").read_text(),
                  "splits": sorted(spool.splits(segment, "logs"))}))
"""


def test_a_split_whose_marker_line_is_written_short_raises_and_leaves_no_torn_line(tmp_path):
    # Had it returned, the writer would send the range's halves with the range not
    # noted, and a replay would send it whole again over them.
    out = subprocess.run(
        [sys.executable, "-c", _SHORT_MARKER_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["error"] and "short write" in got["error"]
    assert got["marker"] == "0-8\n" and got["splits"] == [[0, 8]]


def test_a_torn_record_that_cannot_be_cut_off_is_counted_until_its_segment_is_done(
    tmp_path, monkeypatch
):
    spool = _spool(tmp_path)
    spool.append({"logs": b'{"a":1}\n'}, 1)
    real_writev = os.writev

    def half(fd, buffers):  # a disk that fills up mid-record
        data = b"".join(buffers)
        return real_writev(fd, [data[: len(data) // 2]])

    def no_cut(fd, length):
        raise OSError(28, "ENOSPC")

    monkeypatch.setattr(os, "writev", half)
    monkeypatch.setattr(os, "ftruncate", no_cut)
    with pytest.raises(Unavailable):
        spool.append({"logs": b'{"a":1}\n' * 50}, 50)
    monkeypatch.undo()
    # The torn bytes stay on disk in the sealed segment: they count against the cap...
    assert spool.pending() == 1
    assert spool.size == sum(path.stat().st_size for path in spool.sealed())
    # ...and the counter is back to 0, not below, once the writer deleted the segment.
    Writer(spool, lambda table, data, token: None).drain()
    assert spool.pending() == 0
    assert spool.size == 0


def test_a_running_spool_adopts_a_directory_orphaned_after_it_opened(tmp_path):
    """gunicorn's reload (HUP) starts the new worker before the old one exits: what the
    old one leaves must be adopted by the running one, not wait for the next start."""
    new = _spool(tmp_path)
    new.append({"logs": b'{"mine":1}\n'}, 1)
    new.seal()
    mine = new.sealed()[0]
    new.mark_bisect(mine, "logs")  # our own marker: never touched by an adoption
    old = _spool(tmp_path)  # the old worker, still running after the new one opened
    old.append({"logs": b'{"old":1}\n'}, 1)
    old.seal()
    old.append({"logs": b'{"old":2}\n'}, 1)
    old.seal()
    first, second = old.sealed()
    old.mark_bisect(first, "logs")  # it was bisecting this one when it stopped
    old.close()
    (old.dir / f"{time.time_ns():020d}-gone0000.events.bisect").touch()  # segment long done
    size = new.size
    assert new.adopt_orphans() == 2
    assert not old.dir.exists()
    moved = [new.dir / first.name, new.dir / second.name]
    assert new.sealed() == sorted([mine, *moved], key=lambda p: p.name)
    assert new.size == size + sum(p.stat().st_size for p in moved)
    assert new.bisecting(moved[0], "logs") and not new.bisecting(moved[1], "logs")
    assert new.bisecting(mine, "logs")
    assert sorted(p.name for p in new.dir.glob("*.bisect")) == sorted(
        [f"{mine.stem}.logs.bisect", f"{first.stem}.logs.bisect"]
    )
    assert new.adopt_orphans() == 0  # nothing more; a live directory is never taken
    live = _spool(tmp_path)
    live.append({"logs": b'{"live":1}\n'}, 1)
    live.seal()
    assert new.adopt_orphans() == 0 and len(live.sealed()) == 1
    Writer(new, lambda table, data, token: None).drain()
    assert new.size == 0 and new.pending() == 0


def test_the_writer_adopts_orphans_while_running(tmp_path):
    inserted: list[bytes] = []
    spool = _spool(tmp_path)
    writer = Writer(spool, lambda table, data, token: inserted.append(data), adopt_every=0.2)
    writer.start()
    try:
        orphan = _spool(tmp_path)
        orphan.append({"logs": b'{"orphan":1}\n'}, 1)
        orphan.close()  # sealed and let go, after the writer's start
        deadline = time.monotonic() + 5
        while not inserted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert inserted == [b'{"orphan":1}\n']
    finally:
        writer.stop()
    assert not list(tmp_path.glob("*/*.seg"))


def test_a_writer_that_stops_with_rows_left_says_so(tmp_path, caplog):
    def refuse(table: str, data: bytes, token: str) -> None:
        raise RuntimeError("ClickHouse is down")

    spool = _spool(tmp_path)
    writer = Writer(spool, refuse, backoff=(0.05, 0.05))
    writer.start()
    spool.append({"logs": b'{"l":1}\n'}, 1)
    with caplog.at_level("WARNING", logger="errortrack.spool.writer"):
        writer.stop(timeout=5)
    stopping = [r for r in caplog.records if r.getMessage().startswith("spool writer stopping")]
    assert len(stopping) == 1 and stopping[0].levelname == "WARNING"
    assert "1 segment(s) left" in stopping[0].getMessage()
