"""A small populated instance for access tests: the callers of the permission matrix.

Users (all with password ``PASSWORD``) and one bearer token each:
- ``primary``: the primary user, global admin;
- ``admin``: another global admin;
- ``outsider``: a global member in no project;
- ``viewer``, ``editor``, ``padmin``: global members with that role on ``project_id``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import falcon.testing
from argon2 import PasswordHasher
from sqlalchemy.orm import Session, sessionmaker

from errortrack import db
from errortrack.auth.tokens import create_token
from errortrack.models import ProjectMember, User
from errortrack.projects.service import create_project
from errortrack.state import AppState

PASSWORD = "correct horse battery"
CALLERS = ("anonymous", "bad_token", "primary", "admin", "outsider", "viewer", "editor", "padmin")
PROJECT_ROLES = {"viewer": "viewer", "editor": "editor", "padmin": "admin"}
_serial = itertools.count(1)


@functools.cache
def password_hash() -> str:
    """One argon2id hash for every test user, with cheap parameters: verification costs
    what the hash's own parameters say, and the production ones take ~0.1-0.5 s per login
    on a busy CI machine. Production hashing is exercised by invitations and by
    ``test_unknown_emails_cost_a_password_check_too``."""
    return PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1).hash(PASSWORD)


@dataclasses.dataclass
class World:
    state: AppState
    client: falcon.testing.TestClient
    users: dict[str, int]
    tokens: dict[str, str]
    project_id: int

    @property
    def factory(self) -> sessionmaker[Session]:
        return self.state.sessions

    def headers(self, caller: str) -> dict[str, str]:
        if caller == "anonymous":
            return {}
        if caller == "bad_token":
            return {"Authorization": "Bearer et_this-token-does-not-exist"}
        return {"Authorization": f"Bearer {self.tokens[caller]}"}

    def call(self, caller: str, method: str, path: str, body: Any = None) -> Any:
        return self.client.simulate_request(method, path, headers=self.headers(caller), json=body)

    def add_user(self, role: str = "member", *, email: str | None = None) -> int:
        with db.unit_of_work(self.factory) as s:
            return add_user(s, email or f"user{next(_serial)}@example.com", role).id

    def add_token(self, user_id: int) -> str:
        with db.unit_of_work(self.factory) as s:
            return create_token(s, user_id=user_id, description="t", now=self.state.clock()).secret

    def add_project(self, *, with_members: bool = True) -> int:
        """A project where viewer/editor/padmin have their roles (like ``project_id``)."""
        with db.unit_of_work(self.factory) as s:
            project = create_project(s, name=f"project {next(_serial)}")
            if with_members:
                for caller, role in PROJECT_ROLES.items():
                    s.add(
                        ProjectMember(project_id=project.id, user_id=self.users[caller], role=role)
                    )
            return project.id

    def add_member(self, project_id: int, user_id: int, role: str) -> None:
        with db.unit_of_work(self.factory) as s:
            s.add(ProjectMember(project_id=project_id, user_id=user_id, role=role))


def add_user(session: Session, email: str, role: str, *, primary: bool = False) -> User:
    user = User(email=email, password_hash=password_hash(), role=role, is_primary=primary)
    session.add(user)
    session.flush()
    return user


def build_world(state: AppState, client: falcon.testing.TestClient) -> World:
    users: dict[str, int] = {}
    tokens: dict[str, str] = {}
    with db.unit_of_work(state.sessions) as s:
        for name in CALLERS[2:]:
            role = "admin" if name in ("primary", "admin") else "member"
            user = add_user(s, f"{name}@example.com", role, primary=name == "primary")
            users[name] = user.id
            tokens[name] = create_token(
                s, user_id=user.id, description=name, now=state.clock()
            ).secret
    world = World(state, client, users, tokens, project_id=0)
    world.project_id = world.add_project()
    return world
