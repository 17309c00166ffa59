//! What a row *means*, whichever release's schema holds it: one digest per
//! row over the content every migration must keep, computed by the
//! database in each table layout, so a row written before 7.10.0's reshape
//! and read after it must give the same digest.
//!
//! Owns: the layouts of `executions` (JSON report until V4, typed columns
//! from V4) and `integrations` (JSON flow until V3, step rows from V3), the
//! digest SQL of each, and the digest of all the data present before a run.
//! Must not touch: any write (read-only queries).
//!
//! What a digest covers is what V3 and V4 carry over: an execution's id,
//! integration, start, status (`ok` → `succeeded`, anything else →
//! `failed`), finish, failed step, error and per-step durations (the
//! report's `exchange_id` is dropped by V4 on purpose); an integration's
//! columns and its steps in order.

use tokio_postgres::Client;

/// How `executions` is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExecutionsLayout {
    /// V2 (7.9.3): the outcome is one JSON `report`.
    JsonReport,
    /// V4 (7.10.0) on: typed columns.
    TypedColumns,
}

impl ExecutionsLayout {
    pub fn name(self) -> &'static str {
        match self {
            ExecutionsLayout::JsonReport => "JSON report (7.9.3)",
            ExecutionsLayout::TypedColumns => "typed columns (7.10.0)",
        }
    }

    /// The digest of one row of `executions`, as an SQL expression over its
    /// unqualified columns (valid in `SELECT ... FROM executions` and in a
    /// `RETURNING` clause). A report's step durations are read with one
    /// JSON path (`[12, 34]` printed, then `12,34`), not a subquery per
    /// row: the same text as the typed layout's `array_to_string`, and
    /// the digest of a million rows in 3.4 s instead of 4.6 to 5.6.
    /// Durations are integers, so JSON prints them as the array does.
    pub fn digest_sql(self) -> &'static str {
        match self {
            ExecutionsLayout::JsonReport => {
                "md5(concat_ws('|', id, integration_id, \
                   (extract(epoch FROM started_at) * 1000000)::bigint, \
                   CASE report ->> 'status' WHEN 'ok' THEN 'succeeded' ELSE 'failed' END, \
                   (extract(epoch FROM (report ->> 'finished_at')::timestamptz) * 1000000)::bigint, \
                   coalesce(report ->> 'failed_step', '-'), \
                   coalesce(report ->> 'error', '-'), \
                   replace(btrim(jsonb_path_query_array(report, '$.steps[*].duration_ms')::text, '[]'), ', ', ',')))"
            }
            ExecutionsLayout::TypedColumns => {
                "md5(concat_ws('|', id, integration_id, \
                   (extract(epoch FROM started_at) * 1000000)::bigint, \
                   status::text, \
                   (extract(epoch FROM finished_at) * 1000000)::bigint, \
                   coalesce(failed_step::text, '-'), \
                   coalesce(error_message, '-'), \
                   array_to_string(step_durations_ms, ',')))"
            }
        }
    }
}

/// Whether `table` has `column` (committed catalog state).
async fn has_column(
    client: &Client,
    table: &str,
    column: &str,
) -> Result<bool, tokio_postgres::Error> {
    // pg_attribute, not information_schema.columns: the writer asks before
    // every write, and planning that view was a large part of the shared
    // server's CPU with ten chain runs writing at once.
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute \
             WHERE attrelid = to_regclass(format('public.%I', $1::text)) \
             AND attname = $2 AND attnum > 0 AND NOT attisdropped)",
            &[&table, &column],
        )
        .await?
        .get(0))
}

/// The layout of `executions` now.
pub async fn executions_layout(client: &Client) -> Result<ExecutionsLayout, tokio_postgres::Error> {
    Ok(if has_column(client, "executions", "report").await? {
        ExecutionsLayout::JsonReport
    } else {
        ExecutionsLayout::TypedColumns
    })
}

/// The digest of one integration with its steps, per layout of `integrations`.
async fn integrations_digest_sql(client: &Client) -> Result<&'static str, tokio_postgres::Error> {
    Ok(if has_column(client, "integrations", "flow").await? {
        "md5(concat_ws('|', i.id, i.name, coalesce(i.description, '-'), i.deployed, \
           (extract(epoch FROM i.created_at) * 1000000)::bigint, \
           (extract(epoch FROM i.updated_at) * 1000000)::bigint, \
           (SELECT coalesce(string_agg(concat_ws(':', position, step ->> 'kind', \
                      coalesce(step ->> 'connection_id', '-'), step ->> 'action', \
                      coalesce(step -> 'configuration', '{}')::text), ';' ORDER BY position), '') \
            FROM jsonb_array_elements(i.flow) WITH ORDINALITY AS s (step, position))))"
    } else {
        "md5(concat_ws('|', i.id, i.name, coalesce(i.description, '-'), i.deployed, \
           (extract(epoch FROM i.created_at) * 1000000)::bigint, \
           (extract(epoch FROM i.updated_at) * 1000000)::bigint, \
           (SELECT coalesce(string_agg(concat_ws(':', s.position, s.kind, \
                      coalesce(s.connection_id::text, '-'), s.action, s.configuration::text), \
                      ';' ORDER BY s.position), '') \
            FROM integration_steps AS s WHERE s.integration_id = i.id)))"
    })
}

/// One table's rows: how many and the digest of all their digests in id order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TableDigest {
    pub rows: i64,
    pub digest: String,
}

/// The digest of the data present before a run: every connection and
/// integration, and the executions up to `last_execution` (the writer's
/// rows come after it and are checked one by one).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DataDigest {
    pub connections: TableDigest,
    pub integrations: TableDigest,
    pub executions: TableDigest,
    pub last_execution: i64,
}

impl DataDigest {
    /// `connections 40, integrations 500, executions 1000000 (digest 1a2b3c4d)`.
    pub fn summary(&self) -> String {
        format!(
            "connections {}, integrations {}, executions {} (row digests {}, {}, {})",
            self.connections.rows,
            self.integrations.rows,
            self.executions.rows,
            short(&self.connections.digest),
            short(&self.integrations.digest),
            short(&self.executions.digest)
        )
    }
}

fn short(digest: &str) -> &str {
    digest.get(..8).unwrap_or(digest)
}

async fn table_digest(client: &Client, query: &str) -> Result<TableDigest, tokio_postgres::Error> {
    let row = client.query_one(query, &[]).await?;
    Ok(TableDigest {
        rows: row.get(0),
        digest: row.get(1),
    })
}

/// The digest of the data with executions up to `last_execution`
/// (`None`: up to the newest one now).
pub async fn data_digest(
    client: &Client,
    last_execution: Option<i64>,
) -> Result<DataDigest, tokio_postgres::Error> {
    let last_execution = match last_execution {
        Some(last) => last,
        None => client
            .query_one("SELECT coalesce(max(id), 0)::int8 FROM executions", &[])
            .await?
            .get(0),
    };
    let aggregate = |expression: &str, order: &str, from: &str| {
        format!(
            "SELECT count(*), coalesce(md5(string_agg({expression}, ',' ORDER BY {order})), '') FROM {from}"
        )
    };
    let connections = table_digest(
        client,
        &aggregate("md5(c::text)", "c.id", "connections AS c"),
    )
    .await?;
    let integrations_digest = integrations_digest_sql(client).await?;
    let integrations = table_digest(
        client,
        &aggregate(integrations_digest, "i.id", "integrations AS i"),
    )
    .await?;
    let layout = executions_layout(client).await?;
    let executions = table_digest(
        client,
        &aggregate(
            layout.digest_sql(),
            "id",
            &format!("executions WHERE id <= {last_execution}"),
        ),
    )
    .await?;
    Ok(DataDigest {
        connections,
        integrations,
        executions,
        last_execution,
    })
}
