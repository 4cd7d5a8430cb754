"""Keeping the data dir to the user errortrack runs as.

The data dir holds the SQLite database (password hashes, pending invitations' tokens,
DSN keys), the spool (logs and events as SDKs sent them, personal data included, until
they reach ClickHouse) and the embedded ClickHouse. Created with the usual umask 022,
all of it was readable by every local user: one read a pending admin invitation's token
from the database file and accepted it (review, twenty-fifth session). PostgreSQL
refuses to start on a data dir others can enter; errortrack takes their access away.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

# Files and directories errortrack creates: for its own user only. Set once per process
# by the entry points (the CLI, the ASGI factory); chDB and gunicorn's workers inherit it.
UMASK = 0o077


def restrict_new_files() -> None:
    os.umask(UMASK)


def make_data_dir(path: Path) -> None:
    """Create the data dir for this user alone (0700), or take other users' access away
    from an existing one: without a way through the directory, nothing in it is theirs
    to read, files created before this release included. The group's access is left as
    the operator set it (PostgreSQL allows 0750 too)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o007:
        return
    try:
        os.chmod(path, mode & ~0o007)
    except OSError as exc:  # not the directory's owner
        log.warning(
            "data dir %s is open to every local user (mode %o) and could not be "
            "restricted (%s): run chmod o-rwx on it",
            path,
            mode,
            exc.strerror or exc,
        )
        return
    # INFO: done, nothing for the operator to do (the CLI's one-line errors stay one line;
    # serve has no log handler yet, so it is not shown, as OPERATIONS.md says).
    log.info(
        "data dir %s was open to every local user (mode %o); now %o", path, mode, mode & ~0o007
    )
