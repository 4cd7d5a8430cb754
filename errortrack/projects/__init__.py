"""Projects, their public ingest keys and their DSNs."""
