"""The analytics store (ClickHouse): logs, error events, transactions and spans."""

from errortrack.analytics.store import ClickHouse

__all__ = ["ClickHouse"]
