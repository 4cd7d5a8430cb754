"""The team (global admins only): users and their global roles, invitations."""

from __future__ import annotations

from typing import Any

import falcon

from errortrack.api.auth import principal
from errortrack.api.middleware import session
from errortrack.api.schemas import api_doc, load
from errortrack.api.schemas.access import InvitationIn, InvitationOut, RoleIn, UserOut
from errortrack.auth.permissions import require_global_admin
from errortrack.models import Invitation
from errortrack.state import AppState
from errortrack.team import invitations, roster


class Team:
    @api_doc(
        "Users with their global roles and primary flag",
        response=UserOut,
        many=True,
        tags=("team",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        require_global_admin(principal(req))
        resp.media = UserOut(many=True).dump(roster.list_users(session(req)))


class TeamUser:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc("Change a user's global role", request=RoleIn, response=UserOut, tags=("team",))
    def on_patch(self, req: falcon.Request, resp: falcon.Response, user_id: int) -> None:
        me = principal(req)
        require_global_admin(me)
        body = load(req, RoleIn)
        user = roster.change_role(
            session(req), me, user_id=user_id, role=body["role"], now=self._state.clock()
        )
        resp.media = UserOut().dump(user)

    @api_doc(
        "Remove a user; their sessions and tokens stop working at once", status=204, tags=("team",)
    )
    def on_delete(self, req: falcon.Request, resp: falcon.Response, user_id: int) -> None:
        me = principal(req)
        require_global_admin(me)
        roster.remove_user(session(req), me, user_id=user_id, now=self._state.clock())
        resp.status = falcon.HTTP_204


def _invitation(invitation: Invitation, public_url: str) -> dict[str, Any]:
    fields = ("id", "email", "role", "token", "created_by", "created_at", "expires_at")
    data = {name: getattr(invitation, name) for name in fields}
    data["link"] = invitations.link(public_url, invitation.token)
    out: dict[str, Any] = InvitationOut().dump(data)
    return out


class Invitations:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "Pending invitations (not accepted, revoked or expired)",
        response=InvitationOut,
        many=True,
        tags=("team",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        require_global_admin(principal(req))
        pending = invitations.list_pending(session(req), now=self._state.clock())
        resp.media = [_invitation(i, self._state.settings.public_url) for i in pending]

    @api_doc(
        "Invite an email with a global role; the answer holds the token and link",
        request=InvitationIn,
        response=InvitationOut,
        status=201,
        tags=("team",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        me = principal(req)
        require_global_admin(me)
        body = load(req, InvitationIn)
        created = invitations.create_invitation(
            session(req),
            email=body["email"],
            role=body["role"],
            created_by=me.user_id,
            now=self._state.clock(),
        )
        resp.media = _invitation(created, self._state.settings.public_url)
        resp.status = falcon.HTTP_201


class InvitationItem:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc("Revoke a pending invitation", status=204, tags=("team",))
    def on_delete(self, req: falcon.Request, resp: falcon.Response, invitation_id: int) -> None:
        require_global_admin(principal(req))
        invitations.revoke_invitation(
            session(req), invitation_id=invitation_id, now=self._state.clock()
        )
        resp.status = falcon.HTTP_204
