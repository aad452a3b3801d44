//! The poller's series ids (see [`model::Batch`]): keys registered once,
//! declared in the first batch that carries a point of them, and declared
//! again if that batch never reached the store.

use std::collections::HashMap;

use model::{Batch, SeriesKey};

#[derive(Debug, Default)]
pub struct Series {
    keys: Vec<SeriesKey>,
    declared: Vec<bool>,
    /// Series made on the fly (errors, periods), by key.
    by_key: HashMap<SeriesKey, u32>,
}

impl Series {
    pub fn add(&mut self, key: SeriesKey) -> u32 {
        let id = u32::try_from(self.keys.len()).expect("BUG: over 2^32 series");
        self.keys.push(key);
        self.declared.push(false);
        id
    }

    /// The id of `key`, registering it on first sight.
    pub fn get_or_add(&mut self, key: SeriesKey) -> u32 {
        if let Some(&id) = self.by_key.get(&key) {
            return id;
        }
        let id = self.add(key.clone());
        self.by_key.insert(key, id);
        id
    }

    pub fn push(&mut self, batch: &mut Batch, id: u32, value: f64) {
        let i = id as usize;
        if !self.declared[i] {
            self.declared[i] = true;
            batch.defs.push((id, self.keys[i].clone()));
        }
        batch.points.push((id, value));
    }

    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.keys.len()
    }
}
