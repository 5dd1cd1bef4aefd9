//! Reading an export back (`agent import`): a lenient walk over the JSON
//! that says where a document is wrong. Separate because it is the only
//! direction that can fail.

use agent_proto::v1::{
    self as pb, ErrorKind, PermissionMode, Role, StateKind, content_block::Block,
};
use base64::Engine as _;
use serde_json::{Map, Value};

use super::JsonError;

/// A JSON object being read, with the path to it for error messages.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, path: &str) -> Result<Self, JsonError> {
        match value {
            Value::Object(map) => Ok(Obj {
                map,
                path: path.to_string(),
            }),
            other => Err(JsonError {
                path: display_path(path),
                what: format!("expected an object, found {}", kind_of(other)),
            }),
        }
    }

    fn sub(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn err(&self, key: &str, what: impl Into<String>) -> JsonError {
        JsonError {
            path: self.sub(key),
            what: what.into(),
        }
    }

    /// The field, with `null` read as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<String, JsonError> {
        match self.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => {
                Err(self.err(key, format!("expected a string, found {}", kind_of(other))))
            }
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, JsonError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => {
                Err(self.err(key, format!("expected a boolean, found {}", kind_of(other))))
            }
        }
    }

    fn int<T: TryFrom<i128>>(&self, key: &str) -> Result<T, JsonError> {
        let wide: i128 = match self.get(key) {
            None => 0,
            Some(Value::Number(n)) => {
                if let Some(u) = n.as_u64() {
                    i128::from(u)
                } else if let Some(i) = n.as_i64() {
                    i128::from(i)
                } else {
                    return Err(self.err(key, format!("expected an integer, found {n}")));
                }
            }
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map_err(|_| self.err(key, format!("expected an integer, found {s:?}")))?,
            Some(other) => {
                return Err(self.err(
                    key,
                    format!("expected an integer, found {}", kind_of(other)),
                ));
            }
        };
        T::try_from(wide).map_err(|_| self.err(key, format!("{wide} is out of range")))
    }

    fn enumeration(
        &self,
        key: &str,
        prefix: &str,
        from_name: fn(&str) -> Option<i32>,
    ) -> Result<i32, JsonError> {
        match self.get(key) {
            None => Ok(0),
            Some(Value::String(s)) => {
                let upper = s.trim().to_uppercase();
                let full = if upper.starts_with(prefix) {
                    upper
                } else {
                    format!("{prefix}{upper}")
                };
                from_name(&full).ok_or_else(|| self.err(key, format!("unknown value {s:?}")))
            }
            Some(Value::Number(_)) => self.int(key),
            Some(other) => Err(self.err(
                key,
                format!("expected an enum name, found {}", kind_of(other)),
            )),
        }
    }

    fn object(&self, key: &str) -> Result<Option<Obj<'a>>, JsonError> {
        self.get(key)
            .map(|v| Obj::new(v, &self.sub(key)))
            .transpose()
    }

    fn array(&self, key: &str) -> Result<&'a [Value], JsonError> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => {
                Err(self.err(key, format!("expected an array, found {}", kind_of(other))))
            }
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, JsonError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(JsonError {
                    path: format!("{}[{i}]", self.sub(key)),
                    what: format!("expected a string, found {}", kind_of(other)),
                }),
            })
            .collect()
    }

    fn objects<T>(
        &self,
        key: &str,
        read: impl Fn(&Obj<'a>) -> Result<T, JsonError>,
    ) -> Result<Vec<T>, JsonError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| read(&Obj::new(v, &format!("{}[{i}]", self.sub(key)))?))
            .collect()
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(top level)".to_string()
    } else {
        path.to_string()
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn read_model_usage(o: &Obj<'_>) -> Result<pb::ModelUsage, JsonError> {
    Ok(pb::ModelUsage {
        model: o.string("model")?,
        usage: o.object("usage")?.map(|u| read_usage(&u)).transpose()?,
        cost_usd: match o.get("cost_usd") {
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        },
    })
}

fn read_usage(o: &Obj<'_>) -> Result<pb::Usage, JsonError> {
    Ok(pb::Usage {
        input_tokens: o.int("input_tokens")?,
        output_tokens: o.int("output_tokens")?,
        cache_creation_input_tokens: o.int("cache_creation_input_tokens")?,
        cache_read_input_tokens: o.int("cache_read_input_tokens")?,
    })
}

fn read_state(o: &Obj<'_>) -> Result<pb::ConversationState, JsonError> {
    Ok(pb::ConversationState {
        kind: o.enumeration("kind", "STATE_KIND_", |s| {
            StateKind::from_str_name(s).map(|k| k as i32)
        })?,
        attempt: o.int("attempt")?,
        max_attempts: o.int("max_attempts")?,
        retry_in_ms: o.int("retry_in_ms")?,
        error_message: o.string("error_message")?,
        error_kind: o.enumeration("error_kind", "ERROR_KIND_", |s| {
            ErrorKind::from_str_name(s).map(|k| k as i32)
        })?,
        running_tool_ids: o.strings("running_tool_ids")?,
        pending_tool_ids: o.strings("pending_tool_ids")?,
        iteration: o.int("iteration")?,
    })
}

fn read_summary(o: &Obj<'_>) -> Result<pb::ConversationSummary, JsonError> {
    Ok(pb::ConversationSummary {
        id: o.string("id")?,
        title: o.string("title")?,
        cwd: o.string("cwd")?,
        model: o.string("model")?,
        state: o.object("state")?.map(|s| read_state(&s)).transpose()?,
        created_at_ms: o.int("created_at_ms")?,
        updated_at_ms: o.int("updated_at_ms")?,
        message_count: o.int("message_count")?,
        mode: o.enumeration("mode", "PERMISSION_MODE_", |s| {
            PermissionMode::from_str_name(s).map(|k| k as i32)
        })?,
        usage: o.object("usage")?.map(|u| read_usage(&u)).transpose()?,
        last_seq: o.int("last_seq")?,
        additional_dirs: o.strings("additional_dirs")?,
        allow_rules: o.strings("allow_rules")?,
        mcp_servers: o.strings("mcp_servers")?,
        turn: o.int("turn")?,
        cost_usd: match o.get("cost_usd") {
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        },
        // What waits for a turn is not part of an export.
        queued: Vec::new(),
        context_window: o.int("context_window")?,
        parent_conversation_id: o.string("parent_conversation_id")?,
        forked_from: o.string("forked_from")?,
        forked_at_message: o.int("forked_at_message")?,
        continued_as: o.string("continued_as")?,
        context_warning: o.boolean("context_warning")?,
        context_tokens: o.int("context_tokens")?,
        // A budget's hold is not part of an export: the imported state is
        // the error it shows.
        budget_stop: None,
        continuing: o.boolean("continuing")?,
        sub_agent_parent_id: o.string("sub_agent_parent_id")?,
        // Exports written before sub-agents: a user's conversation.
        user_initiated: match o.get("user_initiated") {
            Some(Value::Bool(b)) => *b,
            _ => true,
        },
        agent_id: o.string("agent_id")?,
        sub_agents_usage: o
            .object("sub_agents_usage")?
            .map(|u| read_usage(&u))
            .transpose()?,
        sub_agents_cost_usd: match o.get("sub_agents_cost_usd") {
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        },
        usage_by_model: o
            .array("usage_by_model")?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                read_model_usage(&Obj::new(v, &format!("{}[{i}]", o.sub("usage_by_model")))?)
            })
            .collect::<Result<_, _>>()?,
        archived: o.boolean("archived")?,
    })
}

fn read_block(o: &Obj<'_>) -> Result<pb::ContentBlock, JsonError> {
    let block = match o.get("type") {
        None => None,
        Some(Value::String(t)) => Some(match t.as_str() {
            "text" => Block::Text(pb::TextBlock {
                text: o.string("text")?,
            }),
            "thinking" => Block::Thinking(pb::ThinkingBlock {
                thinking: o.string("thinking")?,
                signature: o.string("signature")?,
                redacted_data: o.string("redacted_data")?,
            }),
            "tool_use" => Block::ToolUse(pb::ToolUseBlock {
                id: o.string("id")?,
                name: o.string("name")?,
                input_json: o.string("input_json")?,
                // The daemon names the kind; it reads none from an import.
                kind: pb::ToolKind::Unspecified as i32,
            }),
            "tool_result" => Block::ToolResult(pb::ToolResultBlock {
                tool_use_id: o.string("tool_use_id")?,
                content: o.string("content")?,
                is_error: o.boolean("is_error")?,
                images: o.objects("images", read_image)?,
            }),
            "image" => Block::Image(read_image(o)?),
            "server_tool" => Block::ServerTool(pb::ServerToolBlock {
                json: o.string("json")?,
                // The daemon writes the line; it reads none from an import.
                summary: String::new(),
            }),
            other => return Err(o.err("type", format!("unknown content block type {other:?}"))),
        }),
        Some(other) => {
            return Err(o.err(
                "type",
                format!("expected a string, found {}", kind_of(other)),
            ));
        }
    };
    Ok(pb::ContentBlock { block })
}

fn read_image(o: &Obj<'_>) -> Result<pb::ImageBlock, JsonError> {
    let data = o.string("data_base64")?;
    Ok(pb::ImageBlock {
        media_type: o.string("media_type")?,
        size: o.int("size")?,
        sha256: o.string("sha256")?,
        width: o.int("width")?,
        height: o.int("height")?,
        data: base64::engine::general_purpose::STANDARD
            .decode(data.as_bytes())
            .map_err(|e| o.err("data_base64", format!("not base64: {e}")))?,
    })
}

fn read_message(o: &Obj<'_>) -> Result<pb::Message, JsonError> {
    Ok(pb::Message {
        seq: o.int("seq")?,
        role: o.enumeration("role", "ROLE_", |s| {
            Role::from_str_name(s).map(|k| k as i32)
        })?,
        content: o.objects("content", read_block)?,
        created_at_ms: o.int("created_at_ms")?,
        usage: o.object("usage")?.map(|u| read_usage(&u)).transpose()?,
        stop_reason: o.string("stop_reason")?,
        interrupted: o.boolean("interrupted")?,
        kind: o.enumeration("kind", "MESSAGE_KIND_", |s| {
            pb::MessageKind::from_str_name(s).map(|k| k as i32)
        })?,
    })
}

/// Reads one line of `agent export` back.
pub fn read_exported_conversation(value: &Value) -> Result<pb::ExportedConversation, JsonError> {
    let o = Obj::new(value, "")?;
    let conversation = o
        .object("conversation")?
        .map(|c| read_summary(&c))
        .transpose()?;
    if conversation.as_ref().is_none_or(|c| c.id.is_empty()) {
        return Err(o.err("conversation", "missing, or without an id"));
    }
    Ok(pb::ExportedConversation {
        conversation,
        messages: o.objects("messages", read_message)?,
        images: o.objects("images", read_image)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn readers_are_lenient_where_harmless() {
        let v = json!({
            "conversation": {
                "id": "01A",
                "created_at_ms": "1700000000000",
                "state": {"kind": "STATE_KIND_IDLE"},
                "mode": 2,
            },
            "messages": [{"seq": "1", "role": "ROLE_ASSISTANT", "usage": null}],
        });
        let e = read_exported_conversation(&v).unwrap();
        let c = e.conversation.unwrap();
        assert_eq!(c.created_at_ms, 1_700_000_000_000);
        assert_eq!(c.state.unwrap().kind, StateKind::Idle as i32);
        assert_eq!(c.mode, PermissionMode::Default as i32);
        assert_eq!(e.messages[0].role, Role::Assistant as i32);
        assert_eq!(e.messages[0].usage, None);
    }

    #[test]
    fn readers_say_where_the_document_is_wrong() {
        let bad = |v: Value| read_exported_conversation(&v).unwrap_err().to_string();
        assert_eq!(
            bad(json!([])),
            "(top level): expected an object, found an array"
        );
        assert_eq!(bad(json!({})), "conversation: missing, or without an id");
        assert_eq!(
            bad(json!({"conversation": {"id": "x", "state": {"kind": "sleeping"}}})),
            "conversation.state.kind: unknown value \"sleeping\""
        );
        assert_eq!(
            bad(json!({"conversation": {"id": "x"}, "messages": [{"seq": -1}]})),
            "messages[0].seq: -1 is out of range"
        );
        assert_eq!(
            bad(
                json!({"conversation": {"id": "x"}, "messages": [{"content": [{"type": "video"}]}]})
            ),
            "messages[0].content[0].type: unknown content block type \"video\""
        );
    }
}
