//! Queued user messages and the notes of ended background shells join the
//! conversation: at the next model request boundary or as the next turn's
//! message when a turn ends.

use super::{Inputs, Step, begin_request};
use crate::effect::{Effect, LlmPurpose};
use crate::message::{ContentBlock, Message, Role};
use crate::state::ConvState;
use crate::texts;

/// Queued user messages (sent "queue if busy" while a turn ran) and the
/// notes of background shells that ended join the conversation at the
/// first chance, all of them, in order, each as a text block (the notes
/// first: they tell what happened before):
/// - at a model request boundary (a transition that appends a user message
///   and asks the model: tool results, a stop hook's reason), after what
///   that message already says; in a new turn, before the new message
///   (they were sent before it);
/// - when a turn ends normally (the state becomes Idle), as the user
///   message that starts the next turn: queued messages always, notes
///   alone only with `wake_on_shell_exit`;
/// - a shell's end that `woke` an idle conversation starts a turn with
///   them.
///
/// After a cancel (or a deny-and-stop) or a failure they stay queued (the
/// user stopped the work, or it could not go on) and go with the next message sent; a
/// conversation whose context is exhausted never takes them.
pub(super) fn deliver_queued(
    before: &ConvState,
    ctx: &Inputs<'_>,
    stops: bool,
    woke: bool,
    mut t: Step,
) -> Step {
    let queue = &ctx.conv.queue;
    let notes = &ctx.conv.shell_notes.pending;
    if queue.is_empty() && notes.is_empty() {
        return t;
    }
    let pending = || {
        let notes = notes
            .iter()
            .map(|n| ContentBlock::text(texts::shell_ended(n)));
        let queued = queue.iter().flat_map(|q| {
            std::iter::once(ContentBlock::text(q.text.clone()))
                .filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()))
                .chain(q.images.iter().cloned().map(ContentBlock::Image))
                .chain(crate::mention::blocks(&q.mentions))
        });
        notes.chain(queued)
    };
    let asks_model = t.effects.iter().position(|e| {
        matches!(
            e,
            Effect::RequestLlm {
                purpose: LlmPurpose::Turn,
                ..
            }
        )
    });
    if let Some(ask) = asks_model {
        // A retry asks again with the same transcript: not a boundary.
        let user_message = t.effects[..ask].iter_mut().rev().find_map(|e| match e {
            Effect::AppendMessage { message } if message.role == Role::User => Some(message),
            _ => None,
        });
        if let Some(message) = user_message {
            if matches!(before, ConvState::Idle | ConvState::Error { .. }) {
                // A new message after a cancel or a failure: the queued
                // ones were sent first, so they come first.
                let own = std::mem::take(&mut message.content);
                message.content = pending().chain(own).collect();
            } else {
                message.content.extend(pending());
            }
            t.delivered = queue.len();
            t.notes_delivered = true;
        }
        return t;
    }
    let turn_ended = !matches!(before, ConvState::Idle | ConvState::Error { .. })
        && !matches!(before, ConvState::Cancelling { .. })
        && matches!(t.state, ConvState::Idle);
    let wakes = !queue.is_empty() || ctx.wake_on_shell_exit;
    if (turn_ended && !stops && wakes) || woke {
        let next = begin_request(ctx, 1);
        t.state = next.state;
        t.effects.push(Effect::AppendMessage {
            message: Message::user(pending().collect(), ctx.now_ms),
        });
        t.effects.extend(next.effects);
        t.delivered = queue.len();
        // The next turn thinks as the latest message that asked said.
        t.thinking = Some(queue.iter().rev().find_map(|q| q.thinking));
        t.notes_delivered = true;
    }
    t
}
