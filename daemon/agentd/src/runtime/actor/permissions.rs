//! Permissions: the rules in force and the request a client is asked to
//! answer (`Permissions`), and carrying out the core's permission effects:
//! asking, the resolution (with its audit entry) and a rule added.

use super::Actor;
use crate::runtime::events::{EventKind, PermissionView};
use crate::store::{RuleScope as StoredScope, StoredEvent};
use agentd_core::{ConvState, Decision, PermissionAsk, Rule, RuleScope};
use tokio_util::sync::CancellationToken;

/// The rules in force and the pending request, as clients are shown it.
#[derive(Default)]
pub(super) struct Permissions {
    /// Every permission rule in force: config file, creation, and rules
    /// added by answers (this conversation's and its project's).
    rules: Vec<Rule>,
    /// Summary and diff of the request asked last: the pending one while
    /// the state asks for permission (a resolution carries its own call).
    asked: Option<PermissionView>,
}

impl Permissions {
    pub(super) fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub(super) fn set_rules(&mut self, rules: Vec<Rule>) {
        self.rules = rules;
    }

    pub(super) fn add_rule(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// A request is shown to clients.
    pub(super) fn asked(&mut self, view: PermissionView) {
        self.asked = Some(view);
    }

    /// The pending request as a snapshot shows it: none once `state` asks
    /// for nothing.
    pub(super) fn pending(&self, state: &ConvState) -> Option<PermissionView> {
        state.pending_permission().and_then(|_| self.asked.clone())
    }
}

impl Actor {
    pub(super) fn load_rules(&mut self) -> Result<(), crate::store::StoreError> {
        let rules = self.read_rules()?;
        self.permissions.set_rules(rules);
        Ok(())
    }

    /// Every permission rule in force now, as the store has them.
    pub(super) fn read_rules(&self) -> Result<Vec<Rule>, crate::store::StoreError> {
        let mut rules = self.shared.config.rules.clone();
        for text in &self.record.setup.allow_rules {
            match Rule::parse(text, agentd_core::Action::Allow) {
                Ok(rule) => rules.push(rule),
                Err(e) => {
                    tracing::warn!(conversation = %self.record.id, "ignoring rule {text:?}: {e}")
                }
            }
        }
        let store = &self.shared.store;
        rules.extend(store.rules(&self.stored_scope(RuleScope::Conversation))?);
        rules.extend(store.rules(&self.stored_scope(RuleScope::Project))?);
        Ok(rules)
    }

    /// Where the store keeps rules of `scope` for this conversation. A
    /// sub-agent's conversation rules are its parent's: "allow always"
    /// answered for one child holds for the parent and every sibling.
    pub(super) fn stored_scope(&self, scope: RuleScope) -> StoredScope {
        match scope {
            RuleScope::Conversation => StoredScope::Conversation(
                self.record
                    .sub_agent
                    .as_ref()
                    .map_or_else(|| self.record.id.clone(), |l| l.parent_id.clone()),
            ),
            RuleScope::Project => StoredScope::Project(self.record.cwd.clone()),
        }
    }

    pub(super) async fn permission_view(&self, ask: &PermissionAsk) -> PermissionView {
        let ctx = self.tool_context(CancellationToken::new());
        PermissionView {
            summary: crate::tools::summarize_call(&ask.tool_name, &ask.input),
            diff: crate::tools::preview_diff(&ask.tool_name, &ask.input, &ctx).await,
            ask: ask.clone(),
            sub_agent: crate::runtime::SubAgentRef::of(&self.record),
        }
    }

    /// `AskPermission`: the request is stored, then shown to clients (and
    /// notification hooks).
    pub(super) async fn ask_permission(&mut self, ask: PermissionAsk) {
        let view = self.permission_view(&ask).await;
        self.notify(
            crate::hooks::NotificationKind::PermissionRequest,
            format!(
                "agentd: {} needs permission: {}",
                ask.tool_name, view.summary
            ),
        );
        self.persist_event(StoredEvent::PermissionRequested {
            at_ms: self.now_ms(),
            ask: view.ask.clone(),
            summary: view.summary.clone(),
            diff: view.diff.clone(),
        })
        .await;
        self.permissions.asked(view.clone());
        self.emit(EventKind::PermissionRequested(view));
    }

    /// `PermissionResolved`: a client's answer goes to the audit trail
    /// (with the call it allowed or denied), the resolution is stored and
    /// clients are told.
    pub(super) async fn permission_resolved(
        &mut self,
        ask: PermissionAsk,
        decision: Decision,
        by: Option<agentd_core::ClientInfo>,
    ) {
        let PermissionAsk {
            request_id,
            tool_name: tool,
            input,
            ..
        } = ask;
        if let Some(client) = &by {
            let summary = crate::tools::summarize_call(&tool, &input);
            self.audit.record(
                client.clone(),
                crate::store::access::AuditAction::PermissionAnswered {
                    request_id: request_id.clone(),
                    decision,
                    tool,
                    summary,
                },
            );
        }
        self.persist_event(StoredEvent::PermissionResolved {
            at_ms: self.now_ms(),
            request_id: request_id.clone(),
            decision,
            client: by.as_ref().map(|c| (c.id.clone(), c.name.clone())),
            by: by.clone(),
        })
        .await;
        self.emit(EventKind::PermissionResolved {
            request_id,
            decision,
            client: by,
        });
    }

    /// `AddRule`: the commit wrote the rule with the transition; it holds
    /// from now on, and clients are told where.
    pub(super) fn rule_added(&mut self, rule: Rule, scope: RuleScope) {
        let where_ = match scope {
            RuleScope::Project => "every conversation in this directory",
            RuleScope::Conversation if self.record.sub_agent.is_some() => {
                "the parent conversation and all its sub-agents"
            }
            RuleScope::Conversation => "this conversation",
        };
        self.emit(EventKind::info(format!(
            "rule added for {where_}: {}",
            rule.spec()
        )));
        self.permissions.add_rule(rule);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(request_id: &str, tool: &str) -> PermissionView {
        PermissionView {
            ask: PermissionAsk {
                request_id: request_id.to_string(),
                tool_use_id: format!("tu-{request_id}"),
                tool_name: tool.to_string(),
                input: serde_json::json!({"command": "make"}),
                reason: String::new(),
                options: vec![Decision::AllowOnce],
                suggested_rule: String::new(),
            },
            summary: "make".to_string(),
            diff: None,
            sub_agent: None,
        }
    }

    // Which call a resolution answered is the core's to say: see the core
    // test `a_resolution_carries_the_request_it_ends_with_its_call`.

    #[tokio::test(start_paused = true)]
    async fn a_snapshot_shows_the_request_asked_last_while_the_state_asks() {
        let mut permissions = Permissions::default();
        permissions.asked(view("p1", "bash"));
        permissions.asked(view("p2", "edit"));
        let asking = ConvState::ToolExecuting(agentd_core::ToolRun {
            permission: Some(view("p2", "edit").ask),
            ..agentd_core::ToolRun::default()
        });
        let pending = permissions.pending(&asking).map(|v| v.ask.request_id);
        assert_eq!(pending.as_deref(), Some("p2"), "p2 replaced p1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_snapshot_shows_no_request_once_the_state_asks_for_nothing() {
        let mut permissions = Permissions::default();
        permissions.asked(view("p1", "bash"));
        assert!(permissions.pending(&ConvState::Idle).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn rules_added_by_answers_join_those_in_force() {
        let mut permissions = Permissions::default();
        let allow = |spec: &str| Rule::parse(spec, agentd_core::Action::Allow).unwrap();
        permissions.set_rules(vec![allow("bash(make:*)")]);
        permissions.add_rule(allow("read"));
        let specs: Vec<String> = permissions.rules().iter().map(Rule::spec).collect();
        assert_eq!(specs, ["allow bash(make:*)", "allow read"]);
        permissions.set_rules(Vec::new());
        assert!(permissions.rules().is_empty(), "read again from the store");
    }
}
