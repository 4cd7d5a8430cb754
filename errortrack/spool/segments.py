"""The spool: append-only segment files that hold accepted rows until ClickHouse has them.

- ``append_async`` (a request served on an event loop) returns a future at once; it is
  resolved once the record is on disk (fdatasync). The loop must never block or give
  up the GIL on a syscall, so one syncer thread writes the queued records and syncs
  them in groups: everything queued while a sync runs is written and covered by the
  next one (group commit), so N requests cost one fsync, not N, and each loop is woken
  once per sync (one ``call_soon_threadsafe`` per loop, not per request).
- ``append`` is the same for a caller without a loop (tools, tests): it blocks until
  the record is durable.
- A segment is sealed (handed to the writer) when it holds ``batch_rows`` rows or
  ``batch_bytes`` bytes, or when the writer finds it older than its age limit. One
  sealed segment = one insert batch, and its file name makes the insert deduplication
  token, so a replay is applied once.
- Each process owns one subdirectory ``<root>/w-<pid>-<random>/`` guarded by a ``flock``
  on its ``lock`` file. At start a process adopts the segments of subdirectories whose
  lock is free (their process died or stopped), so gunicorn workers can share a data dir.
- A marker ``<segment stem>.<table>.bisect`` next to a segment records that the writer
  inserts that table's rows in parts (a poison row, writer.py), and lists the row ranges
  it has split since; it goes with its segment on adoption and is deleted after it.
- A segment that holds more than its intact records and a torn tail (writer.py,
  ``Writer.write_segment``) is moved to ``<root>/damaged/`` once those are inserted,
  not deleted: what follows a bad record may be acknowledged rows (docs/INGEST.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import queue
import re
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from errortrack.errors import Unavailable
from errortrack.spool import ownership, records

log = logging.getLogger(__name__)
SUFFIX = ".seg"
MARKER = ".bisect"
DAMAGED = "damaged"  # under the spool's root: segments kept for an operator
_RANGE = re.compile(r"(\d+)-(\d+)", re.ASCII)  # a line of a bisection marker


def bisect_marker(segment: Path, table: str) -> Path:
    return segment.with_name(f"{segment.stem}.{table}{MARKER}")


class _Segment:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.rows = 0
        self.size = 0
        self.created = time.monotonic()


class _Waiter:
    """A request waiting for its record to be durable: the sync that covers record
    number ``mine`` resolves ``future`` on ``loop`` (``_wake_locked``)."""

    __slots__ = ("future", "loop", "mine")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.mine = 0  # the record's number, set when the syncer thread writes it
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()

    def settle(self, error: BaseException | None) -> None:
        _tell(self.loop, _settle, self.future, error)


# What the syncer thread is given: a request's rows per table, their encoded size, row
# count and waiter; or None to stop.
_Job = tuple[Mapping[str, bytes], int, int, _Waiter] | None


def _tell(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    # A closed loop (the server is stopping) raises: nobody waits for the answer, and the
    # caller must still go on updating the spool's state.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _settle_all(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for future in futures:
        _settle(future, error)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # the request was cancelled (client gone): nothing to tell
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


# The free-space floor is at most this share of the filesystem (a small disk keeps room).
FLOOR_SHARE = 0.05
# How often the syncer thread looks at the free space (one statvfs, off the loops).
FREE_CHECK_SECONDS = 0.5
# Spooled bytes at which a segment is sealed (ERRORTRACK_WRITER_BATCH_BYTES's default).
BATCH_BYTES = 32 * 2**20
# How long ``close`` waits for the syncer thread to write and sync what is queued.
CLOSE_WAIT_SECONDS = 60.0


class Spool:
    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        batch_rows: int,
        batch_bytes: int = BATCH_BYTES,
        retry_after: int = 5,
        min_free_bytes: int = 0,
    ):
        self.root = root
        self.max_bytes = max_bytes
        # Ingest stops (503) while the spool's filesystem has less free space than this
        # (at most FLOOR_SHARE of it): on a disk filled to the last byte nothing could
        # free space again. ClickHouse needs room to drop a partition (1 MiB for the
        # empty part that replaces it) and SQLite to write its -wal, so retention, the
        # cleanup API and a restart all failed (disk review).
        self.min_free_bytes = min_free_bytes
        self.free_bytes: int | None = None  # at the last look, None before the first
        self._floor = 0
        self._free_checked = -math.inf
        self.batch_rows = batch_rows
        # The writer reads a segment whole and holds several copies of its rows while it
        # inserts them (decoded, hooked, encoded, the engine's block). Rows alone did not
        # bound that: 900 KB events filled one segment to 615 MB while the writer was
        # busy, and the server peaked at 4.7 GB; replayed after an OOM kill, the same
        # segment would have killed every start (bench/RESULTS.md, thirty-first session).
        self.batch_bytes = batch_bytes
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
        self._waiters: collections.deque[_Waiter] = collections.deque()  # by ``mine``
        self._sealers = 0  # threads waiting in _seal_locked for the sync to end
        self.syncs = 0  # fdatasync calls, for tests and diagnostics
        # Writes and syncs failed since the last sync that succeeded (a full or read-only
        # disk): every ingest request is a 503 meanwhile; /readyz shows it.
        self.write_failures = 0
        self._syncer: queue.SimpleQueue[_Job] | None = None
        self._syncer_thread: threading.Thread | None = None
        # Bytes queued for the syncer thread and not written yet, for the size cap: the
        # loops add (under their own small lock), the syncer thread subtracts.
        self._queued_in = 0
        self._queued_out = 0
        self._queue_lock = threading.Lock()
        # Set by ``close`` (under _queue_lock): from then on appends are refused. An
        # append after it started a new syncer thread that wrote into the directory whose
        # lock close had let go, where another worker adopts and deletes its segments.
        self._closed = False
        self._bisecting: set[Path] = set()  # markers of our segments (mark_bisect)
        # Sealed segments that may end with a record cut short (``may_be_torn``): adopted
        # ones (their process may have crashed mid-write) and ours that a failed write or
        # sync ended. Any other segment of ours was written and synced whole.
        self._may_be_torn: set[Path] = set()

    # -- ownership ---------------------------------------------------------------------
    def open(self) -> None:
        """Take a subdirectory, then adopt orphans' and our own leftover segments."""
        with self._cond:
            if self.dir is not None:
                return
            if not self.root.is_dir():
                self.root.mkdir(parents=True, exist_ok=True)
                ownership.fsync_dir(self.root.parent)
            # Created under a name other processes ignore, locked, then renamed: a worker
            # starting at the same moment must never see it unlocked and adopt it.
            name = f"w-{os.getpid()}-{secrets.token_hex(4)}"
            staging = self.root / f".new-{name}"
            staging.mkdir()
            self._lock_file = ownership.lock(staging)
            assert self._lock_file is not None
            self.dir = staging.rename(self.root / name)
            # The rename durable before any segment is written: after a power cut the
            # directory must come back as w-*, the only name adoption looks for.
            ownership.fsync_dir(self.root)
            ownership.remove_stale_staging(self.root)
            self._adopt_orphans()
        self.look_at_free_space()  # before the first request: a disk already too full

    def close(self) -> None:
        """Seal what is written and release the directory (its segments stay for replay).
        Appends are refused from here on (503): the directory is no longer ours."""
        with self._queue_lock:
            # Under the lock that appends queue under: every request accepted before
            # this is queued before the None below, none after it.
            self._closed = True
            work, thread = self._syncer, self._syncer_thread
            if work is not None:
                work.put(None)  # it writes and syncs what is queued, then ends
        if work is not None and thread is not None:
            thread.join(timeout=CLOSE_WAIT_SECONDS)
            # Still there only if the thread did not end in time (a hung disk): those
            # requests would wait for an answer forever, and are not written now.
            self._fail_queued(work)
            self._syncer = self._syncer_thread = None
        with self._cond:
            self._seal_locked()
            if self._lock_file is not None:
                os.close(self._lock_file)
                self._lock_file = None

    def _adopt_orphans(self) -> None:
        assert self.dir is not None
        found = ownership.adopt_orphans(self.root, self.dir, SUFFIX, markers=MARKER)
        self._take_adopted_locked(found, list(self.dir.glob(f"*{MARKER}")))

    def adopt_orphans(self) -> int:
        """Adopt the segments of directories whose lock became free since ``open``;
        return how many. The writer calls it from time to time: gunicorn's reload (HUP)
        starts the new worker before the old one exits, and what the old one could not
        insert before it let its lock go would otherwise wait for the next full restart.
        Only our segments and markers that came from an orphan are touched here, never
        our own (a marker of ours has its segment, sealed or being written)."""
        with self._cond:
            if self.dir is None or self._lock_file is None:
                return 0  # not opened, or closed: nothing to replay them into
            own = self.dir
        # The renames and the directory's fsync run outside the lock: the syncer thread
        # needs it to write the requests' records, and an orphan's files are no one's.
        moved = ownership.move_orphans(self.root, own, SUFFIX, markers=MARKER)
        segments = sorted(p for p in moved if p.name.endswith(SUFFIX))
        with self._cond:
            self._take_adopted_locked(segments, [p for p in moved if p.name.endswith(MARKER)])
        return len(segments)

    def _take_adopted_locked(self, found: list[Path], markers: list[Path]) -> None:
        """Account for adopted segments (oldest first among the sealed: their names start
        with their creation time) and keep the markers whose segment came with them."""
        for seg in found:
            self._bytes += seg.stat().st_size
        self._may_be_torn.update(found)
        if found:
            self._sealed = collections.deque(sorted({*self._sealed, *found}, key=lambda p: p.name))
            log.info("spool: replaying %d leftover segment(s)", len(found))
            self._cond.notify_all()
        segments = set(found)
        for marker in markers:
            if marker.with_name(marker.name.split(".")[0] + SUFFIX) in segments:
                self._bisecting.add(marker)
            else:  # its segment was inserted and deleted, then the process died
                marker.unlink()

    # -- appending ---------------------------------------------------------------------
    def append(self, tables: Mapping[str, bytes], rows: int) -> None:
        """Durably store one request's rows, for a caller without an event loop; raises
        Unavailable when over the size cap or when the write or its sync fails."""

        async def durable() -> None:
            await self.append_async(tables, rows)

        asyncio.run(durable())

    def append_async(self, tables: Mapping[str, bytes], rows: int) -> asyncio.Future[None]:
        """``append`` for a caller on an event loop: returns at once with a future resolved
        once the record is durable. Raises Unavailable at once when over the size cap;
        the future fails with Unavailable if the write fails."""
        size = records.size(tables)  # encoded (and checksummed) by the syncer thread
        waiter = _Waiter(asyncio.get_running_loop())
        with self._queue_lock:
            if self._closed:
                raise self._closing()
            # Started first: it also looks at the free space, so that a disk found too
            # full at ``open`` is seen to have room again though every request is refused.
            work = self._syncer_queue()
            # Counters read without the spool's lock: the cap is a bound on disk use, and
            # queued bytes count, so it cannot be overrun by more than one request.
            if self._bytes + self._queued_in - self._queued_out >= self.max_bytes:
                raise self._full()
            if self.disk_low:
                raise self._no_room()
            self._queued_in += size
            # Queued under the lock, so that close's None comes after it.
            work.put((tables, size, rows, waiter))
        return waiter.future

    def _fail_queued(self, work: queue.SimpleQueue[_Job]) -> None:
        """Fail the requests left in the syncer's queue once it stopped."""
        stop = False
        while True:
            try:
                job = work.get_nowait()
            except queue.Empty:
                break
            if job is None:
                stop = True
                continue
            _, size, _, waiter = job
            with self._cond:
                self._queued_out += size
            waiter.settle(self._closing())
        if stop:
            work.put(None)  # a thread that is still running ends when it gets there

    def _syncer_queue(self) -> queue.SimpleQueue[_Job]:
        syncer = self._syncer
        if syncer is not None:
            return syncer
        with self._cond:
            if self._syncer is None:
                self._syncer = queue.SimpleQueue()
                self._syncer_thread = threading.Thread(
                    target=self._sync_for_loop,
                    args=(self._syncer,),
                    name="spool-sync",
                    daemon=True,  # close() stops it; a crash loses only unacknowledged rows
                )
                self._syncer_thread.start()
            return self._syncer

    def _sync_for_loop(self, work: queue.SimpleQueue[_Job]) -> None:
        """Write what the loops queued, sync it, seal full segments: all the blocking
        work, off the loops. This thread is the only one that writes records, so after
        its sync nothing written is left waiting (a seal syncs what it closes itself)."""
        stop = False
        while not stop:
            while True:
                try:
                    first = work.get(timeout=FREE_CHECK_SECONDS)
                    break
                except queue.Empty:
                    # Also while the floor refuses every request: they never get here.
                    self.look_at_free_space()
            jobs = [first]
            while True:  # everything queued meanwhile shares this round's sync
                try:
                    jobs.append(work.get_nowait())
                except queue.Empty:
                    break
            writes = [job for job in jobs if job is not None]
            stop = len(writes) < len(jobs)
            failed = self._write_queued(writes)
            self.look_at_free_space()
            with self._cond:
                # A seal by the writer thread may have synced them meanwhile, or be
                # waiting to: its own sync covers them, so let it go first.
                lead = bool(self._waiters) and not self._sealers
                if lead:
                    self._syncing = True
            for waiter, error in failed:
                waiter.settle(error)
            if lead:
                self._sync_and_seal()

    def _write_queued(
        self, writes: list[tuple[Mapping[str, bytes], int, int, _Waiter]]
    ) -> list[tuple[_Waiter, Exception]]:
        failed: list[tuple[_Waiter, Exception]] = []
        # Encoded before taking the lock: the checksum lets the GIL go, and the loop runs.
        encoded = [(records.encode(tables), size, rows, w) for tables, size, rows, w in writes]
        with self._cond:
            for record, size, rows, waiter in encoded:
                try:
                    if self.dir is None:
                        self.open()  # tests that never start the writer spool durably too
                    elif self._lock_file is None:
                        # Closed, and the thread took these before close gave up on it:
                        # the directory is no longer ours, and another worker may be
                        # inserting and deleting its segments.
                        raise self._closing()
                    self._write_locked(record, rows)
                except (Unavailable, OSError) as exc:
                    failed.append((waiter, exc))
                    continue
                finally:
                    self._queued_out += size
                waiter.mine = self._written
                self._waiters.append(waiter)
        return failed

    def _sync_and_seal(self) -> None:
        try:
            self._sync()
        except Unavailable:  # the requests it covered have been failed with it
            return
        with self._cond:
            seg = self._current
            if seg is not None and (seg.rows >= self.batch_rows or seg.size >= self.batch_bytes):
                self._seal_locked()

    @property
    def disk_low(self) -> bool:
        """True while the spool's filesystem is below its free-space floor."""
        free = self.free_bytes
        return free is not None and free < self._floor

    def look_at_free_space(self) -> None:
        """Read the spool's free space (statvfs), at most every FREE_CHECK_SECONDS. Off the
        loops (the syncer thread, ``open``): a hung network filesystem must not hold them."""
        now = time.monotonic()
        if not self.min_free_bytes or now - self._free_checked < FREE_CHECK_SECONDS:
            return
        self._free_checked = now
        try:
            fs = os.statvfs(self.dir or self.root)
        except OSError:
            return  # the writes themselves will say what is wrong
        was_low = self.disk_low
        self._floor = min(self.min_free_bytes, int(fs.f_blocks * fs.f_frsize * FLOOR_SHARE))
        self.free_bytes = fs.f_bavail * fs.f_frsize
        if self.disk_low != was_low:
            say = log.warning if self.disk_low else log.info
            say(
                "spool: %s (%d bytes free on %s, floor %d: ERRORTRACK_MIN_FREE_BYTES)",
                "ingest refused: the disk is below its free-space floor"
                if self.disk_low
                else "ingest resumed: the disk is above its free-space floor",
                self.free_bytes,
                self.root,
                self._floor,
            )

    def _no_room(self) -> Unavailable:
        # The numbers go to the log and /readyz; SDKs (anyone with a DSN) get the reason.
        return Unavailable(
            "the server's disk is nearly full; retry later", retry_after=self.retry_after
        )

    def _closing(self) -> Unavailable:
        return Unavailable(
            "the server is stopping and takes no more events here; retry later",
            retry_after=self.retry_after,
        )

    def _full(self) -> Unavailable:
        return Unavailable(
            "the ingest spool is full (ClickHouse is behind); retry later",
            retry_after=self.retry_after,
        )

    def _write_locked(self, record: list[bytes], rows: int) -> _Segment:
        if self._current is None:
            self._current = self._new_segment()
        seg = self._current
        size = sum(map(len, record))
        try:
            written = os.writev(seg.fd, record)
            if written != size:
                raise OSError(f"short write ({written} of {size} bytes)")
        except OSError as exc:
            self._cut_torn_locked(seg)
            raise self._cannot_write(exc) from None
        seg.size += size
        seg.rows += rows
        self._bytes += size
        self._written += 1
        return seg

    def _new_segment(self) -> _Segment:
        assert self.dir is not None
        path = self.dir / f"{time.time_ns():020d}-{secrets.token_hex(4)}{SUFFIX}"
        try:
            seg = _Segment(path)
        except OSError as exc:  # no space or inodes left, out of file descriptors
            raise self._cannot_write(exc) from None
        try:
            # The file's own fdatasync does not make its directory entry durable, so a
            # segment whose entry could not be synced takes no records: a power cut
            # could lose the file with every record acknowledged in it.
            ownership.fsync_dir(self.dir)
        except OSError as exc:
            os.close(seg.fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise self._cannot_write(exc) from None
        return seg

    def _cut_torn_locked(self, seg: _Segment) -> None:
        """After a failed or short write (a full disk): cut the partial record off, so
        that the records written after it stay readable (reading stops at a torn one)."""
        try:
            os.ftruncate(seg.fd, seg.size)
        except OSError:
            # The torn bytes stay: seal the segment here, so that nothing is written
            # after them (what is before them is intact, and the writer inserts it).
            log.exception("spool: cutting a torn record off failed; sealing its segment")
            # Count them too: they take disk space until the segment is deleted, and
            # done() subtracts the file's whole size (uncounted, they left the cap's
            # counter below the bytes on disk, negative once the spool drained).
            with contextlib.suppress(OSError):
                self._bytes += os.fstat(seg.fd).st_size - seg.size
            self._may_be_torn.add(seg.path)
            self._seal_locked()

    def _cannot_write(self, exc: OSError) -> Unavailable:
        self.write_failures += 1
        return Unavailable(f"the ingest spool cannot write: {exc}", retry_after=self.retry_after)

    def _sync(self) -> None:
        """Sync everything written so far (``_syncing`` is ours), then wake the waiters it
        covers."""
        with self._cond:
            seg, target = self._current, self._written
        synced = False
        try:
            if seg is not None:
                os.fdatasync(seg.fd)
                self.syncs += 1
            synced = True
            self.write_failures = 0
        except OSError as exc:
            with self._cond:
                error = self._fail_covered_locked(target, exc)
                if seg is not None and self._current is seg:
                    # Nothing more goes in this file: its failed records may be a hole
                    # on disk (pages the kernel dropped; zeros after a crash), reading
                    # stops at a record that fails its checksum, and a record
                    # acknowledged after them would be lost. Those before were
                    # acknowledged by earlier syncs and are intact.
                    self._may_be_torn.add(seg.path)
                    self._hand_over_locked(seg)
            raise error from None
        finally:
            with self._cond:
                if synced:
                    self._synced = max(self._synced, target)
                self._release_durable_locked()
                self._syncing = False
                if self._sealers:
                    self._cond.notify_all()  # a seal waits for this sync to end

    def _fail_covered_locked(self, target: int, exc: OSError) -> Unavailable:
        """A failed fdatasync: the records it was to cover (up to ``target``) cannot be
        called durable, and a retried sync cannot tell (Linux may have dropped the dirty
        pages with the error), so their requests fail (503: the SDK may resend; the rows
        that did reach the disk are inserted all the same, so a resend can duplicate
        but nothing acknowledged is lost)."""
        self.write_failures += 1
        error = Unavailable(f"the ingest spool cannot sync: {exc}", retry_after=self.retry_after)
        self._wake_locked(target, error)
        return error

    def _hand_over_locked(self, seg: _Segment) -> None:
        """Close ``seg``, the current segment (nothing more is written to it), and queue
        it for the writer."""
        self._current = None
        with contextlib.suppress(OSError):
            os.close(seg.fd)
        self._sealed.append(seg.path)
        self._cond.notify_all()

    def _release_durable_locked(self) -> None:
        self._wake_locked(self._synced, None)

    def _wake_locked(self, upto: int, error: Exception | None) -> None:
        """Wake the waiters of records up to ``upto``: durable, or failed with ``error``."""
        on_loops: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        while self._waiters and self._waiters[0].mine <= upto:
            waiter = self._waiters.popleft()
            on_loops.setdefault(waiter.loop, []).append(waiter.future)
        # One wake-up per loop for the whole group, not one per request: each
        # call_soon_threadsafe is a syscall and a GIL hand-off to the loop.
        for loop, futures in on_loops.items():
            _tell(loop, _settle_all, futures, error)

    # -- sealing and handing over ------------------------------------------------------
    def _seal_locked(self) -> None:
        # Never close a segment while the syncer thread syncs it; this seal's own sync
        # covers whatever is written meanwhile.
        self._sealers += 1
        try:
            while self._syncing:
                self._cond.wait()
        finally:
            self._sealers -= 1
        target = self._written
        seg = self._current
        if seg is None:
            self._release_durable_locked()
            return
        try:
            os.fdatasync(seg.fd)
        except OSError as exc:
            # Its requests fail (503); the segment goes to the writer all the same, or
            # the records acknowledged before in it would wait for the next start, and
            # its bytes count against the cap until then. Not raised: the callers (the
            # writer's age seal, stop, close) can do nothing more about it.
            log.error("spool: syncing a segment to seal it failed: %s", exc)
            self._fail_covered_locked(target, exc)
            self._may_be_torn.add(seg.path)
            self._hand_over_locked(seg)
            self._release_durable_locked()
            return
        self._synced = target
        self._hand_over_locked(seg)
        self._release_durable_locked()

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
        """The segment's rows are in ClickHouse: delete it (and its markers)."""
        # Outside the lock: deleting a 20k-row segment (~14 MB) takes milliseconds, and
        # the syncer thread waited for it before writing the next requests' records,
        # which held their 200s back: 28-36 waits over 1 ms (up to 10-13.5 ms) in 20 s of
        # bench.ingest_logs' full load, none with the unlink here (twelfth session). A
        # sealed segment is the writer's alone, and only the writer calls this.
        size = path.stat().st_size
        path.unlink()
        with self._cond:
            self._sealed.remove(path)
            self._bytes -= size
            self._may_be_torn.discard(path)
        if self._bisecting:
            self._drop_markers(path)

    def may_be_torn(self, path: Path) -> bool:
        """Whether a sealed segment may end with a record cut short, which was never
        acknowledged (its request got no 200): adopted, or ended by a failed write or
        sync of ours. A segment of ours sealed whole holds only intact records."""
        with self._cond:
            return path in self._may_be_torn

    def keep_damaged(self, path: Path) -> Path:
        """Move a sealed segment whose intact records are in ClickHouse, but which holds
        more than a torn tail after them, to ``<root>/damaged/`` (the writer logged it);
        return its new path. Kept, not deleted: records after a bad one may be
        acknowledged rows, which an operator can still look at."""
        damaged = self.root / DAMAGED
        if not damaged.is_dir():
            damaged.mkdir(exist_ok=True)
            ownership.fsync_dir(self.root)
        size = path.stat().st_size
        target = damaged / path.name  # a segment's name is unique (time and random)
        path.rename(target)
        # From here the segment is no longer where the writer looks: it leaves the queue
        # whatever the syncs below do, or every retry met FileNotFoundError and the
        # writer stalled behind it until a restart (found in review).
        with self._cond:
            self._sealed.remove(path)
            self._bytes -= size
            self._may_be_torn.discard(path)
        try:
            # Both entries durable before the markers go: a crash in between leaves the
            # segment where it was, to be inserted (deduplicated) and moved again.
            ownership.fsync_dir(damaged)
            ownership.fsync_dir(path.parent)
        except OSError as exc:
            # Not durable: after a power cut the segment may be back where it was, and
            # is then inserted (deduplicated) and kept again. Its markers stay for that.
            log.error("spool: syncing the move of %s to %s failed: %s", path.name, damaged, exc)
            return target
        if self._bisecting:
            self._drop_markers(path)
        return target

    # -- poison rows (writer.py) ---------------------------------------------------------
    def mark_bisect(self, path: Path, table: str) -> None:
        """Durably record that ``table``'s rows of segment ``path`` go in by parts, before
        the first part is sent: a replay must never send them whole again, as the whole
        batch's token would not deduplicate against the parts already in."""
        marker = bisect_marker(path, table)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        ownership.fsync_dir(marker.parent)  # the file is empty: its name is the record
        with self._cond:
            self._bisecting.add(marker)

    def bisecting(self, path: Path, table: str) -> bool:
        return bool(self._bisecting) and bisect_marker(path, table) in self._bisecting

    def record_split(self, path: Path, table: str, lo: int, hi: int) -> None:
        """Durably note that rows ``lo..hi-1`` were refused together, before any of their
        parts is sent: a replay must not send them together again either."""
        marker = bisect_marker(path, table)
        fd = os.open(marker, os.O_RDWR | os.O_APPEND)
        try:
            journal = os.pread(fd, os.fstat(fd).st_size, 0)  # a few lines
            size = len(journal)
            if journal and not journal.endswith(b"\n"):
                # A line cut short by a crash (never synced, so none of its parts was
                # sent): cut it off, or this range would join onto it ("4-" + "4-8\n"
                # = "4-4-8\n") and the marker would hold neither.
                size = journal.rfind(b"\n") + 1
                os.ftruncate(fd, size)
            line = f"{lo}-{hi}\n".encode()
            try:
                # A short write (a nearly full disk) must raise: the range would not be
                # noted, its halves would be sent all the same, and a replay would send
                # the range whole again over them (duplicates).
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(f"short write to {marker} ({written} of {len(line)} bytes)")
            except OSError:
                os.ftruncate(fd, size)  # no torn line left for the next range to join
                raise
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def splits(self, path: Path, table: str) -> set[tuple[int, int]]:
        """The row ranges ``record_split`` noted for this segment and table."""
        text = bisect_marker(path, table).read_text()
        # A line cut short by a crash was never synced, so no part of it was sent. A line
        # that is not two numbers (a torn one that a range written by a version without
        # the cut in record_split joined onto) is skipped: raising here would stop the
        # segment, and every later one, on every retry.
        lines = (_RANGE.fullmatch(line) for line in text.split("\n")[:-1])
        return {(int(m[1]), int(m[2])) for m in lines if m}

    def _drop_markers(self, path: Path) -> None:
        markers = [bisect_marker(path, t) for t in records.TABLES]
        markers = [m for m in markers if m in self._bisecting]
        if not markers:
            return
        # The segment's deletion first, durably: a marker lost while its segment stays
        # would let a replay insert the whole batch over the parts already in.
        ownership.fsync_dir(path.parent)
        for marker in markers:
            marker.unlink(missing_ok=True)
        with self._cond:
            self._bisecting.difference_update(markers)

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
