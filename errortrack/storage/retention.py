"""The periodic retention pass run by the serving process.

Each pass, oldest first and only ever whole partitions (``DROP PARTITION``, never
row-by-row mutations):

1. drops every partition whose retention has run out for all its rows. ClickHouse's
   TTL would drop them too, but only when a background TTL merge gets round to it
   (``merge_with_ttl_timeout``, 4 h by default); the partition key carries
   ``retention_days``, so the expiry of a partition is exact and dropping it is free;
2. with a disk cap, while ClickHouse's bytes on disk (logs + events + spans) exceed it,
   drops the oldest day of all three tables, never today's;
3. deletes the rows of deleted projects that reached ClickHouse after their project
   went (``errortrack.storage.deleted``: rows the spool still held), a lightweight
   ``DELETE`` for the few it finds, waited for;
4. removes issues whose events are all gone (``errortrack.storage.issues``) -- only
   those already found without events by the previous pass. An issue is written by the
   ingest writer just before its events reach ClickHouse; if an SDK sent an old
   timestamp, one pass could fall in between. Two passes an interval apart cannot.

Every removal is logged, and so is a drop ClickHouse refuses, after which the pass goes
on with the rest (``_drop``). In server mode each worker (and each app instance) runs its
own pass; that is harmless because every step is idempotent.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from clickhouse_connect.driver.exceptions import Error as DriverError
from sqlalchemy.orm import Session

from errortrack import db
from errortrack.analytics import ClickHouse
from errortrack.state import CLOCK_SLACK
from errortrack.storage import deleted, issues, tables

if TYPE_CHECKING:
    from errortrack.state import AppState

log = logging.getLogger(__name__)

# Issues seen within this window are left alone: their events may still be in the spool.
ISSUE_GRACE = dt.timedelta(days=1)


@dataclasses.dataclass
class PassReport:
    expired: list[tables.Partition] = dataclasses.field(default_factory=list)
    over_cap: list[tables.Partition] = dataclasses.field(default_factory=list)
    # Partitions ClickHouse refused to drop: still on disk, tried again by the next pass.
    failed: list[tables.Partition] = dataclasses.field(default_factory=list)
    bytes_after: int = 0
    issues_removed: int = 0
    # Issues without events found by this pass: removed by the next one if still so.
    orphans: frozenset[int] = frozenset()
    # Per table, how many deleted projects it still held rows of (now deleted).
    deleted_projects: dict[str, int] = dataclasses.field(default_factory=dict)


def run_pass(
    session: Session,
    store: ClickHouse,
    *,
    now: dt.datetime,
    disk_cap_bytes: int = 0,
    seen_orphans: frozenset[int] = frozenset(),
) -> PassReport:
    report = PassReport()
    remaining = []
    for partition in tables.partitions(store):
        if partition.expires_at > now:
            remaining.append(partition)
        elif _drop(store, partition, "retention expired", report):
            report.expired.append(partition)
    # Expired partitions that could not be dropped still take their bytes.
    stuck = sum(p.bytes_on_disk for p in report.failed)
    if disk_cap_bytes > 0:
        report.over_cap = _enforce_cap(store, remaining, disk_cap_bytes, now.date(), report, stuck)
    dropped = set(report.over_cap)
    report.bytes_after = stuck + sum(p.bytes_on_disk for p in remaining if p not in dropped)
    try:
        report.deleted_projects = deleted.delete_rows(store, deleted.recorded(session))
    except DriverError:
        log.exception("retention: could not delete the rows of deleted projects; next pass")
    grace = now - ISSUE_GRACE
    report.orphans = frozenset(issues.orphaned(session, store, last_seen_before=grace))
    report.issues_removed = issues.remove(
        session, sorted(report.orphans & seen_orphans), last_seen_before=grace
    )
    _log(report, disk_cap_bytes)
    return report


def _drop(store: ClickHouse, partition: tables.Partition, reason: str, report: PassReport) -> bool:
    """Drop one partition; False, logged and noted in ``report.failed``, when ClickHouse
    refuses. One refused drop used to end the pass there: the later partitions, the disk
    cap and the issues left without events all waited on a partition that might never
    drop."""
    try:
        tables.drop_partition(store, partition)
    except DriverError:
        log.exception(
            "retention: could not drop %s partition %s (%d rows, %d bytes, %s); "
            "the next pass tries again",
            partition.table, partition.partition_id, partition.rows, partition.bytes_on_disk,
            reason,
        )  # fmt: skip
        report.failed.append(partition)
        return False
    return True


def _enforce_cap(
    store: ClickHouse,
    partitions: list[tables.Partition],
    cap: int,
    today: dt.date,
    report: PassReport,
    stuck: int,
) -> list[tables.Partition]:
    """Drop whole days, oldest first, until the bytes fit under ``cap``. A partition that
    cannot be dropped (``stuck`` bytes of them before this step) keeps its bytes, so the
    next day goes in its place."""
    total = stuck + sum(p.bytes_on_disk for p in partitions)
    days = sorted({p.day for p in partitions})
    dropped: list[tables.Partition] = []
    for day in days:
        if total <= cap:
            break
        if day >= today:
            log.warning(
                "disk cap %d bytes: still %d bytes after dropping every past day", cap, total
            )
            break
        for partition in (p for p in partitions if p.day == day):
            if _drop(store, partition, "over disk cap", report):
                dropped.append(partition)
                total -= partition.bytes_on_disk
    return dropped


def _log(report: PassReport, cap: int) -> None:
    for reason, parts in (
        ("retention expired", report.expired),
        ("over disk cap", report.over_cap),
    ):
        for p in parts:
            log.info(
                "retention: dropped %s partition %s (%d rows, %d bytes): %s",
                p.table, p.partition_id, p.rows, p.bytes_on_disk, reason,
            )  # fmt: skip
    for table, projects in report.deleted_projects.items():
        log.info("retention: deleted the %s of %d deleted projects", table, projects)
    if report.issues_removed:
        log.info("retention: removed %d issues whose events are all gone", report.issues_removed)
    if cap:
        log.info("retention: %d bytes on disk after the pass (cap %d)", report.bytes_after, cap)


class RetentionJob:
    """Runs ``run`` every ``interval`` seconds on a daemon thread until stopped.

    Started after fork with the rest of ``AppState.background``; the first pass runs
    one interval after start, so that a restart loop never hammers the stores.
    """

    def __init__(self, run: Callable[[], object], *, interval: float) -> None:
        self._run_once = run
        self.interval = interval
        self.passes = 0  # completed passes, failed ones included; for tests and logs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="retention", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._run_once()
            except Exception:  # a failed pass is logged; the next one tries again
                log.exception("retention pass failed")
            self.passes += 1


def _boottime() -> float:
    # CLOCK_BOOTTIME runs while the host is suspended, CLOCK_MONOTONIC does not: after
    # an 8-hour suspend the wall clock would look 8 hours ahead of the last pass.
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class SteadyClock:
    """The wall clock as a retention pass may trust it: never further ahead of the last
    pass's time than the monotonic clock has moved since, plus ``CLOCK_SLACK``.

    A pass drops whole partitions, for good. With the host's clock stepped 100 days
    ahead, the next pass dropped every partition, today's included, and nothing came
    back once the clock was put right (review, twenty-fourth session). A jump is logged
    and not followed: the passes then run behind the wall clock (keeping data longer)
    and catch up ``CLOCK_SLACK`` a pass, or at once on a restart. The first pass trusts
    the clock it finds (ClickHouse's own TTL merges use the host's clock anyway:
    OPERATIONS.md). The steady clock is CLOCK_BOOTTIME, which a suspend does not stop."""

    def __init__(
        self,
        wall: Callable[[], dt.datetime],
        monotonic: Callable[[], float] = _boottime,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._last: tuple[dt.datetime, float] | None = None
        self._lagging = False

    def __call__(self) -> dt.datetime:
        wall, steady = self._wall(), self._monotonic()
        if self._last is not None:
            last_wall, last_steady = self._last
            bound = last_wall + dt.timedelta(seconds=steady - last_steady) + CLOCK_SLACK
            if wall > bound:
                # Once at ERROR; the passes then catch up CLOCK_SLACK each (a warning).
                say = log.warning if self._lagging else log.error
                say(
                    "retention: the clock says %s, %s ahead of this pass's bound %s "
                    "(%.0f s since the last pass); going by the bound (is the host's "
                    "clock right?)",
                    wall.isoformat(), wall - bound, bound.isoformat(), steady - last_steady,
                )  # fmt: skip
                self._lagging = True
                wall = bound
            else:
                self._lagging = False
        self._last = (wall, steady)
        return wall


def build_job(state: AppState) -> RetentionJob:
    """The job the composition root adds to ``state.background``."""

    seen: list[frozenset[int]] = [frozenset()]
    clock = SteadyClock(state.clock)

    def one_pass() -> PassReport:
        with db.unit_of_work(state.sessions) as session:
            report = run_pass(
                session,
                state.clickhouse,
                now=clock(),
                disk_cap_bytes=state.settings.disk_cap_bytes,
                seen_orphans=seen[0],
            )
        seen[0] = report.orphans
        return report

    return RetentionJob(one_pass, interval=state.settings.retention_interval_seconds)
