-- upgrade-gate migration V5 (release 7.10.1): the activity page's query
-- (latest executions of one integration) scanned every execution of the
-- integration; this index serves it directly and replaces the plain one.
CREATE INDEX executions_integration_started ON executions (integration_id, started_at DESC);
DROP INDEX executions_integration_id;
