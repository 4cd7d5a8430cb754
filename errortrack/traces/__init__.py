"""Transactions and spans: SDK payloads -> rows of the ``spans`` table."""
