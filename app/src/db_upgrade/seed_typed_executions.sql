-- Sample data for the 7.10.0 layout (also 7.10.1): integration steps as rows,
-- executions with typed columns. Deterministic, like the 7.9.3 seed.
-- {rows} is the number of executions to add.
INSERT INTO connections (name, connector, configuration, created_at)
SELECT format('connection-%s', g),
       (ARRAY['http', 'sql', 'kafka', 'salesforce', 'ftp', 'slack'])[1 + g % 6],
       jsonb_build_object('url', format('https://svc-%s.example.internal:%s', g, 8000 + g),
                          'timeout_ms', 30000, 'retries', g % 4),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour'
FROM generate_series(1, 40) AS g
ON CONFLICT (name) DO NOTHING;

INSERT INTO integrations (name, description, deployed, created_at, updated_at)
SELECT format('integration-%s', g),
       format('Moves records from connection-%s to connection-%s', 1 + g % 40, 1 + (g * 7) % 40),
       g % 5 <> 0,
       timestamptz '2024-02-01 00:00:00+00' + g * interval '1 hour',
       timestamptz '2024-02-04 00:00:00+00' + g * interval '1 hour'
FROM generate_series(1, greatest(5, {rows} / 2000)) AS g
ON CONFLICT (name) DO NOTHING;

INSERT INTO integration_steps (integration_id, position, kind, connection_id, action, configuration)
SELECT i.id,
       s,
       CASE WHEN s = 1 THEN 'start' WHEN s = 3 + i.id % 4 THEN 'end' ELSE 'step' END,
       (SELECT id FROM connections ORDER BY id OFFSET (i.id + s) % 40 LIMIT 1),
       (ARRAY['poll', 'transform', 'filter', 'invoke', 'publish'])[1 + (i.id + s) % 5],
       jsonb_build_object('batch_size', 10 * s)
FROM integrations AS i
CROSS JOIN LATERAL generate_series(1, 3 + i.id % 4) AS s
WHERE NOT EXISTS (SELECT 1 FROM integration_steps AS st WHERE st.integration_id = i.id);

INSERT INTO executions (integration_id, started_at, finished_at, status, failed_step, error_message, step_durations_ms)
SELECT i.ids[1 + g % cardinality(i.ids)],
       timestamptz '2024-06-01 00:00:00+00' + g * interval '7 seconds',
       timestamptz '2024-06-01 00:00:00+00' + g * interval '7 seconds' + (50 + g % 3000) * interval '1 millisecond',
       CASE WHEN g % 17 = 0 THEN 'failed' ELSE 'succeeded' END::execution_status,
       CASE WHEN g % 17 = 0 THEN 1 + g % 3 END,
       CASE WHEN g % 17 = 0 THEN format('HTTP 503 from svc-%s: upstream unavailable', g % 40) END,
       ARRAY(SELECT (g * s) % 997 FROM generate_series(1, 3 + g % 4) AS s)
FROM (SELECT array_agg(id ORDER BY id) AS ids FROM integrations) AS i,
     (SELECT coalesce(max(id), 0) AS last FROM executions) AS e,
     generate_series(e.last + 1, e.last + {rows}) AS g;
