"""Schemas of the access endpoints: login, me, team, invitations, projects, members, tokens.

``...In`` schemas validate request bodies (unknown fields are refused); ``...Out``
schemas shape responses. Emails and names are checked again by the services, which are
the single source of their rules; the schemas check types and enumerations, and their
metadata tells the OpenAPI document those rules (a length, a range, an email's shape)
without checking them twice, so that the services' messages stay the answers.
"""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from errortrack.auth.passwords import MIN_LENGTH as MIN_PASSWORD
from errortrack.config import MAX_RETENTION_DAYS
from errortrack.db import MAX_ID
from errortrack.models import GLOBAL_ROLES, PROJECT_ROLES
from errortrack.projects.keys import MAX_LABEL
from errortrack.team.users import INVISIBLE_BMP

_global_role = validate.OneOf(GLOBAL_ROLES)
_project_role = validate.OneOf(PROJECT_ROLES)


class UserOut(Schema):
    id = fields.Int(required=True)
    email = fields.Str(required=True)
    role = fields.Str(required=True, metadata={"enum": list(GLOBAL_ROLES)})
    is_primary = fields.Bool(required=True)
    created_at = fields.DateTime(required=True)


# Bounds on what a caller without credentials can make the server hash (argon2 reads
# the whole password) and keep (the login throttle's keys hold the email). No address
# is longer than 320 characters (RFC 3696); 1024 leaves room for any passphrase.
_email = validate.Length(max=320)
_password = validate.Length(max=1024)

# The services' rules, as the document states them (a request the document allows must
# be one the server takes: tests/e2e/test_schemathesis.py checks it). Names and
# descriptions are trimmed and then 1 to 200 characters (projects.service, auth.tokens):
# "not blank" is a pattern, the length is counted before trimming, which is stricter.
# Whitespace as Python's str.strip() and re's \s see it, spelled out: a JSON Schema's \s
# is ECMAScript's, which leaves out \x1c-\x1f and \x85 (a name of "\x85" passed the
# document's "\S" and was blank to the server) and takes in \ufeff.
_SPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# No text may hold NUL (api.schemas.load refuses it everywhere: PostgreSQL cannot store it).
_NO_NUL = r"^[^\x00]*$"
_NAME_MAX = 200
_named = {
    "minLength": 1,
    "maxLength": _NAME_MAX,
    "pattern": rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$",
}
# team.users.normalise_email: its pattern and length (on the trimmed, lower-cased NFC form),
# and the control, invisible and private-use characters it refuses (users.INVISIBLE_BMP).
_part = rf"[^@{_SPACE}{INVISIBLE_BMP}]+"
_email_shape = {
    "maxLength": 320,
    "pattern": rf"^{_part}@{_part}\.{_part}$",
    "description": "No control, format (invisible) or private-use character up to "
    "U+FFFF (Unicode categories Cc, Cf, Co)",
}


class LoginIn(Schema):
    # No NUL, as in every body (api.schemas.load's 400): the document said nothing and a
    # NUL was a 400 where it promised only 401s.
    email = fields.Str(required=True, validate=_email, metadata={"pattern": _NO_NUL})
    password = fields.Str(required=True, validate=_password, metadata={"pattern": _NO_NUL})


class SessionOut(Schema):
    """Answer of login and of accepting an invitation; the cookie is set alongside."""

    user = fields.Nested(UserOut, required=True)
    csrf_token = fields.Str(
        required=True, metadata={"description": "Send as X-CSRF-Token on cookie writes"}
    )


class MeOut(Schema):
    user = fields.Nested(UserOut, required=True)
    auth = fields.Str(required=True, metadata={"enum": ["token", "session"]})
    csrf_token = fields.Str(
        required=True,
        allow_none=True,
        metadata={"description": "The session's CSRF token; null with a token"},
    )


class RoleIn(Schema):
    role = fields.Str(required=True, validate=_global_role)


class InvitationIn(Schema):
    email = fields.Str(required=True, validate=_email, metadata=_email_shape)
    role = fields.Str(required=True, validate=_global_role)


class InvitationOut(Schema):
    id = fields.Int(required=True)
    email = fields.Str(required=True)
    role = fields.Str(required=True, metadata={"enum": list(GLOBAL_ROLES)})
    token = fields.Str(required=True)
    link = fields.Str(required=True, metadata={"description": "<public_url>/invite/<token>"})
    created_by = fields.Int(required=True, allow_none=True)
    created_at = fields.DateTime(required=True)
    expires_at = fields.DateTime(required=True)


class InvitationPublicOut(Schema):
    """What the invite page may show before the password is set."""

    email = fields.Str(required=True)
    role = fields.Str(required=True, metadata={"enum": list(GLOBAL_ROLES)})
    expires_at = fields.DateTime(required=True)


class AcceptIn(Schema):
    password = fields.Str(
        required=True, validate=_password, metadata={"minLength": MIN_PASSWORD, "pattern": _NO_NUL}
    )


class PasswordChangeIn(Schema):
    current_password = fields.Str(required=True, validate=_password, metadata={"pattern": _NO_NUL})
    new_password = fields.Str(
        required=True, validate=_password, metadata={"minLength": MIN_PASSWORD, "pattern": _NO_NUL}
    )


class PasswordChangedOut(Schema):
    csrf_token = fields.Str(
        required=True,
        allow_none=True,
        metadata={
            "description": "The caller's new session's CSRF token (its cookie is set "
            "alongside); null with a token"
        },
    )


class ProjectIn(Schema):
    name = fields.Str(required=True, metadata=_named)


class ProjectPatchIn(Schema):
    name = fields.Str(metadata=_named)
    retention_days = fields.Int(
        strict=True,
        allow_none=True,
        metadata={
            "minimum": 1,
            "maximum": MAX_RETENTION_DAYS,
            "description": "Days; null: the instance default",
        },
    )


class ProjectOut(Schema):
    id = fields.Int(required=True)
    name = fields.Str(required=True)
    retention_days = fields.Int(required=True, allow_none=True)
    created_at = fields.DateTime(required=True)
    dsn = fields.Str(
        required=True, allow_none=True, metadata={"description": "DSN for Sentry SDKs"}
    )
    role = fields.Str(
        required=True,
        metadata={"enum": list(PROJECT_ROLES), "description": "The caller's effective role"},
    )


class _JSONBool(fields.Boolean):
    """true or false only: marshmallow also reads 1, "yes", "off", ... as booleans."""

    def _deserialize(self, value: object, attr: str | None, data: object, **kwargs: object) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


class KeyIn(Schema):
    label = fields.Str(
        allow_none=True,
        metadata={"description": "What the key is for", "maxLength": MAX_LABEL, "pattern": _NO_NUL},
    )


class KeyPatchIn(Schema):
    label = fields.Str(allow_none=True, metadata={"maxLength": MAX_LABEL, "pattern": _NO_NUL})
    is_active = _JSONBool(metadata={"description": "false: ingest refuses the key (403)"})


class KeyOut(Schema):
    id = fields.Int(required=True)
    label = fields.Str(required=True, allow_none=True)
    public_key = fields.Str(required=True)
    dsn = fields.Str(required=True, metadata={"description": "DSN for Sentry SDKs"})
    is_active = fields.Bool(required=True)
    created_at = fields.DateTime(required=True)


class MemberPutIn(Schema):
    user_id = fields.Int(required=True, strict=True, validate=validate.Range(min=1, max=MAX_ID))
    role = fields.Str(required=True, validate=_project_role)


class MemberRoleIn(Schema):
    role = fields.Str(required=True, validate=_project_role)


class MemberOut(Schema):
    user_id = fields.Int(required=True)
    email = fields.Str(required=True)
    role = fields.Str(required=True, metadata={"enum": list(PROJECT_ROLES)})
    created_at = fields.DateTime(required=True)


class TokenIn(Schema):
    description = fields.Str(required=True, metadata=_named)


class TokenOut(Schema):
    id = fields.Int(required=True)
    description = fields.Str(required=True)
    prefix = fields.Str(required=True, metadata={"description": "First characters of the token"})
    created_at = fields.DateTime(required=True)
    last_used_at = fields.DateTime(required=True, allow_none=True)


class NewTokenOut(TokenOut):
    token = fields.Str(required=True, metadata={"description": "The secret; shown only once"})
