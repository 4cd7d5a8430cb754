"""Which process owns which spool directory: a ``flock`` per directory, and adoption.

A process adopts the segments of every ``w-*`` directory whose lock is free (its
process died or stopped), renaming them into its own directory under the same names,
so their insert deduplication tokens, and with them exactly-once replay, survive; the
same goes for the writer's bisection markers next to them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)


def adopt_orphans(root: Path, own: Path, suffix: str, *, markers: str = "") -> list[Path]:
    """Move orphans' segments (and their ``markers`` files) into ``own``; return every
    segment there, oldest first."""
    move_orphans(root, own, suffix, markers=markers)
    return sorted(own.glob(f"*{suffix}"))


def move_orphans(root: Path, own: Path, suffix: str, *, markers: str = "") -> list[Path]:
    """Move orphans' segments (and their ``markers`` files) into ``own``, durably; return
    what was moved (segments and markers), by their new paths."""
    moved_here: list[Path] = []
    for other in sorted(root.glob("w-*")):
        if other == own or not other.is_dir():
            continue
        try:
            fd = lock(other)
        except FileNotFoundError:
            # Another worker starting at the same moment adopted it and removed it
            # after the check above: nothing is left to adopt, and failing here would
            # fail this worker's boot (gunicorn then stops the whole server).
            continue
        if fd is None:
            continue  # a live process owns it
        try:
            # Markers first: a crash in between must never leave a segment adopted
            # without the marker that says how to replay it (writer.py, "Poison rows").
            moved = [*other.glob(f"*{markers}")] if markers else []
            for path in [*moved, *other.glob(f"*{suffix}")]:
                # Same name, same dedup token: a replay stays idempotent.
                path.rename(own / path.name)
                moved_here.append(own / path.name)
            with contextlib.suppress(FileNotFoundError):
                (other / "lock").unlink()
            other.rmdir()
        except OSError as exc:
            log.warning("could not adopt spool directory %s: %s", other, exc)
        finally:
            os.close(fd)
    if moved_here:
        fsync_dir(own)  # make the adopted renames durable before replaying them
    return moved_here


# A worker makes, locks and renames its ``.new-*`` directory within milliseconds; one
# older than this whose lock is free was left by a process that died in between.
STALE_STAGING_SECONDS = 60.0


def remove_stale_staging(root: Path) -> None:
    """Remove ``.new-*`` directories left empty by a crash before their rename.

    Nothing is ever written in one but its lock file, so no data goes with it. A fresh
    one may be another worker's about to be locked: removing that would fail its boot.
    """
    now = time.time()
    for staging in root.glob(".new-*"):
        try:
            if now - staging.stat().st_mtime < STALE_STAGING_SECONDS:
                continue
            fd = lock(staging)
        except OSError:
            continue  # gone meanwhile (another worker removed it) or not a directory
        if fd is None:
            continue
        try:
            (staging / "lock").unlink()
            staging.rmdir()
        except OSError as exc:
            log.warning("could not remove spool staging directory %s: %s", staging, exc)
        finally:
            os.close(fd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock(directory: Path) -> int | None:
    """The directory's lock fd, or None when another live process holds it."""
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
