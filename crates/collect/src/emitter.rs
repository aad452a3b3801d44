//! Turns `(name, labels, value)` into batch points, declaring each series the
//! first time it is seen and referring to it by a small id afterwards.
//!
//! Sources call [`Emitter::emit`] a few hundred times per round. Interning
//! hashes the name and label values (no allocation) and compares against the
//! stored key only on a hash hit, so a round allocates nothing once every
//! series is known.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use model::{Batch, SeriesKey, Timestamp};

/// Label every series carries: the host it describes.
pub const HOST_LABEL: &str = "host";

#[derive(Debug)]
pub struct Emitter {
    host: String,
    by_hash: HashMap<u64, Vec<u32>>,
    keys: Vec<SeriesKey>,
    batch: Batch,
}

impl Emitter {
    pub fn new(host: impl Into<String>) -> Emitter {
        Emitter { host: host.into(), by_hash: HashMap::new(), keys: Vec::new(), batch: Batch::default() }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// Starts a round stamped `time`; points emitted until [`Emitter::finish`]
    /// belong to it.
    pub fn begin(&mut self, time: Timestamp) {
        self.batch.time = time;
        self.batch.defs.clear();
        self.batch.points.clear();
    }

    /// Adds one sample. `labels` need not be sorted and must not contain `host`.
    pub fn emit(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let id = self.intern(name, labels);
        self.batch.points.push((id, value));
    }

    /// The round's batch; the emitter keeps its series table for the next round.
    pub fn finish(&mut self) -> Batch {
        let time = self.batch.time;
        let points = Vec::with_capacity(self.batch.points.len());
        let mut out = std::mem::replace(&mut self.batch, Batch { time, defs: Vec::new(), points });
        out.time = time;
        out
    }

    /// Every series declared so far, by id.
    pub fn series(&self) -> &[SeriesKey] {
        &self.keys
    }

    fn intern(&mut self, name: &str, labels: &[(&str, &str)]) -> u32 {
        debug_assert!(labels.iter().all(|(k, _)| *k != HOST_LABEL), "BUG: sources must not set host");
        let mut h = DefaultHasher::new();
        name.hash(&mut h);
        // Order-independent over labels: sum of per-label hashes.
        let mut sum: u64 = 0;
        for (k, v) in labels {
            let mut lh = DefaultHasher::new();
            (k, v).hash(&mut lh);
            sum = sum.wrapping_add(lh.finish());
        }
        sum.hash(&mut h);
        let hash = h.finish();
        if let Some(ids) = self.by_hash.get(&hash) {
            for &id in ids {
                if self.same(&self.keys[id as usize], name, labels) {
                    return id;
                }
            }
        }
        let id = u32::try_from(self.keys.len()).expect("BUG: more than 2^32 series from one host");
        let key = SeriesKey::new(name, labels.iter().copied().chain([(HOST_LABEL, self.host.as_str())]));
        self.batch.defs.push((id, key.clone()));
        self.keys.push(key);
        self.by_hash.entry(hash).or_default().push(id);
        id
    }

    fn same(&self, key: &SeriesKey, name: &str, labels: &[(&str, &str)]) -> bool {
        key.name() == name
            && key.labels().len() == labels.len() + 1
            && key.get(HOST_LABEL) == Some(self.host.as_str())
            && labels.iter().all(|(k, v)| key.get(k) == Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declares_once_and_reuses_ids() {
        let mut e = Emitter::new("h1");
        e.begin(Timestamp(1));
        e.emit("m", &[("cpu", "0"), ("mode", "user")], 1.0);
        e.emit("m", &[("mode", "user"), ("cpu", "1")], 2.0);
        let b1 = e.finish();
        assert_eq!(b1.defs.len(), 2);
        assert_eq!(b1.defs[0].1.to_string(), r#"m{cpu="0",host="h1",mode="user"}"#);
        e.begin(Timestamp(2));
        e.emit("m", &[("cpu", "1"), ("mode", "user")], 3.0);
        e.emit("m", &[("cpu", "0"), ("mode", "user")], 4.0);
        let b2 = e.finish();
        assert!(b2.defs.is_empty());
        assert_eq!(b2.time, Timestamp(2));
        assert_eq!(b2.points, vec![(1, 3.0), (0, 4.0)]);
    }
}
