-- Who each event happened to, for an issue's count of users affected (docs/API.md,
-- "Issues"): the first of the event's user id, username, email and IP address that holds
-- a value, prefixed as Sentry's user tag is (id:5, username:bob, email:a@b.c, ip:1.2.3.4);
-- '' when the event names no user (errortrack.issues.events.user_key). Rows stored
-- before this column read as '' (the default is not written into old parts), and a row
-- spooled by an older version, which has no user_key, is inserted with the default.
-- On a cluster the column goes to the local tables and to the Distributed table.
ALTER TABLE events ADD COLUMN IF NOT EXISTS user_key String DEFAULT '' AFTER span_id;
