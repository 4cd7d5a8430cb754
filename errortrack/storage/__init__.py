"""Storage and retention: usage per table and project, cleanup of old data, and the
periodic retention pass (expired partitions, disk cap, issues without events)."""
