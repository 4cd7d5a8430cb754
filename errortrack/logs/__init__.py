"""Logs: read-only queries over the ClickHouse ``logs`` table (ingest writes it)."""
