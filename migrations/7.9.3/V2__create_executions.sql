-- upgrade-gate migration V2 (release 7.9.3): the activity log.
-- Every run of an integration writes one row; the outcome is a JSON report
-- {"status": "ok"|"error", "finished_at": ..., "steps": [{"step", "duration_ms"}],
--  "failed_step": ..., "error": ...}.
CREATE TABLE executions (
    id             bigserial PRIMARY KEY,
    integration_id bigint      NOT NULL REFERENCES integrations (id),
    started_at     timestamptz NOT NULL,
    report         jsonb       NOT NULL
);

CREATE INDEX executions_integration_id ON executions (integration_id);
