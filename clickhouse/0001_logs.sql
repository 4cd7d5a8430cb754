-- Structured logs, stored as sent and never grouped (ARCHITECTURE.md "Logs").
-- shard_key: cityHash64(project_id, trace_id)
CREATE TABLE IF NOT EXISTS logs
(
    project_id      UInt64,
    timestamp       DateTime64(6, 'UTC'),
    id              UUID,
    ingested_at     DateTime64(6, 'UTC'),
    -- Stored as sent (SDKs say "warn"); unknown levels are kept verbatim.
    level           LowCardinality(String),
    -- Derived from level; NULL for any level outside the six known ones.
    severity_number Nullable(UInt8),
    body            String CODEC(ZSTD(3)),
    -- Empty unless the log was emitted inside a span.
    trace_id        String,
    span_id         String,
    -- The exact attributes object as sent ({name: {value, type}}), for reading back.
    attributes      String CODEC(ZSTD(3)),
    -- Typed copies for filtering; an attribute lands in the map of its declared type.
    attr_string     Map(LowCardinality(String), String),
    attr_int        Map(LowCardinality(String), Int64),
    attr_float      Map(LowCardinality(String), Float64),
    attr_bool       Map(LowCardinality(String), Bool),
    retention_days  UInt16,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_body lower(body) TYPE ngrambf_v1(3, 65536, 2, 0) GRANULARITY 1,
    INDEX idx_attr_keys mapKeys(attr_string) TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
-- One partition per day and retention: every part expires whole, so TTL drops parts.
PARTITION BY (toDate(timestamp), retention_days)
ORDER BY (project_id, timestamp)
TTL toDateTime(timestamp) + toIntervalDay(retention_days)
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000
