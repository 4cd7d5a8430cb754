"""One ClickHouse client per thread, over chDB (embedded) or HTTP (server).

chDB allows one data directory per process and is opened lazily, on a thread's first
call, so the engine is never opened at import or before gunicorn forks. Each thread gets
its own client because one shared client serialises every call (ARCHITECTURE.md).
"""

from __future__ import annotations

import copy
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client

DEFAULT_DATABASE = "errortrack"


def engine_temp_files(path: Path) -> None:
    """Put the process's temporary files in the embedded engine's own ``tmp`` directory.

    clickhouse-connect's chDB backend copies every insert into a temporary file for
    ``INSERT ... FROM INFILE`` (a 20k-row batch of logs is ~27 MB), in the system's
    temp dir: a small or full ``/tmp`` (a tmpfs, systemd's PrivateTmp) then stopped
    every insert while the data disk had room, and on a tmpfs each batch sat in RAM.
    Beside the data they share its disk, and its space, with the spool, whose full-disk
    answer (503) then covers both. chDB is one engine per process, so setting the
    process-wide default here is setting it for that engine; the engine clears its
    ``tmp`` directory when it starts, which also removes a file left by a crash."""
    temp = path / "tmp"
    temp.mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = str(temp)


class ClickHouse:
    def __init__(
        self,
        url: str,
        *,
        database: str | None = None,
        cluster: str = "",
        receive_timeout: float = 60.0,
    ) -> None:
        parts = urlsplit(url)
        self.url = url
        self.embedded = parts.scheme == "chdb"
        self.cluster = cluster
        self.receive_timeout = receive_timeout
        if database is None:
            query_db = parse_qs(parts.query).get("database", [""])[0]
            path_db = "" if self.embedded else parts.path.strip("/")
            database = query_db or path_db or DEFAULT_DATABASE
        self.database = database
        self._local = threading.local()
        self._lock = threading.Lock()
        self._database_ready = False
        # Settings added to every read (see bounded()).
        self._read_settings: dict[str, Any] = {}

    def _connect(self, database: str | None) -> Client:
        if self.embedded:
            path = urlsplit(self.url).path
            engine_temp_files(Path(path))
            return clickhouse_connect.get_client(dsn=f"chdb://{path}", database=database or "")
        parts = urlsplit(self.url)
        return clickhouse_connect.get_client(
            host=parts.hostname or "localhost",
            port=parts.port or (8443 if parts.scheme == "https" else 8123),
            # Decoded: the settings ask for '@ / # ?' percent-encoded, and urlsplit
            # leaves them so (a 401 that looked like a wrong password).
            username=unquote(parts.username or "default"),
            password=unquote(parts.password or ""),
            secure=parts.scheme == "https",
            database=database or "",
            # A server is shared; fail a stuck call instead of hanging a request forever.
            connect_timeout=5,
            send_receive_timeout=self.receive_timeout,
        )

    def ensure_database(self) -> None:
        with self._lock:
            if self._database_ready:
                return
            bootstrap = self._connect(None)
            on_cluster = f" ON CLUSTER '{self.cluster}'" if self.cluster else ""
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS `{self.database}`{on_cluster}")
            bootstrap.close()
            self._database_ready = True

    def client(self) -> Client:
        client: Client | None = getattr(self._local, "client", None)
        if client is None:
            self.ensure_database()
            client = self._connect(self.database)
            self._local.client = client
        return client

    def bounded(self, seconds: float, max_memory: int = 0) -> ClickHouse:
        """This store with each read stopped after ``seconds`` (ClickHouse's
        ``max_execution_time``, raising TIMEOUT_EXCEEDED) and, when ``max_memory`` is set,
        once it needs more than that many bytes (``max_memory_usage``, raising
        MEMORY_LIMIT_EXCEEDED): what API requests use, while the writer and the retention
        pass read unbounded. 0 leaves either unbounded. It shares this store's per-thread
        connections; commands (inserts, drops, deletes) are not bounded."""
        view = copy.copy(self)
        view._read_settings = dict(self._read_settings)
        if seconds:
            view._read_settings["max_execution_time"] = seconds
        if max_memory:
            view._read_settings["max_memory_usage"] = max_memory
        return view

    # Thin pass-throughs so that callers need not think about threads.
    def command(self, sql: str, parameters: Any = None, settings: Any = None) -> Any:
        return self.client().command(sql, parameters=parameters, settings=settings)

    def query_rows(self, sql: str, parameters: Any = None, settings: Any = None) -> list[Any]:
        if self._read_settings:
            settings = {**self._read_settings, **(settings or {})}
        return list(self.client().query(sql, parameters=parameters, settings=settings).result_rows)

    def ping(self) -> None:
        """Raise when the store does not answer."""
        self.client().command("SELECT 1")

    def drop_database(self) -> None:
        self._connect(None).command(f"DROP DATABASE IF EXISTS `{self.database}` SYNC")
        self._database_ready = False
