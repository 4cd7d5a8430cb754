"""Login, logout, "who am I", registration (refused) and accepting an invitation."""

from __future__ import annotations

from urllib.parse import urlsplit

import falcon

from errortrack.api.auth import login_session, principal, session_cookie
from errortrack.api.client_ip import client_address
from errortrack.api.middleware import session
from errortrack.api.schemas import api_doc, load
from errortrack.api.schemas.access import (
    AcceptIn,
    InvitationPublicOut,
    LoginIn,
    MeOut,
    PasswordChangedOut,
    PasswordChangeIn,
    SessionOut,
)
from errortrack.auth import sessions
from errortrack.auth.login import change_password, login
from errortrack.auth.throttle import LoginThrottle
from errortrack.errors import Forbidden
from errortrack.models import User
from errortrack.state import AppState
from errortrack.team import invitations


def set_session_cookie(resp: falcon.Response, secret: str, *, secure: bool) -> None:
    resp.set_cookie(
        sessions.COOKIE_NAME,
        secret,
        max_age=int(sessions.LIFETIME.total_seconds()),
        path="/",
        secure=secure,
        http_only=True,
        same_site="Lax",
    )


def secure_cookies(state: AppState) -> bool:
    # The scheme is case-insensitive (RFC 3986): "HTTPS://..." is https too, and a
    # prefix test on the raw setting sent the cookie without Secure.
    return urlsplit(state.settings.public_url).scheme.lower() == "https"


def _session_answer(
    req: falcon.Request,
    resp: falcon.Response,
    state: AppState,
    user: User,
    new: sessions.NewSession,
) -> None:
    # The session is stored before its cookie is set: committed after the handler (in
    # DatabaseSessions), a commit that failed left a 503 carrying a cookie for a session
    # that never existed, and the browser dropped its working one (disk review).
    session(req).commit()
    set_session_cookie(resp, new.secret, secure=secure_cookies(state))
    resp.media = SessionOut().dump({"user": user, "csrf_token": new.login.csrf_token})


class Login:
    def __init__(self, state: AppState, throttle: LoginThrottle) -> None:
        self._state = state
        self._throttle = throttle

    @api_doc(
        "Log in with email and password; sets the session cookie",
        request=LoginIn,
        response=SessionOut,
        auth=False,
        tags=("auth",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = load(req, LoginIn, typed=True)
        user, new = login(
            session(req),
            email=body["email"],
            password=body["password"],
            ip=client_address(req, self._state.settings.trusted_proxies),
            throttle=self._throttle,
            now=self._state.clock(),
        )
        _session_answer(req, resp, self._state, user, new)


class Logout:
    def __init__(self, state: AppState) -> None:
        self._secure = secure_cookies(state)

    @api_doc(
        "End the current login session (or, with a token, the one the cookie sent beside "
        "it names) and clear its cookie",
        status=204,
        tags=("auth",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        principal(req)
        # The session the cookie names, also when a token authenticated the request (it
        # wins over a cookie): clearing the cookie then left that session valid for its
        # 14 days (found in review). Its secret is enough to end it: whoever holds it
        # could use the session anyway.
        secret = session_cookie(req)
        if secret is not None:
            sessions.end_session(session(req), secret)
            # Ended before the cookie is cleared: a 503 that cleared it left the session
            # valid for its 14 days, and the user believing they had logged out.
            session(req).commit()
        resp.unset_cookie(sessions.COOKIE_NAME, path="/")
        resp.status = falcon.HTTP_204


class Me:
    @api_doc("The caller, how it authenticated, and its CSRF token", response=MeOut, tags=("auth",))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        me = principal(req)
        current = login_session(req)
        user = session(req).get(User, me.user_id)
        resp.media = MeOut().dump(
            {"user": user, "auth": me.via, "csrf_token": current.csrf_token if current else None}
        )


class MyPassword:
    def __init__(self, state: AppState, throttle: LoginThrottle) -> None:
        self._state = state
        self._throttle = throttle

    @api_doc(
        "Change the caller's password; ends every login session of the caller's (a "
        "cookie caller gets a new one)",
        request=PasswordChangeIn,
        response=PasswordChangedOut,
        tags=("auth",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        me = principal(req)  # the caller first, as on every route: 401 / 403 before 400
        body = load(req, PasswordChangeIn)
        current = login_session(req)
        db = session(req)
        user = db.get(User, me.user_id)
        assert user is not None  # principal() found it in this very transaction
        change_password(
            db,
            user,
            current=body["current_password"],
            new=body["new_password"],
            ip=client_address(req, self._state.settings.trusted_proxies),
            throttle=self._throttle,
        )
        if current is None:  # a token: it stays, and no session was the caller's
            resp.media = PasswordChangedOut().dump({"csrf_token": None})
            return
        new = sessions.start_session(db, user_id=user.id, now=self._state.clock())
        db.commit()  # before the cookie, as at login
        set_session_cookie(resp, new.secret, secure=secure_cookies(self._state))
        resp.media = PasswordChangedOut().dump({"csrf_token": new.login.csrf_token})


class Register:
    """Registration is invite-only: always 403, whatever the body."""

    @api_doc(
        "Always refused: accounts are created by accepting an invitation",
        status=403,
        auth=False,
        tags=("auth",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise Forbidden("registration is invite-only; ask an admin for an invitation")


class InvitationByToken:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "What an invitation is for (email, role), while it can be accepted",
        response=InvitationPublicOut,
        auth=False,
        tags=("auth",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        found = invitations.find_usable(session(req), token, now=self._state.clock())
        resp.media = InvitationPublicOut().dump(found)


class AcceptInvitation:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "Accept an invitation: set a password, create the account, log in",
        request=AcceptIn,
        response=SessionOut,
        status=201,
        auth=False,
        tags=("auth",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        body = load(req, AcceptIn, typed=True)
        db, now = session(req), self._state.clock()
        user = invitations.accept_invitation(db, token=token, password=body["password"], now=now)
        _session_answer(
            req, resp, self._state, user, sessions.start_session(db, user_id=user.id, now=now)
        )
        resp.status = falcon.HTTP_201
