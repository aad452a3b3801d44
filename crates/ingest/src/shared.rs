//! The symbol sources of servers in front of one ClickHouse store, shared
//! through its `symbols` table: what one server received, every server can
//! name frames with (`symstore::Shared`).

use std::sync::Arc;

/// A ClickHouse store as the servers' shared symbol store.
#[derive(Debug)]
pub struct SharedSymbols(pub Arc<chstore::Writer>);

impl symstore::Shared for SharedSymbols {
    fn put(&self, key: &symstore::Key, packed: &[u8]) -> Result<(), String> {
        self.0.put_symbol(key.kind.name(), &key.id, packed).map_err(|e| e.to_string())
    }

    fn get(&self, key: &symstore::Key) -> Result<Option<Vec<u8>>, String> {
        self.0.get_symbol(key.kind.name(), &key.id).map_err(|e| e.to_string())
    }
}
