"""Password hashing with argon2id (argon2-cffi's defaults follow RFC 9106)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from errortrack.errors import PasswordBusy

_hasher = PasswordHasher()

MIN_LENGTH = 8

# Hashes computed at once, per process. Each takes 64 MiB and ~0.4 s of both cores
# (the defaults' m=64 MiB, p=4), and logins need no account: eight bad logins with eight
# emails (the lockout counts per email) filled the API's threads and took the worker
# from 430 to 955 MB (review, twenty-fifth session). Further logins wait their turn.
RUNNING = 2
_SLOTS = threading.BoundedSemaphore(RUNNING)

# Checks let wait for a slot, beyond those running. Each waits in one of the API's
# threads (8 by default): unbounded, junk logins with a new email each time, from one
# address and without credentials, held all of them, and a token's GET /api/me took a
# median 2-4 s behind 16 such logins and 18-23 s behind 64 (security review). So at most
# RUNNING + WAITING threads wait on passwords; another check is refused at once (503
# password_busy, Retry-After: BUSY_RETRY_AFTER). Two waiting get a slot within one hash,
# which a legitimate login barely notices; the CLI, alone in its process, never meets
# the bound.
WAITING = 2
_ADMITTED = threading.BoundedSemaphore(RUNNING + WAITING)
# About one hash's time, rounded up: a slot is free by then unless the flood goes on.
BUSY_RETRY_AFTER = 1


@contextlib.contextmanager
def _slot() -> Iterator[None]:
    if not _ADMITTED.acquire(blocking=False):
        raise PasswordBusy(
            "too many password checks at once; try again in a second",
            retry_after=BUSY_RETRY_AFTER,
        )
    try:
        with _SLOTS:
            yield
    finally:
        _ADMITTED.release()


def hash_password(password: str) -> str:
    """Raises :class:`PasswordBusy` when RUNNING + WAITING checks are already under way."""
    with _slot():
        return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """Raises :class:`PasswordBusy` as ``hash_password`` does (not a failed check: the
    password was not looked at)."""
    try:
        with _slot():
            return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False
