//! The messages this client typed and the daemon has not yet confirmed:
//! kept (with their images) to be sent again on a new stream, counted for
//! the exit status of `attach`. Its own type so the rest of the session
//! never touches the bookkeeping.

use std::collections::{HashMap, VecDeque};

use agent_proto::v1 as pb;

/// Messages typed, in order, until the daemon appends them.
#[derive(Default)]
pub(super) struct Outbox {
    /// Messages sent and not yet seen appended, with their client request
    /// ids: sent again on a new stream (the daemon appends each once).
    unacked: VecDeque<(String, String)>,
    /// Images attached (`/image`, or a typed or pasted path) for the next
    /// message.
    pending_images: Vec<pb::ImageUpload>,
    /// The images of unacknowledged messages, by client request id, so a
    /// message sent again on a new stream carries them again.
    unacked_images: HashMap<String, Vec<pb::ImageUpload>>,
    /// The thinking `/think` asked for the messages typed from now on
    /// (None: the model's configured thinking).
    pub(super) thinking: Option<pb::ThinkingChoice>,
    /// The thinking of unacknowledged messages that asked for one, by
    /// client request id.
    unacked_thinking: HashMap<String, pb::ThinkingChoice>,
    /// `attach`: messages sent, and those the daemon refused.
    sent: usize,
    not_sent: usize,
}

impl Outbox {
    /// A message typed: the frame that sends it, carrying the images
    /// attached since the last one.
    pub(super) fn send(&mut self, text: &str) -> pb::SendMessageFrame {
        self.sent += 1;
        let id = crate::commands::request_id();
        self.unacked.push_back((text.to_string(), id.clone()));
        let images = std::mem::take(&mut self.pending_images);
        if !images.is_empty() {
            self.unacked_images
                .retain(|k, _| self.unacked.iter().any(|(_, u)| u == k));
            self.unacked_images.insert(id.clone(), images.clone());
        }
        self.unacked_thinking
            .retain(|k, _| self.unacked.iter().any(|(_, u)| u == k));
        if let Some(t) = &self.thinking {
            self.unacked_thinking.insert(id.clone(), t.clone());
        }
        pb::SendMessageFrame {
            text: text.to_string(),
            thinking: self.thinking.clone(),
            client_request_id: id,
            expected_turn: None,
            queue_if_busy: true,
            images,
        }
    }

    /// The frames of every message not yet confirmed, to send again.
    pub(super) fn unconfirmed(&self) -> Vec<pb::SendMessageFrame> {
        self.unacked
            .iter()
            .map(|(text, id)| pb::SendMessageFrame {
                text: text.clone(),
                client_request_id: id.clone(),
                expected_turn: None,
                queue_if_busy: true,
                images: self.unacked_images.get(id).cloned().unwrap_or_default(),
                thinking: self.unacked_thinking.get(id).cloned(),
            })
            .collect()
    }

    /// A user message was appended: the oldest unconfirmed one, if it has
    /// that text, is confirmed.
    pub(super) fn appended(&mut self, text: &str) {
        if self.unacked.front().is_some_and(|(u, _)| u == text.trim()) {
            self.unacked.pop_front();
        }
    }

    /// The daemon refused a frame: when a message was waiting, it was
    /// that one (counted as not sent). Whether it was.
    pub(super) fn refused(&mut self) -> bool {
        if self.unacked.pop_front().is_some() {
            self.not_sent += 1;
            true
        } else {
            false
        }
    }

    /// Whether every message sent has been confirmed.
    pub(super) fn is_empty(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Adds images to the next message; how many it now carries.
    pub(super) fn attach(&mut self, mut images: Vec<pb::ImageUpload>) -> usize {
        self.pending_images.append(&mut images);
        self.pending_images.len()
    }

    /// Messages sent, refused, and not confirmed.
    pub(super) fn counts(&self) -> (usize, usize, usize) {
        (self.sent, self.not_sent, self.unacked.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(data: &[u8]) -> pb::ImageUpload {
        pb::ImageUpload {
            data: data.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_message_is_sent_again_with_its_images_until_appended() {
        let mut outbox = Outbox::default();
        assert_eq!(outbox.attach(vec![image(b"a")]), 1);
        let first = outbox.send("look");
        assert_eq!(first.images, vec![image(b"a")]);
        let second = outbox.send("and this");
        assert!(second.images.is_empty());
        let again = outbox.unconfirmed();
        assert_eq!(again, vec![first.clone(), second.clone()]);
        outbox.appended("and this");
        assert_eq!(
            outbox.unconfirmed().len(),
            2,
            "only the oldest is confirmed"
        );
        outbox.appended(" look ");
        assert_eq!(outbox.unconfirmed(), vec![second]);
        outbox.appended("and this");
        assert!(outbox.is_empty());
        assert_eq!(outbox.counts(), (2, 0, 0));
    }

    #[test]
    fn a_refusal_counts_the_oldest_message_as_not_sent() {
        let mut outbox = Outbox::default();
        assert!(!outbox.refused());
        outbox.send("one");
        outbox.send("two");
        assert!(outbox.refused());
        assert_eq!(outbox.counts(), (2, 1, 1));
        assert_eq!(outbox.unconfirmed()[0].text, "two");
    }
}
