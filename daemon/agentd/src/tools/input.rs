//! Turning the model's JSON into a tool's typed input.
//!
//! serde alone reports a wrong type as "invalid type: string, expected u64"
//! without saying which field, which leaves the model guessing. So the input
//! is first checked against the very schema the model was given (required
//! fields, unknown fields, each field's type), and only then handed to serde.
//! The schema stays the single description of the input.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::ToolError;

/// Parses `input` for `tool` after checking it against `schema`.
pub(crate) fn parse<T: DeserializeOwned>(
    tool: &str,
    schema: &Value,
    input: Value,
) -> Result<T, ToolError> {
    let mut object = match input {
        Value::Object(map) => map,
        // The core stores arguments that were not valid JSON as a string.
        Value::String(raw) => {
            let snippet: String = raw.chars().take(200).collect();
            return Err(ToolError::new(format!(
                "{tool}: the arguments were not valid JSON, so they could not be read \
                 (received: {snippet}). Send the input as one JSON object."
            )));
        }
        Value::Null => {
            return Err(ToolError::new(format!(
                "{tool}: the input is missing; send a JSON object"
            )));
        }
        other => {
            return Err(ToolError::new(format!(
                "{tool}: the input must be a JSON object, not {}",
                kind(&other)
            )));
        }
    };
    check(tool, schema, &mut object)?;
    serde_json::from_value(Value::Object(object))
        .map_err(|e| ToolError::new(format!("{tool}: {e}")))
}

fn check(tool: &str, schema: &Value, object: &mut Map<String, Value>) -> Result<(), ToolError> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();

    // Models often spell "not given" as null; treat it so for optional fields.
    object.retain(|key, value| !value.is_null() || required.contains(&key.as_str()));

    for name in &required {
        if !object.contains_key(*name) {
            return Err(ToolError::new(format!("{tool}: missing field `{name}`")));
        }
    }
    for (key, value) in object.iter() {
        let Some(prop) = properties.get(key) else {
            let expected: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
            return Err(ToolError::new(format!(
                "{tool}: unknown field `{key}`; expected one of {}",
                expected.join(", ")
            )));
        };
        check_type(tool, key, prop, value)?;
    }
    Ok(())
}

fn check_type(tool: &str, field: &str, prop: &Value, value: &Value) -> Result<(), ToolError> {
    let wrong = |expected: &str| {
        ToolError::new(format!(
            "{tool}: field `{field}` must be {expected}, not {}",
            kind(value)
        ))
    };
    match prop.get("type").and_then(Value::as_str) {
        Some("string") => {
            let Some(s) = value.as_str() else {
                return Err(wrong("a string"));
            };
            if let Some(allowed) = prop.get("enum").and_then(Value::as_array)
                && !allowed.iter().any(|a| a.as_str() == Some(s))
            {
                let names: Vec<String> = allowed
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|a| format!("\"{a}\""))
                    .collect();
                return Err(ToolError::new(format!(
                    "{tool}: field `{field}` must be one of {}, not \"{s}\"",
                    names.join(", ")
                )));
            }
        }
        Some("integer") if value.as_u64().is_none() => return Err(wrong("a non-negative integer")),
        Some("boolean") if !value.is_boolean() => return Err(wrong("true or false")),
        Some("array") => {
            let Some(items) = value.as_array() else {
                return Err(wrong("an array"));
            };
            if prop.pointer("/items/type").and_then(Value::as_str) == Some("string")
                && let Some(bad) = items.iter().find(|i| !i.is_string())
            {
                return Err(ToolError::new(format!(
                    "{tool}: field `{field}` must be an array of strings, but it contains {}",
                    kind(bad)
                )));
            }
        }
        _ => {}
    }
    Ok(())
}

/// How a JSON value is described in error messages: its type and, when
/// short, the value itself, so the model sees exactly what it sent.
fn kind(value: &Value) -> String {
    let name = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|i| i < 0) => "a negative integer",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let text = value.to_string();
    if matches!(value, Value::Null | Value::Array(_) | Value::Object(_)) || text.len() > 40 {
        name.to_string()
    } else {
        format!("{name} ({text})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        name: String,
        count: Option<u64>,
        #[serde(default)]
        flag: bool,
        mode: Option<String>,
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer"},
                "flag": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["a", "b"]}
            },
            "required": ["name"]
        })
    }

    fn err(input: Value) -> String {
        parse::<Sample>("t", &schema(), input).unwrap_err().0
    }

    #[test]
    fn accepts_valid_input_and_nulls_for_optional_fields() {
        let s: Sample = parse(
            "t",
            &schema(),
            json!({"name": "x", "count": 3, "flag": null}),
        )
        .unwrap();
        assert_eq!(s.name, "x");
        assert_eq!(s.count, Some(3));
        assert!(!s.flag);
        assert!(s.mode.is_none());
    }

    #[test]
    fn names_the_field_in_errors() {
        assert_eq!(err(json!({})), "t: missing field `name`");
        assert_eq!(
            err(json!({"name": null})),
            "t: field `name` must be a string, not null"
        );
        assert_eq!(
            err(json!({"name": "x", "count": "3"})),
            "t: field `count` must be a non-negative integer, not a string (\"3\")"
        );
        assert_eq!(
            err(json!({"name": "x", "count": -1})),
            "t: field `count` must be a non-negative integer, not a negative integer (-1)"
        );
        assert!(err(json!({"name": "x", "zzz": 1})).starts_with("t: unknown field `zzz`"));
        assert!(err(json!({"name": "x", "mode": "c"})).contains("must be one of \"a\", \"b\""));
        assert!(err(json!("{broken")).contains("not valid JSON"));
        assert!(err(json!(7)).contains("must be a JSON object"));
    }
}
