"""Projects the caller can access, their members and their ingest keys."""

from __future__ import annotations

import logging
from typing import Any

import falcon
from clickhouse_connect.driver.exceptions import Error as DriverError

from errortrack.api.auth import principal
from errortrack.api.middleware import session
from errortrack.api.schemas import api_doc, load
from errortrack.api.schemas.access import (
    KeyIn,
    KeyOut,
    KeyPatchIn,
    MemberOut,
    MemberPutIn,
    MemberRoleIn,
    ProjectIn,
    ProjectOut,
    ProjectPatchIn,
)
from errortrack.auth.permissions import project_role, require_project
from errortrack.models import ProjectKey, User
from errortrack.projects import keys, manage, members
from errortrack.projects.service import create_project
from errortrack.state import AppState
from errortrack.storage import deleted

log = logging.getLogger(__name__)


class Projects:
    def __init__(self, state: AppState) -> None:
        self._public_url = state.settings.public_url

    @api_doc(
        "Projects the caller can access, each with its DSN and the caller's role",
        response=ProjectOut,
        many=True,
        tags=("projects",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        found = manage.list_visible(session(req), principal(req), public_url=self._public_url)
        resp.media = ProjectOut(many=True).dump(found)

    @api_doc(
        "Create a project (a global member creating one becomes its admin)",
        request=ProjectIn,
        response=ProjectOut,
        status=201,
        tags=("projects",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        me, db = principal(req), session(req)
        body = load(req, ProjectIn)
        project = create_project(db, name=body["name"], creator=db.get(User, me.user_id))
        role = project_role(db, me, project.id) or "admin"
        resp.media = ProjectOut().dump(
            manage.record(db, project, role=role, public_url=self._public_url)
        )
        resp.status = falcon.HTTP_201


class ProjectItem:
    def __init__(self, state: AppState) -> None:
        self._state = state
        self._public_url = state.settings.public_url

    def _answer(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        db, me = session(req), principal(req)
        project = require_project(db, me, project_id, "read")
        role = project_role(db, me, project_id) or "viewer"
        resp.media = ProjectOut().dump(
            manage.record(db, project, role=role, public_url=self._public_url)
        )

    @api_doc("One project with its DSN", response=ProjectOut, tags=("projects",))
    def on_get(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        self._answer(req, resp, project_id)

    @api_doc(
        "Update a project's name or retention (editor or above)",
        request=ProjectPatchIn,
        response=ProjectOut,
        tags=("projects",),
    )
    def on_patch(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        project = require_project(session(req), principal(req), project_id, "write")
        manage.update_project(session(req), project, load(req, ProjectPatchIn))
        self._answer(req, resp, project_id)

    @api_doc("Delete a project (project admin)", status=204, tags=("projects",))
    def on_delete(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        project = require_project(session(req), principal(req), project_id, "admin")
        manage.delete_project(session(req), project, now=self._state.clock())
        session(req).commit()
        # Its rows once it is gone for good. Best effort: a ClickHouse that cannot take
        # the DELETE now leaves it to the next retention pass (storage/deleted.py).
        try:
            deleted.delete_rows(self._state.api_clickhouse, [project_id], wait=False)
        except DriverError:
            log.warning(
                "rows of deleted project %d not deleted now; the next retention pass will",
                project_id,
                exc_info=True,
            )
        resp.status = falcon.HTTP_204


class Members:
    @api_doc("A project's members", response=MemberOut, many=True, tags=("projects",))
    def on_get(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        require_project(session(req), principal(req), project_id, "read")
        resp.media = MemberOut(many=True).dump(members.list_members(session(req), project_id))

    @api_doc(
        "Add a member or change their role (project admin)",
        request=MemberPutIn,
        response=MemberOut,
        tags=("projects",),
    )
    def on_put(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        require_project(session(req), principal(req), project_id, "admin")
        body = load(req, MemberPutIn)
        member = members.put_member(session(req), principal(req), project_id=project_id, **body)
        resp.media = MemberOut().dump(member)


class Member:
    @api_doc(
        "Change a member's role (project admin)",
        request=MemberRoleIn,
        response=MemberOut,
        tags=("projects",),
    )
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, user_id: int
    ) -> None:
        require_project(session(req), principal(req), project_id, "admin")
        body = load(req, MemberRoleIn)
        member = members.change_member(
            session(req), principal(req), project_id=project_id, user_id=user_id, role=body["role"]
        )
        resp.media = MemberOut().dump(member)

    @api_doc("Remove a member from the project (project admin)", status=204, tags=("projects",))
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, user_id: int
    ) -> None:
        require_project(session(req), principal(req), project_id, "admin")
        members.remove_member(session(req), principal(req), project_id=project_id, user_id=user_id)
        resp.status = falcon.HTTP_204


class _KeyResource:
    def __init__(self, state: AppState) -> None:
        self._public_url = state.settings.public_url

    def _out(self, key: ProjectKey) -> dict[str, Any]:
        return KeyOut().dump(keys.record(key, public_url=self._public_url))


class Keys(_KeyResource):
    @api_doc(
        "A project's ingest keys with their DSNs", response=KeyOut, many=True, tags=("projects",)
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        require_project(session(req), principal(req), project_id, "read")
        found = keys.list_keys(session(req), project_id)
        resp.media = [self._out(k) for k in found]

    @api_doc(
        "Create an ingest key, a new DSN (project admin)",
        request=KeyIn,
        response=KeyOut,
        status=201,
        tags=("projects",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        require_project(session(req), principal(req), project_id, "admin")
        body = load(req, KeyIn)
        key = keys.create_key(session(req), project_id, label=body.get("label"))
        resp.media = self._out(key)
        resp.status = falcon.HTTP_201


class KeyItem(_KeyResource):
    @api_doc("One ingest key", response=KeyOut, tags=("projects",))
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, key_id: int
    ) -> None:
        require_project(session(req), principal(req), project_id, "read")
        key = keys.get_key(session(req), project_id, key_id)
        resp.media = self._out(key)

    @api_doc(
        "Disable, enable or relabel an ingest key (project admin); ingest refuses a "
        "disabled key within 10 s",
        request=KeyPatchIn,
        response=KeyOut,
        tags=("projects",),
    )
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, key_id: int
    ) -> None:
        require_project(session(req), principal(req), project_id, "admin")
        body = load(req, KeyPatchIn)
        key = keys.update_key(session(req), project_id, key_id, body)
        resp.media = self._out(key)

    @api_doc(
        "Delete an ingest key (project admin); ingest refuses it within 10 s",
        status=204,
        tags=("projects",),
    )
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, key_id: int
    ) -> None:
        require_project(session(req), principal(req), project_id, "admin")
        keys.delete_key(session(req), project_id, key_id)
        resp.status = falcon.HTTP_204
