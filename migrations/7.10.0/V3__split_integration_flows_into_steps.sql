-- upgrade-gate migration V3 (release 7.10.0): one row per integration step.
-- Moves every integration's JSON flow into integration_steps, then drops the
-- JSON column.
CREATE TABLE integration_steps (
    integration_id bigint  NOT NULL REFERENCES integrations (id) ON DELETE CASCADE,
    position       integer NOT NULL,
    kind           text    NOT NULL,
    connection_id  bigint  REFERENCES connections (id),
    action         text    NOT NULL,
    configuration  jsonb   NOT NULL DEFAULT '{}',
    PRIMARY KEY (integration_id, position)
);

INSERT INTO integration_steps (integration_id, position, kind, connection_id, action, configuration)
SELECT i.id,
       s.position::integer,
       s.step ->> 'kind',
       (s.step ->> 'connection_id')::bigint,
       s.step ->> 'action',
       coalesce(s.step -> 'configuration', '{}')
FROM integrations AS i
CROSS JOIN LATERAL jsonb_array_elements(i.flow) WITH ORDINALITY AS s (step, position);

ALTER TABLE integrations DROP COLUMN flow;
