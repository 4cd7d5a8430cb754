"""User services. Plain functions over a session; no request or response inside."""

from __future__ import annotations

import re
import unicodedata

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.passwords import MIN_LENGTH, hash_password
from errortrack.errors import Conflict, ValidationError
from errortrack.models import User

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

# Characters no address may hold (the review of the twentieth session invited
# "\u0011@ą😍.µ"): controls (Cc: C0, DEL, C1), format characters (Cf: invisible ones such
# as the zero-width space, the soft hyphen and the BOM, and the bidi overrides that show
# an address reversed), private use (Co) and surrogates (Cs). An admin reads an
# invitation's address, and these make one address look like another or like nothing.
# Up to U+FFFF only: the document's pattern (api/schemas/access.py) must state exactly
# this, alike for Python's re and for ECMA-262 without the u flag (as Swagger UI
# compiles it), where a character past U+FFFF is two surrogate code units and no range
# of them can be written. So the tag characters (U+E0000 block), the few other format
# characters past U+FFFF and the supplementary private-use planes are taken, like any
# visible character there (emoji). Unassigned code points (Cn) are taken too: which
# they are depends on the Unicode version of whoever reads them. The set is spelled
# out rather than read from unicodedata so that the pattern and the check cannot
# differ; a test holds it to the running Python's categories (it has Unicode 14's).
# Except the zero-width non-joiner and joiner (U+200C, U+200D): IDNA2008 allows them in
# context (RFC 5892, CONTEXTJ), and Persian or Indic domain names need them.
INVISIBLE_BMP = (
    r"\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ue000-\uf8ff\ufeff\ufff9-\ufffb"
)
# Lone surrogates besides: JSON cannot carry them (orjson refuses), a command line can.
INVISIBLE = re.compile(rf"[{INVISIBLE_BMP}\ud800-\udfff]")


def email_key(email: str) -> str:
    """An email as accounts are stored and looked up: NFC (an "é" typed as one code point
    or as "e" plus an accent is one address, not two accounts), trimmed, lower-case."""
    # NFC again after lower(): lower-casing can make a sequence that composes ("T" and a
    # diaeresis become "t" and one, which NFC writes as one code point).
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", email or "").strip().lower())


def normalise_email(email: str) -> str:
    value = email_key(email)
    # The length first: the pattern backtracks over every dot of "a@....@", and 16,000
    # dots took 1.7 s holding the GIL (DoS review, thirtieth session); 320 take ~1 ms.
    if len(value) > 320 or not _EMAIL.match(value):
        raise ValidationError("not a valid email address", field="email")
    hidden = INVISIBLE.search(value)
    if hidden is not None:
        raise ValidationError(
            f"not a valid email address: it holds U+{ord(hidden.group()):04X}, a control, "
            "invisible or private-use character",
            field="email",
        )
    return value


def check_password(password: str) -> None:
    if len(password or "") < MIN_LENGTH:
        raise ValidationError(
            f"password must be at least {MIN_LENGTH} characters", field="password"
        )


def bootstrap_primary(session: Session, *, email: str, password: str) -> User:
    """Create the first account: the primary user, a global admin. Only while none exists."""
    email = normalise_email(email)
    check_password(password)
    # Slow: hashed before the check rather than between it and the insert.
    password_hash = hash_password(password)
    refused = Conflict("a user already exists; bootstrap only creates the first account")
    if session.scalar(sa.select(sa.func.count()).select_from(User)):
        raise refused
    user = User(email=email, password_hash=password_hash, role="admin", is_primary=True)
    session.add(user)
    try:
        session.flush()
    except sa.exc.IntegrityError:
        # Another bootstrap inserted between the count and this insert: the unique index
        # on the primary flag (uq_users_primary) lets only one of them through.
        raise refused from None
    return user
