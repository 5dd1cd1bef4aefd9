//! The `events` tree: durable events a reconnecting client is replayed,
//! stored one commit's batch under one key (see [`Store::append`]).

use super::{Store, StoreError, StoredEvent, decode, encode, message_key, message_prefix};

impl Store {
    /// Stores one durable event (not yet durable: call [`Store::flush`]).
    pub fn put_event(
        &self,
        conv_id: &str,
        seq: u64,
        event: &StoredEvent,
    ) -> Result<(), StoreError> {
        self.events
            .insert(message_key(conv_id, seq), encode(conv_id, event)?)?;
        Ok(())
    }

    /// Whether the event log of `conv_id` reaches back to `seq` (holds an
    /// event at or before it), so it can replay everything after `seq`.
    /// A key is the seq of the first event stored under it.
    pub fn events_cover(&self, conv_id: &str, seq: u64) -> Result<bool, StoreError> {
        let start = message_key(conv_id, 0);
        let end = message_key(conv_id, seq);
        Ok(self
            .events
            .range(start..=end)
            .next_back()
            .transpose()?
            .is_some())
    }

    /// The durable events of `conv_id` after `seq`; None when there are
    /// more than `limit`.
    ///
    /// `seq` may fall inside a commit's batch: the scan starts at the last
    /// key at or before it and leaves out what the client has seen. A
    /// batch holds the events from its key up to the next key: should a
    /// failed commit's numbers have been handed out again (the actor takes
    /// them back, `Fanout::discard_held`), what a later key stores wins,
    /// as a later write under the same key did when every event had its
    /// own.
    pub fn events_after(
        &self,
        conv_id: &str,
        seq: u64,
        limit: usize,
    ) -> Result<Option<Vec<(u64, StoredEvent)>>, StoreError> {
        let prefix = message_prefix(conv_id);
        let start = match self
            .events
            .range(message_key(conv_id, 0)..=message_key(conv_id, seq))
            .next_back()
            .transpose()?
        {
            Some((key, _)) => key.to_vec(),
            None => message_key(conv_id, seq.saturating_add(1)),
        };
        let mut out: Vec<(u64, StoredEvent)> = Vec::new();
        for item in self.events.range(start..) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            let first = event_key_seq(&k, prefix.len())?;
            while out.last().is_some_and(|(s, _)| *s >= first) {
                out.pop();
            }
            if out.len() > limit {
                return Ok(None);
            }
            out.extend(
                stored_events(&k, first, &v)?
                    .into_iter()
                    .filter(|(s, _)| *s > seq),
            );
        }
        Ok((out.len() <= limit).then_some(out))
    }
}

/// The sequence number an `events` key names (after the conversation's
/// prefix of `prefix_len` bytes).
fn event_key_seq(key: &[u8], prefix_len: usize) -> Result<u64, StoreError> {
    let seq_bytes: [u8; 8] = key
        .get(prefix_len..)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| StoreError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            message: "bad event key".to_string(),
        })?;
    Ok(u64::from_be_bytes(seq_bytes))
}

/// The events stored under one key of the `events` tree, whose seq is
/// `first`: a commit's batch, a JSON array of `[seq, event]` pairs in
/// ascending order from `first` on; or one event alone, a JSON object,
/// whose seq is the key's (a commit of one event, [`Store::put_event`],
/// and every record written before issue 44).
fn stored_events(
    key: &[u8],
    first: u64,
    value: &[u8],
) -> Result<Vec<(u64, StoredEvent)>, StoreError> {
    if value.trim_ascii_start().first() != Some(&b'[') {
        return Ok(vec![(first, decode(key, value)?)]);
    }
    let batch: Vec<(u64, StoredEvent)> = decode(key, value)?;
    let mut expected = first;
    for (seq, _) in &batch {
        if *seq < expected {
            return Err(StoreError::Corrupt {
                key: String::from_utf8_lossy(key).into_owned(),
                message: format!("event {seq} out of order in a batch from {first}"),
            });
        }
        expected = seq.saturating_add(1);
    }
    Ok(batch)
}
