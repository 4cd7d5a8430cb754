"""The spool: append-only segment files that hold accepted rows until ClickHouse has them.

- ``append`` returns only once the record is on disk (fdatasync). Concurrent requests
  share fsyncs: the first waiter becomes the leader and syncs everything written so far,
  the others wait for it (group commit), so N requests cost one fsync, not N. Each
  waiter sleeps on its own lock and is woken once, by the sync that covers its record
  (a shared condition woke every waiter per sync: measured, that herd cost more CPU
  than the rest of an event request).
- ``append_async`` is the same for a request served on an event loop: the record is
  written at once and the caller awaits a future. The loop must never block on an
  fdatasync, so when such a request would lead, a syncer thread leads for it; the sync
  that covers a record resolves its future through ``call_soon_threadsafe``.
- A segment is sealed (handed to the writer) when it holds ``batch_rows`` rows or when
  the writer finds it older than its age limit. One sealed segment = one insert batch,
  and its file name makes the insert deduplication token, so a replay is applied once.
- Each process owns one subdirectory ``<root>/w-<pid>-<random>/`` guarded by a ``flock``
  on its ``lock`` file. At start a process adopts the segments of subdirectories whose
  lock is free (their process died or stopped), so gunicorn workers can share a data dir.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from errortrack.errors import Unavailable
from errortrack.spool import ownership, records

log = logging.getLogger(__name__)
SUFFIX = ".seg"


class _Segment:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.rows = 0
        self.size = 0
        self.created = time.monotonic()


class _Waiter:
    """One request waiting for its record (number ``mine``) to be durable."""

    __slots__ = ("lead", "lock", "mine")

    def __init__(self, mine: int) -> None:
        self.mine = mine
        self.lock = threading.Lock()
        self.lock.acquire()  # released by whoever wakes this request
        self.lead = False  # woken to become the next leader rather than as durable


class _AsyncWaiter:
    """A request on an event loop waiting for its record to be durable.

    Sits in the group commit's queue beside ``_Waiter``s: the sync that covers it
    resolves its future (``_release_durable_locked``); ``lock.release()`` is called only
    to hand it the lead, which passes the sync to the syncer thread.
    """

    __slots__ = ("future", "lead", "lock", "loop", "mine", "spool")

    def __init__(self, spool: Spool, mine: int, loop: asyncio.AbstractEventLoop) -> None:
        self.spool = spool
        self.mine = mine
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.lead = False
        self.lock = self  # the group commit calls ``waiter.lock.release()``

    def release(self) -> None:
        assert self.lead  # durable waiters are resolved by _release_durable_locked
        self.spool._syncer_queue().put(self)

    def settle(self, error: BaseException | None) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, error)


def _settle_all(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        _settle(future, None)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # the request was cancelled (client gone): nothing to tell
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class Spool:
    def __init__(self, root: Path, *, max_bytes: int, batch_rows: int, retry_after: int = 5):
        self.root = root
        self.max_bytes = max_bytes
        self.batch_rows = batch_rows
        self.retry_after = retry_after
        self.dir: Path | None = None
        self._lock_file: int | None = None
        self._cond = threading.Condition()
        self._current: _Segment | None = None
        self._sealed: collections.deque[Path] = collections.deque()
        self._bytes = 0
        self._written = 0  # records written
        self._synced = 0  # records known durable
        self._syncing = False
        self._waiters: collections.deque[_Waiter | _AsyncWaiter] = (
            collections.deque()
        )  # by ``mine``
        self._sealers = 0  # threads waiting in _seal_locked for the sync to end
        self.syncs = 0  # fdatasync calls, for tests and diagnostics
        self._syncer: queue.SimpleQueue[_AsyncWaiter | None] | None = None

    # -- ownership ---------------------------------------------------------------------
    def open(self) -> None:
        """Take a subdirectory, then adopt orphans' and our own leftover segments."""
        with self._cond:
            if self.dir is not None:
                return
            self.root.mkdir(parents=True, exist_ok=True)
            # Created under a name other processes ignore, locked, then renamed: a worker
            # starting at the same moment must never see it unlocked and adopt it.
            name = f"w-{os.getpid()}-{secrets.token_hex(4)}"
            staging = self.root / f".new-{name}"
            staging.mkdir()
            self._lock_file = ownership.lock(staging)
            assert self._lock_file is not None
            self.dir = staging.rename(self.root / name)
            self._adopt_orphans()

    def close(self) -> None:
        """Seal what is written and release the directory (its segments stay for replay)."""
        with self._cond:
            self._seal_locked()
            if self._syncer is not None:
                self._syncer.put(None)  # the syncer thread ends
                self._syncer = None
            if self._lock_file is not None:
                os.close(self._lock_file)
                self._lock_file = None

    def _adopt_orphans(self) -> None:
        assert self.dir is not None
        found = ownership.adopt_orphans(self.root, self.dir, SUFFIX)
        for seg in found:
            self._sealed.append(seg)
            self._bytes += seg.stat().st_size
        if found:
            log.info("spool: replaying %d leftover segment(s)", len(found))

    # -- appending ---------------------------------------------------------------------
    def append(self, tables: Mapping[str, bytes], rows: int) -> None:
        """Durably store one request's rows; raises Unavailable when over the size cap."""
        record = records.encode(tables)
        with self._cond:
            seg = self._admit_locked(record, rows)
            waiter = None
            if self._syncing or self._sealers:
                waiter = _Waiter(self._written)
                self._waiters.append(waiter)
            else:
                self._syncing = True  # leader: nobody is syncing, so sync now
        if waiter is not None:
            waiter.lock.acquire()
        if waiter is None or waiter.lead:
            self._lead()
        if seg.rows >= self.batch_rows:
            with self._cond:
                if self._current is seg and seg.rows >= self.batch_rows:
                    self._seal_locked()

    def append_async(self, tables: Mapping[str, bytes], rows: int) -> asyncio.Future[None]:
        """``append`` for a caller on an event loop: writes now (page cache, no wait) and
        returns a future resolved once the record is durable. Raises Unavailable at once
        when over the size cap or when the write fails."""
        record = records.encode(tables)
        loop = asyncio.get_running_loop()
        with self._cond:
            self._admit_locked(record, rows)
            waiter = _AsyncWaiter(self, self._written, loop)
            if self._syncing or self._sealers:
                self._waiters.append(waiter)
            else:
                self._syncing = True
                waiter.lead = True
        if waiter.lead:
            self._syncer_queue().put(waiter)
        return waiter.future

    def _syncer_queue(self) -> queue.SimpleQueue[_AsyncWaiter | None]:
        with self._cond:
            if self._syncer is None:
                self._syncer = queue.SimpleQueue()
                threading.Thread(
                    target=self._sync_for_loop,
                    args=(self._syncer,),
                    name="spool-sync",
                    daemon=True,  # holds no state of its own: every record is on disk
                ).start()
            return self._syncer

    def _sync_for_loop(self, work: queue.SimpleQueue[_AsyncWaiter | None]) -> None:
        """Lead syncs for event-loop requests, one after another; seal full segments here
        too, since sealing waits for a sync and must not run on the loop."""
        while True:
            waiter = work.get()
            if waiter is None:
                return
            try:
                self._lead()
            except Exception as exc:  # the request that waits gets the error (a 500)
                waiter.settle(exc)
                continue
            try:
                with self._cond:
                    seg = self._current
                    # Not while another sync runs: the lead it hands on may be queued for
                    # this very thread, and _seal_locked would wait for it forever.
                    busy = self._syncing or self._sealers
                    if seg is not None and seg.rows >= self.batch_rows and not busy:
                        self._seal_locked()
            except OSError:
                # The record is durable all the same; the writer seals by age later.
                log.exception("spool: sealing a full segment failed")
            # After the seal, as in ``append``: the request's next record starts a new
            # segment, so segments stay at batch_rows when requests come one at a time.
            waiter.settle(None)

    def _admit_locked(self, record: bytes, rows: int) -> _Segment:
        """Write the record unless over the size cap (Unavailable: nothing written)."""
        if self._bytes >= self.max_bytes:
            raise Unavailable(
                "the ingest spool is full (ClickHouse is behind); retry later",
                retry_after=self.retry_after,
            )
        if self.dir is None:
            self.open()  # tests that never start the writer still spool durably
        return self._write_locked(record, rows)

    def _write_locked(self, record: bytes, rows: int) -> _Segment:
        if self._current is None:
            assert self.dir is not None
            name = f"{time.time_ns():020d}-{secrets.token_hex(4)}{SUFFIX}"
            self._current = _Segment(self.dir / name)
            # The file's own fdatasync does not make its directory entry durable.
            ownership.fsync_dir(self.dir)
        seg = self._current
        try:
            written = os.write(seg.fd, record)
            if written != len(record):
                raise OSError(f"short write ({written} of {len(record)} bytes)")
        except OSError as exc:
            # Cut the partial record off so that later records stay readable.
            os.ftruncate(seg.fd, seg.size)
            raise Unavailable(
                f"the ingest spool cannot write: {exc}", retry_after=self.retry_after
            ) from None
        seg.size += len(record)
        seg.rows += rows
        self._bytes += len(record)
        self._written += 1
        return seg

    def _lead(self) -> None:
        """Sync everything written so far (``_syncing`` is ours), then wake the waiters it
        covers and hand the lead to the first one left, so each sync wakes only its own."""
        with self._cond:
            seg, target = self._current, self._written
        synced = False
        try:
            if seg is not None:
                os.fdatasync(seg.fd)
                self.syncs += 1
            synced = True
        finally:
            with self._cond:
                if synced:
                    self._synced = max(self._synced, target)
                self._release_durable_locked()
                self._syncing = False
                if self._sealers:
                    self._cond.notify_all()  # the sealer syncs and wakes the rest
                elif self._waiters:
                    self._hand_lead_locked()

    def _release_durable_locked(self) -> None:
        durable: list[_AsyncWaiter] = []
        while self._waiters and self._waiters[0].mine <= self._synced:
            waiter = self._waiters.popleft()
            if isinstance(waiter, _AsyncWaiter):
                durable.append(waiter)
            else:
                waiter.lock.release()
        if durable:
            # One wake-up per loop for the whole group, not one per request: each
            # call_soon_threadsafe is a syscall and a GIL hand-off to the loop.
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for waiter in durable:
                by_loop.setdefault(waiter.loop, []).append(waiter.future)
            for loop, futures in by_loop.items():
                loop.call_soon_threadsafe(_settle_all, futures)

    # -- sealing and handing over ------------------------------------------------------
    def _seal_locked(self) -> None:
        # Never close a segment while a leader syncs it; while a sealer waits, new
        # appends queue as waiters (no new leader), and this sync covers them all.
        self._sealers += 1
        try:
            while self._syncing:
                self._cond.wait()
        finally:
            self._sealers -= 1
        try:
            seg, self._current = self._current, None
            if seg is not None:
                os.fdatasync(seg.fd)
                os.close(seg.fd)
                self._synced = self._written
                self._sealed.append(seg.path)
                self._cond.notify_all()
        finally:
            self._release_durable_locked()
            if self._waiters and not self._syncing and not self._sealers:
                self._hand_lead_locked()  # only if this seal failed: a waiter retries

    def _hand_lead_locked(self) -> None:
        nxt = self._waiters.popleft()
        nxt.lead = True
        self._syncing = True
        nxt.lock.release()

    def seal_due(self, max_age: float) -> None:
        with self._cond:
            seg = self._current
            if seg is not None and time.monotonic() - seg.created >= max_age:
                self._seal_locked()

    def seal(self) -> None:
        with self._cond:
            self._seal_locked()

    def next_sealed(self, timeout: float) -> Path | None:
        """The oldest sealed segment (left in place until ``done``), waiting up to timeout."""
        with self._cond:
            if not self._sealed:
                self._cond.wait(timeout)
            return self._sealed[0] if self._sealed else None

    def done(self, path: Path) -> None:
        """The segment's rows are in ClickHouse: delete it."""
        with self._cond:
            size = path.stat().st_size
            path.unlink()
            self._sealed.remove(path)
            self._bytes -= size

    def sealed(self) -> list[Path]:
        """Sealed segments waiting for the writer, oldest first."""
        with self._cond:
            return list(self._sealed)

    def pending(self) -> int:
        """Sealed segments not yet inserted plus the open one (0 when drained)."""
        with self._cond:
            return len(self._sealed) + (1 if self._current is not None else 0)

    @property
    def size(self) -> int:
        return self._bytes
