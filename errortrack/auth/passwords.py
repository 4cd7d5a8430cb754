"""Password hashing with argon2id (argon2-cffi's defaults follow RFC 9106)."""

from __future__ import annotations

import threading

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()

MIN_LENGTH = 8

# Hashes computed at once, per process. Each takes 64 MiB and ~0.4 s of both cores
# (the defaults' m=64 MiB, p=4), and logins need no account: eight bad logins with eight
# emails (the lockout counts per email) filled the API's threads and took the worker
# from 430 to 955 MB (review, twenty-fifth session). Further logins wait their turn.
_SLOTS = threading.BoundedSemaphore(2)


def hash_password(password: str) -> str:
    with _SLOTS:
        return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        with _SLOTS:
            return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False
