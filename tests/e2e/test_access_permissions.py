"""The one permission check, on a real relational store."""

from __future__ import annotations

import pytest

from errortrack import db
from errortrack.auth.permissions import (
    Principal,
    project_role,
    require_global_admin,
    require_project,
    role_allows,
    visible_project_roles,
)
from errortrack.errors import Forbidden, NotFound
from errortrack.models import ProjectMember, User
from errortrack.projects.service import create_project


@pytest.fixture
def world(engine):
    factory = db.make_sessionmaker(engine)
    with db.unit_of_work(factory) as s:
        users = {}
        for name, role in [("admin", "admin"), ("member", "member"), ("outsider", "member")]:
            user = User(email=f"{name}@example.com", password_hash="x", role=role)
            s.add(user)
            s.flush()
            users[name] = Principal(user_id=user.id, role=role)
        project = create_project(s, name="p")
        other = create_project(s, name="other")
        ids = {"project": project.id, "other": other.id}
    return factory, users, ids


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        (None, set()),
        ("viewer", {"read"}),
        ("editor", {"read", "write"}),
        ("admin", {"read", "write", "admin"}),
    ],
)
def test_role_allows(role, allowed):
    assert {a for a in ("read", "write", "admin") if role_allows(role, a)} == allowed


def test_unknown_action_is_a_programming_error():
    with pytest.raises(ValueError):
        role_allows("admin", "delete")


@pytest.mark.parametrize("member_role", ["viewer", "editor", "admin"])
def test_members_get_their_role_and_no_more(world, member_role):
    factory, users, ids = world
    with db.unit_of_work(factory) as s:
        s.add(
            ProjectMember(
                project_id=ids["project"], user_id=users["member"].user_id, role=member_role
            )
        )
    me = users["member"]
    with factory() as s:
        assert project_role(s, me, ids["project"]) == member_role
        for action in ("read", "write", "admin"):
            if role_allows(member_role, action):
                assert require_project(s, me, ids["project"], action).id == ids["project"]
            else:
                with pytest.raises(Forbidden):
                    require_project(s, me, ids["project"], action)
        # A project they are not in is hidden, whatever the action.
        for action in ("read", "write", "admin"):
            with pytest.raises(NotFound):
                require_project(s, me, ids["other"], action)
        assert visible_project_roles(s, me) == {ids["project"]: member_role}


def test_global_admin_passes_everything_without_membership(world):
    factory, users, ids = world
    with factory() as s:
        for action in ("read", "write", "admin"):
            assert require_project(s, users["admin"], ids["other"], action).name == "other"
        assert visible_project_roles(s, users["admin"]) == {
            ids["project"]: "admin",
            ids["other"]: "admin",
        }
        with pytest.raises(NotFound):
            require_project(s, users["admin"], 999_999, "read")


def test_outsider_sees_nothing(world):
    factory, users, ids = world
    with factory() as s:
        assert visible_project_roles(s, users["outsider"]) == {}
        with pytest.raises(NotFound):
            require_project(s, users["outsider"], ids["project"], "read")


def test_require_global_admin(world):
    _, users, _ = world
    require_global_admin(users["admin"])
    with pytest.raises(Forbidden):
        require_global_admin(users["member"])
