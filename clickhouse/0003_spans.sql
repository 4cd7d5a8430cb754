-- Transactions and spans in one table; the transaction's root span has is_segment = true.
-- shard_key: cityHash64(project_id, trace_id)
CREATE TABLE IF NOT EXISTS spans
(
    project_id      UInt64,
    trace_id        String,
    span_id         String,
    parent_span_id  String,
    segment_id      String,
    segment_name    String,
    is_segment      Bool,
    op              LowCardinality(String),
    description     String,
    start_timestamp DateTime64(6, 'UTC'),
    duration_us     UInt64,
    status          LowCardinality(String),
    received_at     DateTime64(6, 'UTC'),
    attributes      String CODEC(ZSTD(3)),
    attr_string     Map(LowCardinality(String), String),
    attr_int        Map(LowCardinality(String), Int64),
    attr_float      Map(LowCardinality(String), Float64),
    attr_bool       Map(LowCardinality(String), Bool),
    retention_days  UInt16,
    INDEX idx_trace_id trace_id TYPE bloom_filter(0.001) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY (toDate(start_timestamp), retention_days)
ORDER BY (project_id, start_timestamp)
TTL toDateTime(start_timestamp) + toIntervalDay(retention_days)
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000
