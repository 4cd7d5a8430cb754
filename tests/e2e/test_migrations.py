"""Both stores' migrations: relational up and down, ClickHouse applied once each."""

import datetime as dt
import time
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from errortrack import relational
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.ingest.envelope import parse
from errortrack.ingest.items import ItemContext
from errortrack.logs.filters import AttrFilter, LogFilter
from errortrack.logs.query import list_logs
from errortrack.models import Base
from errortrack.paging import PageRequest
from errortrack.traces.transactions import handle_transaction
from tests.logs_data import insert_logs, sdk_log
from tests.support import TEST_PG, scratch_database

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-envelopes"
APP_TABLES = {t.name for t in Base.metadata.sorted_tables}


def _tables(url):
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_relational_up_down_up(tmp_path):
    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        assert _tables(url) == APP_TABLES
        relational.downgrade(url, "base")
        assert _tables(url) == set()
        relational.upgrade(url)
        assert _tables(url) == APP_TABLES


def test_models_match_migrations(tmp_path):
    """Alembic's autogenerate finds nothing to add: the models and migrations agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        engine.dispose()
    assert diff == []


def test_clickhouse_runner_applies_each_file_once(chdb_dir):
    store = ClickHouse(f"chdb://{chdb_dir}", database="test_runner_once")
    try:
        first = ch_migrate.apply(store)
        assert first == [m.name for m in ch_migrate.load()]
        assert ch_migrate.apply(store) == []
        recorded = store.query_rows("SELECT name, count() FROM schema_migrations GROUP BY name")
        assert sorted(recorded) == [(name, 1) for name in first]
        tables = {row[0] for row in store.query_rows("SHOW TABLES")}
        assert {"logs", "events", "spans"} <= tables
    finally:
        store.drop_database()


def test_clickhouse_runner_applies_only_new_files(chdb_dir, tmp_path):
    store = ClickHouse(f"chdb://{chdb_dir}", database="test_runner_new")
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "0001_a.sql").write_text(
        "CREATE TABLE IF NOT EXISTS a (x UInt8) ENGINE = MergeTree ORDER BY x;\n"
    )
    try:
        assert ch_migrate.apply(store, ddl) == ["0001_a"]
        (ddl / "0002_b.sql").write_text("ALTER TABLE a ADD COLUMN IF NOT EXISTS y String;\n")
        assert ch_migrate.apply(store, ddl) == ["0002_b"]
        assert ch_migrate.apply(store, ddl) == []
        cols = [
            row[0]
            for row in store.query_rows(
                "SELECT name FROM system.columns "
                "WHERE database = currentDatabase() "
                "AND table = 'a' ORDER BY position"
            )
        ]
        assert cols == ["x", "y"]
    finally:
        store.drop_database()


def _wait_for_mutations(store, timeout=60.0):
    deadline = time.monotonic() + timeout
    while store.query_rows(
        "SELECT count() FROM system.mutations WHERE database = currentDatabase() AND NOT is_done"
    )[0][0]:
        assert time.monotonic() < deadline, "a mutation did not finish"
        time.sleep(0.05)


def _spans_from_fixture(store):
    """The span rows ingest makes of a real transaction envelope, inserted as the writer does."""
    envelope = parse((FIXTURES / "python" / "0009_d_transaction_2_spans.envelope").read_bytes())
    ctx = ItemContext(7, dt.datetime.now(dt.UTC), 3650, {})
    rows = [
        row
        for headers, payload in envelope.items
        if headers.get("type") == "transaction"
        for row in handle_transaction(payload, headers, ctx).spans
    ]
    assert rows and any(row["attr_string"] for row in rows)
    block = b"\n".join(orjson.dumps(row) for row in rows)
    store.client().raw_insert("spans", insert_block=block, fmt="JSONEachRow")


def test_map_keys_as_string_keep_stored_logs_and_spans(chdb_dir, tmp_path):
    """0012 and 0013 retype the typed maps' keys on tables that already hold rows: every
    row reads back the same, and attribute filters (the indexes and the attr_names
    projection over mapKeys) find the old logs as well as new ones."""
    store = ClickHouse(f"chdb://{chdb_dir}", database="test_map_keys")
    earlier = tmp_path / "ddl"
    earlier.mkdir()
    for migration in ch_migrate.load():
        if migration.name < "0012":
            (earlier / f"{migration.name}.sql").write_text(migration.sql)
    columns = (
        "SELECT table, name, type FROM system.columns WHERE database = currentDatabase()"
        " AND table IN ('logs', 'spans') AND name LIKE 'attr\\_%' ORDER BY table, name"
    )
    maps = "attr_string, attr_int, attr_float, attr_bool"
    reads = (
        f"SELECT id, attributes, {maps} FROM logs ORDER BY id",
        f"SELECT span_id, {maps} FROM spans ORDER BY span_id",
    )
    try:
        ch_migrate.apply(store, earlier)
        assert ("logs", "attr_int", "Map(LowCardinality(String), Int64)") in store.query_rows(
            columns
        )
        insert_logs(store, 7, [sdk_log("old", user="u1", n=3, ratio=0.5, ok=True)])
        _spans_from_fixture(store)
        before = [store.query_rows(read) for read in reads]

        applied = ch_migrate.apply(store)
        # Later migrations come along; these two are the ones under test.
        assert applied[:2] == ["0012_logs_map_keys_string", "0013_spans_map_keys_string"]
        _wait_for_mutations(store)
        assert store.query_rows(columns) == [
            (table, f"attr_{name}", f"Map(String, {value})")
            for table in ("logs", "spans")
            for name, value in sorted(
                {"string": "String", "int": "Int64", "float": "Float64", "bool": "Bool"}.items()
            )
        ]
        assert [store.query_rows(read) for read in reads] == before
        insert_logs(store, 7, [sdk_log("new", user="u1", n=3, ratio=0.5, ok=True)])
        page = PageRequest(per_page=10)
        for name, value in (("user", "u1"), ("n", "3"), ("ratio", "0.5"), ("ok", "true")):
            f = LogFilter(attributes=(AttrFilter(name, (value,)),))
            found = list_logs(store, 7, f, page)
            assert sorted(item["body"] for item in found["items"]) == ["new", "old"], name
    finally:
        store.drop_database()


def _sessions(url):
    from errortrack import db

    engine = db.make_engine(url)
    return engine, db.make_sessionmaker(engine)


def test_a_deleted_projects_id_is_never_given_again(tmp_path):
    # Its rows stay in ClickHouse until their retention ends: a new project with its id
    # would show them as its own (SQLite without AUTOINCREMENT reused the highest id).
    from errortrack.models import Project
    from errortrack.projects.manage import delete_project
    from errortrack.projects.service import create_project

    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            gone = create_project(s, name="old").id
        with sessions.begin() as s:
            delete_project(s, s.get(Project, gone), now=dt.datetime.now(dt.UTC))
        with sessions.begin() as s:
            assert create_project(s, name="new").id > gone
        engine.dispose()


def test_the_autoincrement_migration_keeps_projects_and_what_hangs_off_them(tmp_path):
    from errortrack.models import Project, ProjectKey
    from errortrack.projects.manage import delete_project
    from errortrack.projects.service import create_project

    with scratch_database(tmp_path) as url:
        relational.upgrade(url, "0002")
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            ids = [_old_project(s, f"p{i}") for i in range(3)]
        engine.dispose()
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            assert [p.id for p in s.scalars(sa.select(Project).order_by(Project.id))] == ids
            keys = s.scalars(sa.select(ProjectKey.project_id).order_by(ProjectKey.project_id))
            assert list(keys) == ids  # not cascaded away by the table's rebuild
            delete_project(s, s.get(Project, ids[-1]), now=dt.datetime.now(dt.UTC))
        with sessions.begin() as s:
            assert create_project(s, name="new").id > ids[-1]
            # The foreign keys still hold after the rebuild: a key of no project is refused.
            s.add(ProjectKey(project_id=10**6, public_key="f" * 32))
            with pytest.raises(sa.exc.IntegrityError):
                s.flush()
        engine.dispose()
        relational.downgrade(url, "0002")
        relational.upgrade(url)


def _old_project(session, name):
    """A project and its key as the schema before 0007 holds them: the ORM's models
    follow the newest schema (a key's ``label`` came with 0007)."""
    project_id = session.execute(
        sa.text(
            "INSERT INTO projects (name, created_at) VALUES (:n, CURRENT_TIMESTAMP) RETURNING id"
        ),
        {"n": name},
    ).scalar_one()
    session.execute(
        sa.text(
            "INSERT INTO project_keys (project_id, public_key, is_active, created_at)"
            " VALUES (:p, :k, :a, CURRENT_TIMESTAMP)"
        ),
        {"p": project_id, "k": f"{project_id:032x}", "a": True},
    )
    return project_id


def _old_issue(session, project_id, fingerprint, status, event_count):
    """An issue as the schema before 0009 holds it (``resolved_at`` came with 0009)."""
    return session.execute(
        sa.text(
            "INSERT INTO issues (project_id, fingerprint, title, culprit, level, status,"
            " first_seen, last_seen, event_count) VALUES (:p, :f, :t, '', 'error', :s,"
            " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, :n) RETURNING id"
        ),
        {"p": project_id, "f": fingerprint, "t": fingerprint, "s": status, "n": event_count},
    ).scalar_one()


def _issue(session, project_id, fingerprint, **kw):
    from errortrack.models import Issue

    now = dt.datetime.now(dt.UTC)
    issue = Issue(
        project_id=project_id,
        fingerprint=fingerprint,
        title=fingerprint,
        first_seen=now,
        last_seen=now,
        **kw,
    )
    session.add(issue)
    session.flush()
    return issue.id


def test_a_deleted_issues_id_is_never_given_again(tmp_path):
    # Events of a deleted issue can reach ClickHouse after its delete (counted by the
    # writer's hook before it, inserted after): a new issue with that id listed them.
    from errortrack.models import Issue
    from errortrack.projects.service import create_project

    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            project = create_project(s, name="p").id
            gone = _issue(s, project, "old")
        with sessions.begin() as s:
            s.delete(s.get(Issue, gone))
        with sessions.begin() as s:
            assert _issue(s, project, "new") > gone
        engine.dispose()


def test_the_issues_autoincrement_migration_keeps_issues_and_their_constraints(tmp_path):
    from errortrack.models import Issue

    with scratch_database(tmp_path) as url:
        relational.upgrade(url, "0003")
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            project = _old_project(s, "p")
            ids = [_old_issue(s, project, f"f{i}", "muted", i) for i in range(3)]
        engine.dispose()
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            kept = s.execute(
                sa.select(Issue.id, Issue.status, Issue.event_count).order_by(Issue.id)
            )
            assert [tuple(r) for r in kept] == [(i, "muted", n) for n, i in enumerate(ids)]
            s.delete(s.get(Issue, ids[-1]))
        with sessions.begin() as s:
            assert _issue(s, project, "new") > ids[-1]
        for broken in ({"fingerprint": "f0"}, {"fingerprint": "x", "status": "bogus"}):
            with pytest.raises(sa.exc.IntegrityError), sessions.begin() as s:
                _issue(s, project, **broken)  # the unique and check constraints hold
        with pytest.raises(sa.exc.IntegrityError), sessions.begin() as s:
            _issue(s, 10**6, "no project")  # and the foreign key
        engine.dispose()
        relational.downgrade(url, "0003")
        relational.upgrade(url)


def test_the_one_primary_migration_keeps_the_first_of_several(tmp_path):
    with scratch_database(tmp_path) as url:
        relational.upgrade(url, "0004")
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            for email in ("first@example.com", "second@example.com"):
                conn.execute(
                    sa.text(
                        "INSERT INTO users (email, password_hash, role, is_primary, created_at)"
                        " VALUES (:e, 'x', 'admin', :t, CURRENT_TIMESTAMP)"
                    ),
                    {"e": email, "t": True},
                )
        relational.upgrade(url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT email, is_primary FROM users ORDER BY id")).all()
        engine.dispose()
        assert [tuple(r) for r in rows] == [
            ("first@example.com", True),
            ("second@example.com", False),
        ]
        relational.downgrade(url, "0004")
        relational.upgrade(url)


def _user(session, email, *, primary=False):
    from errortrack.models import User

    user = User(email=email, password_hash="x", role="admin", is_primary=primary)
    session.add(user)
    session.flush()
    return user.id


def test_deleted_users_tokens_and_keys_ids_are_never_given_again(tmp_path):
    # A script holding "user 8" (PATCH /api/team/8, DELETE .../members/8) acted on the
    # next person invited once user 8 was deleted: SQLite without AUTOINCREMENT reused it.
    from errortrack.auth.tokens import create_token, revoke_token
    from errortrack.models import User
    from errortrack.projects.keys import create_key, delete_key
    from errortrack.projects.service import create_project

    now = dt.datetime.now(dt.UTC)
    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            keeper = _user(s, "keeper@example.com")
            gone_user = _user(s, "gone@example.com")
            token = create_token(s, user_id=keeper, description="t", now=now).token.id
            project = create_project(s, name="p").id
            key = create_key(s, project).id
        with sessions.begin() as s:
            s.delete(s.get(User, gone_user))
            revoke_token(s, user_id=keeper, token_id=token)
            delete_key(s, project, key)
        with sessions.begin() as s:
            assert _user(s, "new@example.com") > gone_user
            assert create_token(s, user_id=keeper, description="t", now=now).token.id > token
            assert create_key(s, project).id > key
        engine.dispose()


def test_the_0008_autoincrement_migration_keeps_users_tokens_keys_and_their_constraints(
    tmp_path,
):
    from errortrack.models import ApiToken, LoginSession, ProjectKey, ProjectMember, User

    now = dt.datetime.now(dt.UTC)
    with scratch_database(tmp_path) as url:
        relational.upgrade(url, "0007")
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            users = [_user(s, f"u{i}@example.com", primary=i == 0) for i in range(3)]
            project = _old_project(s, "p")
            for i, user in enumerate(users):
                s.add(ApiToken(user_id=user, description=f"t{i}", prefix="p", token_hash=f"{i}"))
                s.add(ProjectMember(project_id=project, user_id=user, role="viewer"))
                s.add(LoginSession(user_id=user, token_hash=f"{i}", csrf_token="c", expires_at=now))
            s.add(ProjectKey(project_id=project, public_key="b" * 32, label="second"))
        engine.dispose()
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            kept = s.execute(sa.select(User.id, User.email, User.is_primary).order_by(User.id))
            assert [tuple(r) for r in kept] == [
                (u, f"u{i}@example.com", i == 0) for i, u in enumerate(users)
            ]
            tokens = s.execute(sa.select(ApiToken.user_id, ApiToken.description))
            assert sorted(tokens) == [(u, f"t{i}") for i, u in enumerate(users)]
            keys = s.execute(sa.select(ProjectKey.id, ProjectKey.label).order_by(ProjectKey.id))
            key_ids = [k for k, _ in keys]
            assert len(key_ids) == 2
            # Not cascaded away by the rebuilds.
            members = s.scalars(sa.select(ProjectMember.user_id).order_by(ProjectMember.user_id))
            assert list(members) == users
            assert s.scalar(sa.select(sa.func.count()).select_from(LoginSession)) == 3
            s.delete(s.get(User, users[-1]))  # its token, membership and session go with it
            s.delete(s.get(ProjectKey, key_ids[-1]))
            token_ids = sorted(s.scalars(sa.select(ApiToken.id)))
            s.delete(s.get(ApiToken, token_ids[-1]))
        with sessions.begin() as s:
            assert _user(s, "new@example.com") > users[-1]
            new_key = ProjectKey(project_id=project, public_key="c" * 32)
            new_token = ApiToken(user_id=users[0], description="n", prefix="p", token_hash="n")
            s.add_all([new_key, new_token])
            s.flush()
            assert new_key.id > key_ids[-1] and new_token.id > token_ids[-1]
            assert s.scalar(sa.select(sa.func.count()).select_from(ProjectMember)) == 2
        # The constraints still hold: one primary user (the partial index), unique emails,
        # roles, and the foreign keys of tokens and keys.
        for broken in (
            lambda s: _user(s, "second-primary@example.com", primary=True),
            lambda s: _user(s, "u0@example.com"),
            lambda s: s.execute(sa.text("UPDATE users SET role = 'boss'")),
            lambda s: s.add(ApiToken(user_id=10**6, description="x", prefix="p", token_hash="x")),
            lambda s: s.add(ProjectKey(project_id=10**6, public_key="d" * 32)),
        ):
            with pytest.raises(sa.exc.IntegrityError), sessions.begin() as s:
                broken(s)
                s.flush()
        engine.dispose()
        relational.downgrade(url, "0007")
        relational.upgrade(url)


@pytest.mark.skipif(not TEST_PG, reason="several instances share a Postgres database")
def test_instances_starting_at_once_all_migrate_a_fresh_database(tmp_path):
    # Several app instances behind a load balancer start together: their side-by-side
    # migrations collided (a unique violation creating alembic_version).
    import subprocess
    import sys

    code = "import sys; from errortrack import relational; relational.upgrade(sys.argv[1])"
    for _ in range(3):
        with scratch_database(tmp_path) as url:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", code, url],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(4)
            ]
            failures = [p.communicate(timeout=120)[1] for p in procs if p.wait(timeout=120)]
            assert failures == []
            assert _tables(url) == APP_TABLES


def test_the_nfc_migration_lets_accounts_made_with_decomposed_emails_log_in(tmp_path):
    # Lookups are NFC since the seventeenth session; an account stored as typed in the
    # decomposed form could no longer log in, nor be found by `token create`.
    from errortrack.auth.login import login
    from errortrack.auth.passwords import hash_password
    from errortrack.auth.throttle import LoginThrottle
    from errortrack.models import Invitation, User
    from errortrack.team.users import email_key

    decomposed, composed = "jose\u0301@example.com", "jos\u00e9@example.com"
    now = dt.datetime.now(dt.UTC)
    with scratch_database(tmp_path) as url:
        relational.upgrade(url, "0005")
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            s.add(User(email=decomposed, password_hash=hash_password("a password"), role="member"))
            s.add(User(email="ann@example.com", password_hash="x", role="member"))
            # Stored lower-cased as typed ("T" and a diaeresis); the lookup key of "T\u0308"
            # is NFC after lower(), one code point: the migration must write that form.
            s.add(User(email="t\u0308om@example.com", password_hash="x", role="member"))
            s.add(
                Invitation(
                    email="zoe\u0308@example.com",
                    role="member",
                    token="t" * 64,
                    expires_at=now + dt.timedelta(hours=1),
                )
            )
        engine.dispose()
        relational.upgrade(url)
        engine, sessions = _sessions(url)
        with sessions.begin() as s:
            emails = sorted(s.scalars(sa.select(User.email)))
            assert emails == ["ann@example.com", composed, "\u1e97om@example.com"]
            assert email_key("T\u0308om@example.com") == "\u1e97om@example.com"
            assert list(s.scalars(sa.select(Invitation.email))) == ["zo\u00eb@example.com"]
            user, _ = login(
                s,
                throttle=LoginThrottle(lambda: now),
                email=decomposed,
                password="a password",
                ip="127.0.0.1",
                now=now,
            )
            assert user.email == composed
        engine.dispose()
        relational.downgrade(url, "0005")


class _Stopped(Exception):
    pass


@pytest.mark.parametrize(
    ("start", "stop_after"),
    [
        ("0009", "CREATE INDEX ix_issues_project_first_seen_id"),
        ("0002", "CREATE TABLE _alembic_tmp_"),
    ],
)
def test_a_migration_stopped_part_way_leaves_nothing_and_the_next_run_completes(
    tmp_path, start, stop_after
):
    """On SQLite each DDL statement committed as it ran (the driver opens no transaction
    before DDL) while the revision moved only at the end: a run stopped after a CREATE
    INDEX or a batch rebuild's CREATE TABLE (SIGTERM, Ctrl-C, OOM) left it behind, and
    every later migrate and serve failed on "already exists" (operations review,
    thirty-second session). The stop is made right after that statement ran."""
    with scratch_database(tmp_path) as url:
        if "_alembic_tmp_" in stop_after and not url.startswith("sqlite"):
            pytest.skip("tables are rebuilt (batch mode) on SQLite only")
        relational.upgrade(url, start)
        before = _schema(url)

        def stop(_conn, _cursor, statement, *_args):
            if statement.lstrip().startswith(stop_after):
                raise _Stopped(statement)

        sa.event.listen(sa.engine.Engine, "after_cursor_execute", stop)
        try:
            with pytest.raises(_Stopped):
                relational.upgrade(url)
        finally:
            sa.event.remove(sa.engine.Engine, "after_cursor_execute", stop)
        assert _schema(url) == before
        engine = sa.create_engine(url)
        try:
            with engine.connect() as conn:
                assert conn.scalar(sa.text("SELECT version_num FROM alembic_version")) == start
        finally:
            engine.dispose()
        head = ScriptDirectory.from_config(relational.alembic_config(url)).get_current_head()
        assert relational.upgrade(url)[-1] == head


def _schema(url):
    """Each table (Alembic's own too) with its indexes' names."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        return {
            table: {index["name"] for index in inspector.get_indexes(table)}
            for table in inspector.get_table_names()
        }
    finally:
        engine.dispose()
