-- Error events; the issue they belong to lives in the relational store.
-- shard_key: cityHash64(project_id, issue_id)
CREATE TABLE IF NOT EXISTS events
(
    project_id      UInt64,
    issue_id        UInt64,
    timestamp       DateTime64(6, 'UTC'),
    event_id        UUID,
    received_at     DateTime64(6, 'UTC'),
    level           LowCardinality(String),
    platform        LowCardinality(String),
    release         String,
    environment     LowCardinality(String),
    title           String,
    culprit         String,
    fingerprint     String,
    trace_id        String,
    span_id         String,
    -- The whole event as received, for the detail view.
    payload         String CODEC(ZSTD(6)),
    retention_days  UInt16,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_event_id event_id TYPE bloom_filter(0.001) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY (toDate(timestamp), retention_days)
ORDER BY (project_id, issue_id, timestamp)
TTL toDateTime(timestamp) + toIntervalDay(retention_days)
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000
