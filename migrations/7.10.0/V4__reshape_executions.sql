-- upgrade-gate migration V4 (release 7.10.0): reshape the activity log.
-- Rewrites every execution: the JSON report becomes typed columns (status,
-- finish time, failed step, error, per-step durations). On a large activity
-- log this is the long step of the upgrade. The table is rebuilt rather than
-- updated in place, so it is written once and not left with a dead copy of
-- every row.
CREATE TYPE execution_status AS ENUM ('succeeded', 'failed');

CREATE TABLE executions_reshaped (
    id                bigint           NOT NULL,
    integration_id    bigint           NOT NULL,
    started_at        timestamptz      NOT NULL,
    finished_at       timestamptz      NOT NULL,
    status            execution_status NOT NULL,
    failed_step       integer,
    error_message     text,
    step_durations_ms integer[]        NOT NULL
);

INSERT INTO executions_reshaped
SELECT e.id,
       e.integration_id,
       e.started_at,
       (e.report ->> 'finished_at')::timestamptz,
       CASE e.report ->> 'status' WHEN 'ok' THEN 'succeeded' ELSE 'failed' END::execution_status,
       (e.report ->> 'failed_step')::integer,
       e.report ->> 'error',
       ARRAY(SELECT (step ->> 'duration_ms')::integer
             FROM jsonb_array_elements(e.report -> 'steps') AS step)
FROM executions AS e;

-- The id sequence belongs to the old table's column; keep it for the new one.
ALTER SEQUENCE executions_id_seq OWNED BY NONE;
DROP TABLE executions;
ALTER TABLE executions_reshaped RENAME TO executions;
ALTER TABLE executions
    ALTER COLUMN id SET DEFAULT nextval('executions_id_seq'),
    ADD PRIMARY KEY (id),
    ADD FOREIGN KEY (integration_id) REFERENCES integrations (id);
ALTER SEQUENCE executions_id_seq OWNED BY executions.id;
CREATE INDEX executions_integration_id ON executions (integration_id);
