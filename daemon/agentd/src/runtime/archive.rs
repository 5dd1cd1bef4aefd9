//! Export and import: a conversation's transcript moves between daemons
//! with the images it refers to; none is stored without them.

use super::{Manager, RuntimeError};
use crate::store::ConversationRecord;
use agentd_core::Message;

impl Manager {
    /// Stores an imported conversation. Returns false when the id exists.
    pub(crate) async fn import(
        &self,
        record: ConversationRecord,
        messages: Vec<Message>,
        images: Vec<crate::images::StagedImage>,
    ) -> Result<bool, RuntimeError> {
        if self.shared.store.conversation(&record.id)?.is_some() {
            return Ok(false);
        }
        // Every image a message refers to must come with the export (or be
        // here already): a transcript is never stored without its images.
        for image in messages.iter().flat_map(Message::images) {
            let carried = images.iter().any(|s| s.image.sha256 == image.sha256);
            if !carried && self.shared.store.image(&image.sha256)?.is_none() {
                return Err(RuntimeError::InvalidArgument(format!(
                    "conversation {}: image {} is referred to but not in the export",
                    record.id, image.sha256
                )));
            }
        }
        // Before the messages that refer to them (sled keeps a prefix).
        for staged in &images {
            self.shared
                .store
                .put_image(&staged.image.sha256, &staged.bytes)?;
        }
        let numbered: Vec<(u64, &Message)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u64 + 1, m))
            .collect();
        self.shared.store.commit(&record, &numbered)?;
        self.shared.store.flush().await?;
        Ok(true)
    }

    /// The images `messages` refer to, each once, with their bytes (for an
    /// export). An image the store lacks is an error: an export without it
    /// could not be imported.
    pub(crate) fn images_of<'a>(
        &self,
        messages: impl Iterator<Item = &'a Message>,
    ) -> Result<Vec<(agentd_core::ImageRef, Vec<u8>)>, RuntimeError> {
        let mut out: Vec<(agentd_core::ImageRef, Vec<u8>)> = Vec::new();
        for message in messages {
            for image in message.images() {
                if out.iter().any(|(i, _)| i.sha256 == image.sha256) {
                    continue;
                }
                let bytes = self.shared.store.image(&image.sha256)?.ok_or_else(|| {
                    RuntimeError::InvalidArgument(format!(
                        "image {} is missing from the store",
                        image.sha256
                    ))
                })?;
                out.push((image.clone(), bytes.to_vec()));
            }
        }
        Ok(out)
    }
}
