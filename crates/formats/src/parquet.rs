//! Parquet output of `kansoku export` (feature `parquet`): one row per sample (or event), labels
//! as dictionary-encoded string columns, zstd pages, row groups of 1 M rows.
//! Unsigned columns (pid, tid, ip) carry Parquet's unsigned annotations, so
//! pandas/polars/DuckDB read kernel addresses as uint64.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use ::parquet::basic::{Compression, ZstdLevel};
use ::parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use ::parquet::schema::parser::parse_message_type;
use anyhow::{Context, bail};
use codec::events::Want;
use model::{Selector, SeriesKey, Timestamp};
use source::EventQuery;
use store::Store;

const ROW_GROUP: usize = 1 << 20;

enum Col {
    I64(Vec<i64>),
    I32(Vec<i32>),
    F64(Vec<f64>),
    /// Values present, and a definition level per row (1 present, 0 null).
    Str(Vec<ByteArray>, Vec<i16>),
}

impl Col {
    fn len(&self) -> usize {
        match self {
            Col::I64(v) => v.len(),
            Col::I32(v) => v.len(),
            Col::F64(v) => v.len(),
            Col::Str(_, d) => d.len(),
        }
    }

    fn clear(&mut self) {
        match self {
            Col::I64(v) => v.clear(),
            Col::I32(v) => v.clear(),
            Col::F64(v) => v.clear(),
            Col::Str(v, d) => {
                v.clear();
                d.clear();
            }
        }
    }
}

struct Writer {
    file: SerializedFileWriter<File>,
    /// time_ns, name, labels..., then the value columns.
    cols: Vec<Col>,
    labels: Vec<String>,
    rows: u64,
}

impl Writer {
    /// `value_schema` declares the value columns `value_names`; a label
    /// whose name collides with a column becomes `label_<name>`.
    fn new(
        path: &Path,
        labels: Vec<String>,
        value_names: &[&str],
        value_schema: &str,
        value_cols: Vec<Col>,
    ) -> anyhow::Result<Writer> {
        let mut schema = String::from(
            "message kansoku {\n  required int64 time_ns (TIMESTAMP(NANOS,true));\n  required binary name (STRING);\n",
        );
        for l in &labels {
            if !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!("label {l:?} cannot be a Parquet column name");
            }
            let taken = ["time_ns", "name"].contains(&l.as_str()) || value_names.contains(&l.as_str());
            let col = if taken { format!("label_{l}") } else { l.clone() };
            schema.push_str(&format!("  optional binary {col} (STRING);\n"));
        }
        schema.push_str(value_schema);
        schema.push('}');
        let schema = Arc::new(parse_message_type(&schema).context("BUG: Parquet schema")?);
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
            .set_created_by(format!("kansoku {}", env!("CARGO_PKG_VERSION")))
            .build();
        let file = File::create(path).with_context(|| format!("create {}", path.display()))?;
        let mut cols = vec![Col::I64(Vec::new()), Col::Str(Vec::new(), Vec::new())];
        cols.extend(labels.iter().map(|_| Col::Str(Vec::new(), Vec::new())));
        cols.extend(value_cols);
        Ok(Writer { file: SerializedFileWriter::new(file, schema, Arc::new(props))?, cols, labels, rows: 0 })
    }

    /// Starts a row: time, name and labels; the caller pushes the values.
    fn key(&mut self, t: i64, key: &SeriesKey) {
        let Col::I64(times) = &mut self.cols[0] else { unreachable!() };
        times.push(t);
        let Col::Str(names, d) = &mut self.cols[1] else { unreachable!() };
        names.push(ByteArray::from(key.name()));
        d.push(1);
        for (i, l) in self.labels.iter().enumerate() {
            let Col::Str(vals, d) = &mut self.cols[2 + i] else { unreachable!() };
            match key.get(l) {
                Some(v) => {
                    vals.push(ByteArray::from(v));
                    d.push(1);
                }
                None => d.push(0),
            }
        }
    }

    fn value_cols(&mut self) -> &mut [Col] {
        let n = 2 + self.labels.len();
        &mut self.cols[n..]
    }

    fn end_row(&mut self) -> anyhow::Result<()> {
        self.rows += 1;
        if self.cols[0].len() >= ROW_GROUP { self.flush() } else { Ok(()) }
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        if self.cols[0].len() == 0 {
            return Ok(());
        }
        let mut rg = self.file.next_row_group()?;
        for (i, c) in self.cols.iter_mut().enumerate() {
            let mut w = rg.next_column()?.context("BUG: fewer Parquet columns than the schema")?;
            match c {
                Col::I64(v) => w.typed::<Int64Type>().write_batch(v, None, None)?,
                Col::I32(v) => w.typed::<Int32Type>().write_batch(v, None, None)?,
                Col::F64(v) => w.typed::<DoubleType>().write_batch(v, None, None)?,
                // `name` (column 1) is required: no definition levels.
                Col::Str(v, _) if i == 1 => w.typed::<ByteArrayType>().write_batch(v, None, None)?,
                Col::Str(v, d) => w.typed::<ByteArrayType>().write_batch(v, Some(d), None)?,
            };
            w.close()?;
            c.clear();
        }
        rg.close()?;
        Ok(())
    }

    fn close(mut self) -> anyhow::Result<u64> {
        self.flush()?;
        self.file.close()?;
        Ok(self.rows)
    }
}

pub fn write(
    store: &Store,
    sel: &Selector,
    from: Timestamp,
    to: Timestamp,
    events: bool,
    path: &Path,
) -> anyhow::Result<()> {
    let rows = if events {
        let streams = store.events().streams(sel);
        let mut w = Writer::new(
            path,
            crate::export::label_columns(streams.iter()),
            &["cpu", "pid", "tid", "ip"],
            "  required int32 cpu (INTEGER(32,false));\n  required int32 pid (INTEGER(32,false));\n  \
             required int32 tid (INTEGER(32,false));\n  required int64 ip (INTEGER(64,false));\n",
            vec![Col::I32(Vec::new()), Col::I32(Vec::new()), Col::I32(Vec::new()), Col::I64(Vec::new())],
        )?;
        let q = EventQuery { streams: sel.clone(), cpus: Vec::new(), from: from.as_nanos(), to: to.as_nanos() };
        let (batches, corrupt) = store.events().scan(&q, Want::ALL);
        if corrupt > 0 {
            tracing::warn!("{corrupt} corrupt event batches skipped (see the log above)");
        }
        for (key, b) in &batches {
            for i in 0..b.len() {
                w.key(b.time[i], key);
                // Unsigned values kept bit for bit in Parquet's signed physical types.
                let vals = [b.cpu as i32, b.pid[i] as i32, b.tid[i] as i32];
                for (c, v) in w.value_cols().iter_mut().zip(vals) {
                    let Col::I32(col) = c else { unreachable!() };
                    col.push(v);
                }
                let Col::I64(ip) = &mut w.value_cols()[3] else { unreachable!() };
                ip.push(b.ip[i] as i64);
                w.end_row()?;
            }
        }
        w.close()?
    } else {
        let matched = store.series(sel);
        let mut w = Writer::new(
            path,
            crate::export::label_columns(matched.iter().map(|(_, k)| k)),
            &["value"],
            "  required double value;\n",
            vec![Col::F64(Vec::new())],
        )?;
        for (id, key) in &matched {
            let (ts, vals) = store.read(*id, from, to);
            for (t, v) in ts.into_iter().zip(vals) {
                w.key(t, key);
                let Col::F64(col) = &mut w.value_cols()[0] else { unreachable!() };
                col.push(v);
                w.end_row()?;
            }
        }
        w.close()?
    };
    if rows == 0 {
        bail!("nothing matches in that range; list series with `kansoku series`");
    }
    tracing::info!("exported {rows} rows to {}", path.display());
    Ok(())
}
