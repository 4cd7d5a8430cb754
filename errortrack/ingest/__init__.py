"""SDK ingest: envelope parsing, bounded decompression, auth, rate limits, item rows."""
