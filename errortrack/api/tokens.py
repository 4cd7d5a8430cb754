"""The caller's own API tokens: create (secret shown once), list, revoke."""

from __future__ import annotations

import falcon

from errortrack.api.auth import principal
from errortrack.api.middleware import session
from errortrack.api.schemas import api_doc, load
from errortrack.api.schemas.access import NewTokenOut, TokenIn, TokenOut
from errortrack.auth import tokens
from errortrack.state import AppState


class Tokens:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "The caller's tokens (prefix, created and last-used times)",
        response=TokenOut,
        many=True,
        tags=("tokens",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        found = tokens.list_tokens(session(req), principal(req).user_id)
        resp.media = TokenOut(many=True).dump(found)

    @api_doc(
        "Create a token for the caller; the secret is in this answer only",
        request=TokenIn,
        response=NewTokenOut,
        status=201,
        tags=("tokens",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        me = principal(req)
        body = load(req, TokenIn)
        new = tokens.create_token(
            session(req),
            user_id=me.user_id,
            description=body["description"],
            now=self._state.clock(),
        )
        fields = ("id", "description", "prefix", "created_at", "last_used_at")
        data = {name: getattr(new.token, name) for name in fields}
        resp.media = NewTokenOut().dump({**data, "token": new.secret})
        resp.status = falcon.HTTP_201


class TokenItem:
    @api_doc("Revoke one of the caller's own tokens", status=204, tags=("tokens",))
    def on_delete(self, req: falcon.Request, resp: falcon.Response, token_id: int) -> None:
        tokens.revoke_token(session(req), user_id=principal(req).user_id, token_id=token_id)
        resp.status = falcon.HTTP_204
