//! The in-memory head: raw samples per series since the last block flush,
//! uncompressed so the newest data (what live charts ask for) reads fastest.

/// Samples of one head generation, indexed by store series id.
///
/// Invariant: each column's timestamps strictly increase.
#[derive(Debug, Default)]
pub struct Head {
    columns: Vec<Column>,
    n_samples: usize,
    min_t: Option<i64>,
}

#[derive(Debug, Default, Clone)]
pub struct Column {
    pub ts: Vec<i64>,
    pub vals: Vec<f64>,
}

impl Head {
    /// Appends if `t` is after the column's last timestamp; returns false
    /// (the caller counts it) otherwise.
    pub fn push(&mut self, id: u32, t: i64, v: f64) -> bool {
        let idx = id as usize;
        if self.columns.len() <= idx {
            self.columns.resize_with(idx + 1, Column::default);
        }
        let col = &mut self.columns[idx];
        if col.ts.last().is_some_and(|&last| last >= t) {
            return false;
        }
        col.ts.push(t);
        col.vals.push(v);
        self.n_samples += 1;
        self.min_t = Some(self.min_t.map_or(t, |m| m.min(t)));
        true
    }

    pub fn n_samples(&self) -> usize {
        self.n_samples
    }

    pub fn min_t(&self) -> Option<i64> {
        self.min_t
    }

    pub fn column(&self, id: u32) -> Option<&Column> {
        self.columns.get(id as usize)
    }

    /// (series id, column) for every non-empty column.
    pub fn columns(&self) -> impl Iterator<Item = (u32, &Column)> {
        self.columns.iter().enumerate().filter(|(_, c)| !c.ts.is_empty()).map(|(i, c)| (i as u32, c))
    }

    /// Appends the column's samples in `[from, to]`.
    pub fn read(&self, id: u32, from: i64, to: i64, ts: &mut Vec<i64>, vals: &mut Vec<f64>) {
        let Some(c) = self.column(id) else { return };
        let lo = c.ts.partition_point(|&x| x < from);
        let hi = c.ts.partition_point(|&x| x <= to).max(lo);
        ts.extend_from_slice(&c.ts[lo..hi]);
        vals.extend_from_slice(&c.vals[lo..hi]);
    }
}
