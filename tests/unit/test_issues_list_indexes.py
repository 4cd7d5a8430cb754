"""Every order and status filter of the issues list is read off an index (relational
migration 0010): only -last_seen had one, so any other sort or a status filter sorted the
project's whole issues table per call (100,000 issues on SQLite: 170-340 ms for page 1,
about 1 s for page 1000; review, twentieth session). Checked on SQLite's plans for the
list's own statements; PostgreSQL picks plans by statistics, which a small table skews."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from errortrack import db, relational
from errortrack.issues.read import ISSUE_SORTS
from errortrack.models import Issue

CASES = [(sort, statuses) for sort in ISSUE_SORTS for statuses in ((), ("unresolved",))]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('plans') / 'plans.sqlite3'}"
    relational.upgrade(url)
    engine = db.make_engine(url)
    yield engine
    engine.dispose()


def _plan(engine: sa.Engine, statement: sa.Select) -> str:
    sql = str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return "\n".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))


@pytest.mark.parametrize(("sort", "statuses"), CASES)
def test_a_page_of_issues_is_read_off_an_index(engine, sort, statuses):
    where = [Issue.project_id == 1]
    if statuses:
        where.append(Issue.status.in_(statuses))
    page = sa.select(Issue).where(*where).order_by(*ISSUE_SORTS[sort]).limit(50).offset(5000)
    plan = _plan(engine, page)
    assert "TEMP B-TREE" not in plan, plan
    assert "USING INDEX ix_issues_project_" in plan, plan
    count = sa.select(sa.func.count()).select_from(Issue).where(*where)
    assert "USING COVERING INDEX" in _plan(engine, count)
