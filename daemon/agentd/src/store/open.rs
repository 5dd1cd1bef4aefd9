//! Opening the store: the schema check, the trees in the journal's order,
//! the journal's replay, and the mid-turn index built for a store from
//! before it.

use std::path::Path;

use super::journal::{self, Tree};
use super::{
    ConversationRecord, DEFAULT_CACHE_BYTES, SCHEMA_VERSION, Store, StoreError, Sync, decode,
    encode,
};

impl Store {
    /// Opens (or creates) the store under `dir` for [`Sync::Kill`] with the
    /// default cache.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(dir, Sync::Kill, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store under `dir` with a page cache of
    /// `cache_bytes`: replays its journal, and makes each later flush as
    /// durable as `sync` says.
    pub fn open_with(dir: &Path, sync: Sync, cache_bytes: u64) -> Result<Store, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .open()?;
        let meta = db.open_tree("meta")?;
        check_schema(&db, &meta)?;
        let mut trees = Vec::with_capacity(TREE_NAMES.len());
        for name in TREE_NAMES {
            trees.push(db.open_tree(name)?);
        }
        let log = match sync {
            Sync::Kill => None,
            Sync::Power => Some(power_safe_log(dir)?),
        };
        let (journal, replayed) =
            journal::Journal::open(&dir.join("journal"), &db, &trees, sync, log)?;
        if replayed > 0 {
            tracing::info!("replayed {replayed} changes from the store's journal");
        }
        let trees: Vec<Tree> = trees
            .into_iter()
            .enumerate()
            .map(|(i, tree)| Tree::new(tree, i as u8, journal.clone()))
            .collect();
        let mut trees = trees.into_iter();
        let differ =
            || StoreError::Flush("the store's tree list and its trees differ in number".into());
        let mut next = || trees.next().ok_or_else(differ);
        // The fields a tree fills are written in `TREE_NAMES`' order: a
        // struct expression evaluates its fields in the order written.
        let mut store = Store {
            convs: next()?,
            msgs: next()?,
            rules: next()?,
            shells: next()?,
            events: next()?,
            mid_turn: next()?,
            creates: next()?,
            usage_days: next()?,
            budget_raises: next()?,
            trusted: next()?,
            images: next()?,
            tokens: next()?,
            audit: next()?,
            checkpoints: next()?,
            environments: next()?,
            deleting: next()?,
            db,
            mid_turn_ids: Default::default(),
            journal,
            flushes: Default::default(),
            #[cfg(test)]
            fail_flushes: Default::default(),
        };
        if next().is_ok() {
            return Err(differ());
        }
        if meta.get("mid_turn_index")?.is_none() {
            // A store from before the index: build it once.
            build_mid_turn_index(
                &store.db,
                &meta,
                &store.convs,
                &store.mid_turn,
                &store.journal,
            )?;
        }
        let mut mid_turn_ids = std::collections::HashSet::new();
        for key in store.mid_turn.iter().keys() {
            mid_turn_ids.insert(String::from_utf8_lossy(&key?).into_owned());
        }
        store.mid_turn_ids = std::sync::Arc::new(std::sync::Mutex::new(mid_turn_ids));
        Ok(store)
    }
}

/// The trees, in the order the journal numbers them: it replays into the
/// trees by their place in this list, so append to it, never reorder it.
const TREE_NAMES: [&str; 16] = [
    "conversations",
    "messages",
    "rules",
    "shells",
    "events",
    "mid_turn",
    "creates",
    "usage_days",
    "budget_raises",
    "trusted_dirs",
    "images",
    "tokens",
    "audit",
    "checkpoints",
    "environments",
    "deleting",
];

/// Checks the schema version a store was written with, or records ours in
/// a new one.
fn check_schema(db: &sled::Db, meta: &sled::Tree) -> Result<(), StoreError> {
    match meta.get("schema_version")? {
        Some(v) => {
            let found: u32 = decode(b"schema_version", &v)?;
            if found != SCHEMA_VERSION {
                return Err(StoreError::Schema {
                    found,
                    expected: SCHEMA_VERSION,
                });
            }
        }
        None => {
            meta.insert("schema_version", encode("schema_version", &SCHEMA_VERSION)?)?;
            db.flush()?;
        }
    }
    Ok(())
}

/// Builds the `mid_turn` index of a store from before it, once.
fn build_mid_turn_index(
    db: &sled::Db,
    meta: &sled::Tree,
    convs: &Tree,
    mid_turn: &Tree,
    journal: &journal::Journal,
) -> Result<(), StoreError> {
    for item in convs.iter() {
        let (k, v) = item?;
        let record: ConversationRecord = decode(&k, &v)?;
        if record.needs_recovery() {
            mid_turn.insert(k, &[])?;
        }
    }
    journal.write_pending()?;
    meta.insert("mid_turn_index", &[1u8])?;
    db.flush()?;
    Ok(())
}

/// sled's log file (`db` in its directory, sled 0.34's layout), opened to
/// `fdatasync` it after each sled flush that lets journal files go, once
/// the directory entries that lead to it are durable too.
fn power_safe_log(dir: &Path) -> Result<std::fs::File, StoreError> {
    let sync_err = |what: &Path, e: std::io::Error| {
        StoreError::Flush(format!("cannot sync {}: {e}", what.display()))
    };
    let log_path = dir.join("db");
    let log = std::fs::File::open(&log_path).map_err(|e| sync_err(&log_path, e))?;
    log.sync_all().map_err(|e| sync_err(&log_path, e))?;
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        if let Ok(handle) = std::fs::File::open(d) {
            handle.sync_all().map_err(|e| sync_err(d, e))?;
        }
    }
    Ok(log)
}
