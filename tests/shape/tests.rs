//! The rules on small sources written here.

use crate::rules::{self, Finding, Rule, Source};
use crate::scan;
use crate::tree;

/// The findings in `text` as file `path` of module `module` of `agentd`.
fn findings(path: &str, module: &[&str], text: &str) -> Vec<Finding> {
    let module: Vec<String> = module.iter().map(|m| m.to_string()).collect();
    let shape = scan::scan(text, &module).unwrap();
    let src = Source {
        path,
        krate: "agentd",
        module: &module,
    };
    rules::file_findings(&src, &shape)
}

/// A function `name` of exactly `lines` lines.
fn function(name: &str, lines: usize) -> String {
    let body = "    let _ = 1;\n".repeat(lines - 2);
    format!("fn {name}() {{\n{body}}}\n")
}

/// `lines` lines of constants.
fn filler(lines: usize) -> String {
    (0..lines)
        .map(|i| format!("const C{i}: u8 = 0;\n"))
        .collect()
}

fn rules_of(found: &[Finding]) -> Vec<(Rule, String, usize)> {
    found
        .iter()
        .map(|f| (f.rule, f.key.clone(), f.size))
        .collect()
}

#[test]
fn a_file_of_601_lines_is_over_the_limit_and_one_of_600_is_not() {
    assert!(findings("a.rs", &["a"], &filler(600)).is_empty());
    let found = findings("a.rs", &["a"], &filler(601));
    assert_eq!(rules_of(&found), [(Rule::File, "a.rs".to_string(), 601)]);
    assert_eq!(found[0].at, "a.rs:1");
    assert!(
        found[0].what.contains("601 non-test lines"),
        "{}",
        found[0].what
    );
}

#[test]
fn a_function_of_101_lines_is_over_the_limit_and_one_of_100_is_not() {
    let text = format!("{}\n{}", function("short", 100), function("long", 101));
    let found = findings("a.rs", &["a"], &text);
    assert_eq!(
        rules_of(&found),
        [(Rule::Fn, "a.rs::long".to_string(), 101)]
    );
    assert_eq!(found[0].at, "a.rs:102");
}

#[test]
fn a_method_is_named_by_its_type_and_measured_from_its_visibility() {
    let body = "        let _ = 1;\n".repeat(99);
    let text = format!("struct S;\nimpl S {{\n    pub(crate) fn run(&self) {{\n{body}    }}\n}}\n");
    let found = findings("a.rs", &["a"], &text);
    assert_eq!(
        rules_of(&found),
        [(Rule::Fn, "a.rs::S::run".to_string(), 101)]
    );
    assert_eq!(found[0].at, "a.rs:3");
}

#[test]
fn a_nested_function_is_measured_on_its_own_and_within_its_outer_one() {
    let inner = function("inner", 101);
    let text = format!("fn outer() {{\n{inner}    let _ = 2;\n}}\n");
    let found = findings("a.rs", &["a"], &text);
    assert_eq!(
        rules_of(&found),
        [
            (Rule::Fn, "a.rs::outer".to_string(), 104),
            (Rule::Fn, "a.rs::outer::inner".to_string(), 101),
        ]
    );
}

#[test]
fn test_code_is_not_counted_or_measured() {
    let tests = format!(
        "#[cfg(test)]\nmod tests {{\n    use crate::llm::Fake;\n{}}}\n",
        function("a_long_test", 150)
    );
    let text = format!(
        "{}{tests}#[test]\n{}#[cfg(all(test, unix))]\n{}",
        filler(590),
        function("loose_test", 120),
        function("helper", 120)
    );
    let shape = scan::scan(&text, &["config".to_string()]).unwrap();
    assert_eq!(shape.lines, 590 + 154 + 121 + 121);
    assert_eq!(shape.non_test_lines, 590);
    assert!(findings("config.rs", &["config"], &text).is_empty());
}

#[test]
fn a_test_module_declared_without_a_body_marks_its_file_as_test_code() {
    let text = "mod real;\n#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod testkit;\n";
    let shape = scan::scan(text, &["llm".to_string()]).unwrap();
    assert_eq!(
        shape.test_mods,
        [vec!["llm".to_string(), "testkit".to_string()]]
    );
    assert_eq!(shape.non_test_lines, 1);
    assert_eq!(tree::module_of("llm/testkit.rs"), ["llm", "testkit"]);
    assert_eq!(tree::module_of("llm/mod.rs"), ["llm"]);
    assert!(tree::module_of("lib.rs").is_empty());
    assert!(tree::is_test_path("daemon/agentd/src/shells/tests.rs"));
    assert!(tree::is_test_path("daemon/core/tests/sim.rs"));
    assert!(!tree::is_test_path(
        "daemon/agentd/src/tools/test_runner.rs"
    ));
}

#[test]
fn config_may_not_use_llm_by_use_path_or_super() {
    let text = r#"use crate::llm::Provider;
use crate::{store::Record, llm::{self, sse}};
use super::models::Model;
fn f() -> crate::llm::Kind { super::llm::Kind::A }
fn g() -> String { format!("{}", crate::llm::name(super::super::x::y)) }
"#;
    let found = findings("src/config.rs", &["config"], text);
    let at: Vec<&str> = found.iter().map(|f| f.at.as_str()).collect();
    assert_eq!(
        at,
        [
            "src/config.rs:1",
            "src/config.rs:2",
            "src/config.rs:2",
            "src/config.rs:4",
            "src/config.rs:4",
            "src/config.rs:5"
        ]
    );
    assert!(
        found
            .iter()
            .all(|f| f.rule == Rule::Layers && f.key == "src/config.rs->llm")
    );
    assert!(
        found[0]
            .what
            .contains("`config` may not use `llm` (`crate::llm::Provider`)")
    );
    // From a file deeper in config, `super::super::llm` lands in llm too.
    let found = findings(
        "src/config/x.rs",
        &["config", "x"],
        "use super::super::llm::A;\n",
    );
    assert_eq!(found.len(), 1);
    // Its own submodules and allowed neighbours are fine.
    let text = "use super::store::Record;\nuse self::llm::Local;\n";
    assert!(findings("src/config.rs", &["config"], text).is_empty());
}

#[test]
fn a_client_may_not_depend_on_a_daemon_crate() {
    let members: Vec<String> = ["agent-proto", "agentd", "agentd-core", "agent-cli"]
        .map(String::from)
        .to_vec();
    let manifest = "[package]\nname = \"agent-cli\"\n\n[dependencies]\nagent-proto.workspace = true\nserde = \"1\"\ncoreutils = \"1\"\n\n[dev-dependencies]\ncore = { workspace = true, package = \"agentd-core\" }\n";
    let found = rules::crate_findings("client-cli/Cargo.toml", manifest, "agent-cli", &members);
    assert_eq!(
        rules_of(&found),
        [(
            Rule::Layers,
            "client-cli/Cargo.toml->agentd-core".to_string(),
            1
        )]
    );
    assert_eq!(found[0].at, "client-cli/Cargo.toml:10");
    let found = rules::crate_findings("new/Cargo.toml", "", "agent-new", &members);
    assert!(found[0].what.contains("has no layer"));
}

#[test]
fn a_daemon_task_started_outside_its_tracker_is_refused() {
    let text = r#"use tokio::task::spawn_blocking;
fn f(h: tokio::runtime::Handle) {
    tokio::spawn(async {});
    let _ = tokio::task::spawn_blocking(|| 1);
    h.spawn_blocking(|| 2);
    tokio::select! { _ = async { tokio::spawn(async {}) } => {} }
    let _ = std::process::Command::new("true").spawn();
    crate::tasks::spawn("named", async {});
}
#[cfg(test)]
mod tests {
    fn t() { tokio::spawn(async {}); }
}
"#;
    let found = findings("src/shells/x.rs", &["shells", "x"], text);
    let at: Vec<(&str, Rule)> = found.iter().map(|f| (f.at.as_str(), f.rule)).collect();
    assert_eq!(
        at,
        [
            ("src/shells/x.rs:1", Rule::Spawn),
            ("src/shells/x.rs:3", Rule::Spawn),
            ("src/shells/x.rs:4", Rule::Spawn),
            ("src/shells/x.rs:5", Rule::Spawn),
            ("src/shells/x.rs:6", Rule::Spawn),
        ]
    );
    assert!(
        found[1].what.contains("`tokio::spawn` starts a task"),
        "{}",
        found[1].what
    );
    // The tracker's own file, and other crates, may.
    assert!(findings("src/tasks.rs", &["tasks"], text).is_empty());
    let module = ["x".to_string()];
    let shape = scan::scan(text, &module).unwrap();
    let src = Source {
        path: "x.rs",
        krate: "agent-cli",
        module: &module,
    };
    assert!(rules::file_findings(&src, &shape).is_empty());
}
