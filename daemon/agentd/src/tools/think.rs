//! `think`: a scratchpad. The thought is already in the transcript as the
//! call's input, so the tool only acknowledges it.

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolError, ToolOutput, input};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[expect(dead_code)]
    thought: String,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"thought": {"type": "string"}},
        "required": ["thought"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Think.name().to_string(),
        description: "Think through a plan or a tricky step without doing anything.".to_string(),
        input_schema: schema(),
    }
}

pub(crate) fn run(input: Value) -> Result<ToolOutput, ToolError> {
    let _: Input = input::parse(Tool::Think.name(), &schema(), input)?;
    Ok(ToolOutput::ok("Thought recorded.", "thought"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledges() {
        assert_eq!(
            run(json!({"thought": "hm"})).unwrap().content,
            "Thought recorded."
        );
        assert!(run(json!({})).is_err());
    }
}
