"""Error events grouped into issues: fingerprints, event rows, the grouping hook and the
issue status services."""
