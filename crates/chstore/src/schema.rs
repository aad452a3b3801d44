//! The tables, as statements ClickHouse 18.16 and current releases both
//! accept (docs/scale.md says what newer releases would do better).
//!
//! - `series`: the dictionary, a series' id (a 64-bit hash of its key, so
//!   every kansoku server computes the same id without asking anyone) with
//!   its name and labels; a `ReplacingMergeTree`, since each server writes
//!   the keys it meets.
//! - `samples`: (series, t, v), t in nanoseconds as `UInt64` (18.16 has no
//!   `DateTime64`), ordered by (series, t), one partition per day (18.16
//!   has no TTL: retention drops whole partitions).
//! - `samples_1s`, `samples_1m`: the tiers, min/max/sum/count states filled
//!   by materialised views on every insert into `samples`.
//! - `events`: per-CPU samples as columns like the embedded store's (stream,
//!   cpu, t, pid, tid, ip, the hash of the call chain); `stacks` holds each
//!   chain once per stream, `procs` each batch's process table (name and
//!   mappings, what names its user frames).
//! - `marks`: per agent spool, the newest batch stored, for the `Welcome`
//!   of whichever server the agent connects to next.
//! - `symbols`: the symbol sources agents uploaded (binaries by build id,
//!   kernel tables by boot id), zstd-packed as they arrived, so that every
//!   server names every host's frames.
//!
//! On a cluster (`--cluster NAME`) each table is a `Replicated*MergeTree`
//! named `NAME_local` on every node (`ON CLUSTER`, its ZooKeeper path from
//! the `{shard}` and `{replica}` macros) under a `Distributed` table of the
//! plain name, sharded by series or stream. Replicated tables deduplicate a
//! block inserted twice, which is what makes a batch resent through another
//! server stored once (see `writer`).

/// Nanoseconds in a day: the partition of a sample or event.
pub const DAY_NS: u64 = 86_400_000_000_000;

/// Blocks per table whose hashes ZooKeeper keeps for deduplication: a
/// server's death may have every agent resend its window (64 batches).
pub const DEDUP_WINDOW: u32 = 10_000;

/// The tier resolutions the materialised views keep, with their names.
pub const TIERS: [(&str, u64); 2] = [("samples_1s", 1_000_000_000), ("samples_1m", 60_000_000_000)];

/// Where the tables go: a database, on one server or on a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub db: String,
    /// The cluster's name in ClickHouse's `remote_servers`; None: one server.
    pub cluster: Option<String>,
}

struct Table {
    name: &'static str,
    columns: &'static str,
    /// `MergeTree`, `ReplacingMergeTree`, …; `Replicated` is prefixed on a
    /// cluster. Its argument (the version column of a replacing tree).
    engine: &'static str,
    engine_arg: &'static str,
    partition: Option<&'static str>,
    order: &'static str,
    /// The `Distributed` sharding expression.
    shard_by: &'static str,
    /// Rows per index mark (ClickHouse's default: 8192).
    granularity: u32,
}

const TABLES: &[Table] = &[
    Table {
        name: "series",
        columns: "id UInt64, name String, label_names Array(String), label_values Array(String)",
        engine: "ReplacingMergeTree",
        engine_arg: "",
        partition: None,
        order: "id",
        shard_by: "id",
        granularity: 8192,
    },
    Table {
        name: "samples",
        columns: "series UInt64, t UInt64, v Float64",
        engine: "MergeTree",
        engine_arg: "",
        partition: Some("intDiv(t, 86400000000000)"),
        order: "(series, t)",
        shard_by: "series",
        granularity: 8192,
    },
    Table {
        name: "samples_1s",
        columns: TIER_COLUMNS,
        engine: "AggregatingMergeTree",
        engine_arg: "",
        partition: Some("intDiv(t, 86400000000000)"),
        order: "(series, t)",
        shard_by: "series",
        granularity: 8192,
    },
    Table {
        name: "samples_1m",
        columns: TIER_COLUMNS,
        engine: "AggregatingMergeTree",
        engine_arg: "",
        partition: Some("intDiv(t, 86400000000000)"),
        order: "(series, t)",
        shard_by: "series",
        granularity: 8192,
    },
    Table {
        name: "events",
        columns: "stream UInt64, cpu UInt16, t UInt64, pid UInt32, tid UInt32, ip UInt64, stack UInt64",
        engine: "MergeTree",
        engine_arg: "",
        partition: Some("intDiv(t, 86400000000000)"),
        order: "(stream, cpu, t)",
        shard_by: "stream",
        granularity: 8192,
    },
    Table {
        name: "stacks",
        columns: "stream UInt64, hash UInt64, frames Array(UInt64)",
        engine: "ReplacingMergeTree",
        engine_arg: "",
        partition: None,
        order: "(stream, hash)",
        shard_by: "stream",
        granularity: 8192,
    },
    Table {
        name: "procs",
        columns: "stream UInt64, t UInt64, pid UInt32, comm String, map_start Array(UInt64), map_end Array(UInt64), \
                  map_pgoff Array(UInt64), map_build_id Array(String), map_path Array(String)",
        engine: "MergeTree",
        engine_arg: "",
        partition: Some("intDiv(t, 86400000000000)"),
        order: "(stream, pid, t)",
        shard_by: "stream",
        granularity: 8192,
    },
    Table {
        name: "marks",
        columns: "host String, spool UInt64, seq UInt64",
        engine: "ReplacingMergeTree",
        engine_arg: "seq",
        partition: None,
        order: "(host, spool)",
        shard_by: "spool",
        granularity: 8192,
    },
    Table {
        name: "symbols",
        columns: "kind String, id String, packed String",
        engine: "ReplacingMergeTree",
        engine_arg: "",
        partition: None,
        order: "(kind, id)",
        shard_by: "sipHash64(id)",
        // Rows of megabytes: a lookup reads one row, not 8192.
        granularity: 1,
    },
];

const TIER_COLUMNS: &str = "series UInt64, t UInt64, min AggregateFunction(min, Float64), \
                            max AggregateFunction(max, Float64), sum AggregateFunction(sum, Float64), \
                            count AggregateFunction(count)";

impl Layout {
    /// The tables partitioned by day (what retention drops a day at a time).
    pub fn partitioned() -> impl Iterator<Item = &'static str> {
        TABLES.iter().filter(|t| t.partition.is_some()).map(|t| t.name)
    }

    /// The table inserts and local reads go to: `NAME_local` on a cluster.
    pub fn local(&self, table: &str) -> String {
        match self.cluster {
            Some(_) => format!("{table}_local"),
            None => table.to_owned(),
        }
    }

    fn on_cluster(&self) -> String {
        self.cluster.as_ref().map(|c| format!(" ON CLUSTER {c}")).unwrap_or_default()
    }

    /// Every statement that makes the schema, in order; each one
    /// `IF NOT EXISTS`, so running them again changes nothing.
    pub fn statements(&self) -> Vec<String> {
        let db = &self.db;
        let on = self.on_cluster();
        let mut out = vec![format!("CREATE DATABASE IF NOT EXISTS {db}{on}")];
        for t in TABLES {
            let local = self.local(t.name);
            let engine = match &self.cluster {
                Some(_) => {
                    let path = format!("'/clickhouse/kansoku/{db}/{}/{{shard}}', '{{replica}}'", t.name);
                    let arg = if t.engine_arg.is_empty() { String::new() } else { format!(", {}", t.engine_arg) };
                    format!("Replicated{}({path}{arg})", t.engine)
                }
                None => format!("{}({})", t.engine, t.engine_arg),
            };
            let partition = t.partition.map(|p| format!(" PARTITION BY {p}")).unwrap_or_default();
            let settings = match &self.cluster {
                Some(_) => format!(
                    " SETTINGS index_granularity = {}, replicated_deduplication_window = {DEDUP_WINDOW}",
                    t.granularity
                ),
                None => format!(" SETTINGS index_granularity = {}", t.granularity),
            };
            out.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.{local}{on} ({}) ENGINE = {engine}{partition} ORDER BY {}{settings}",
                t.columns, t.order
            ));
            if let Some(cluster) = &self.cluster {
                out.push(format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{}{on} AS {db}.{local} ENGINE = Distributed({cluster}, {db}, {local}, {})",
                    t.name, t.shard_by
                ));
            }
        }
        // Every shard's parts, for retention (one replica per shard answers).
        if let Some(cluster) = &self.cluster {
            out.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.cluster_parts{on} AS system.parts ENGINE = Distributed({cluster}, system, parts)"
            ));
        }
        // The tiers fill on the node that takes each insert into the local
        // samples table, and replicate from there like any insert.
        for (name, res) in TIERS {
            let (src, dst) = (self.local("samples"), self.local(name));
            out.push(format!(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{name}_mv{on} TO {db}.{dst} AS SELECT series, \
                 intDiv(t, {res}) * {res} AS t, minState(v) AS min, maxState(v) AS max, sumState(v) AS sum, \
                 countState() AS count FROM {db}.{src} GROUP BY series, t"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_server_has_plain_tables() {
        let s = Layout { db: "k".into(), cluster: None }.statements();
        assert!(s.iter().any(|s| s.starts_with("CREATE TABLE IF NOT EXISTS k.samples (series UInt64")));
        assert!(s.iter().all(|s| !s.contains("Replicated") && !s.contains("Distributed") && !s.contains("ON CLUSTER")));
        assert!(s.iter().any(|s| s.contains("TO k.samples_1m AS SELECT") && s.contains("FROM k.samples GROUP BY")));
    }

    #[test]
    fn a_cluster_has_replicated_tables_under_distributed_ones() {
        let s = Layout { db: "k".into(), cluster: Some("c".into()) }.statements();
        let samples = s.iter().find(|s| s.contains("k.samples_local ON CLUSTER c (")).unwrap();
        assert!(
            samples.contains("ReplicatedMergeTree('/clickhouse/kansoku/k/samples/{shard}', '{replica}')"),
            "{samples}"
        );
        assert!(samples.contains("replicated_deduplication_window = 10000"));
        let marks = s.iter().find(|s| s.contains("k.marks_local ON CLUSTER c (")).unwrap();
        assert!(
            marks.contains("ReplicatedReplacingMergeTree('/clickhouse/kansoku/k/marks/{shard}', '{replica}', seq)")
        );
        assert!(s.iter().any(|s| s.ends_with("ENGINE = Distributed(c, k, samples_local, series)")));
        assert!(s.iter().any(|s| s.contains("TO k.samples_1s_local AS") && s.contains("FROM k.samples_local")));
    }
}
