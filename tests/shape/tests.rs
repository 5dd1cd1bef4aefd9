//! The rules on small sources written here, and the ratchet on small lists.

use crate::allow;
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

fn finding(rule: Rule, key: &str, size: usize) -> Finding {
    Finding {
        rule,
        key: key.to_string(),
        size,
        at: format!("{key}:1"),
        what: format!("{size} lines"),
    }
}

#[test]
fn an_allowed_entry_may_shrink_but_not_grow() {
    let list = "# a comment\nfile a.rs 700   # why\nlayers b.rs->llm 2\n";
    let entries = allow::parse(list).unwrap();
    let ok = allow::group(vec![
        finding(Rule::File, "a.rs", 650),
        finding(Rule::Layers, "b.rs->llm", 1),
        finding(Rule::Layers, "b.rs->llm", 1),
    ]);
    assert!(allow::check(&ok, &entries).is_empty());
    let grown = allow::group(vec![
        finding(Rule::File, "a.rs", 701),
        finding(Rule::Layers, "b.rs->llm", 1),
        finding(Rule::Layers, "b.rs->llm", 1),
        finding(Rule::Layers, "b.rs->llm", 1),
    ]);
    let problems = allow::check(&grown, &entries);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].starts_with(
        "a.rs:1: file rule: 701 lines; grown past the 700 that .ci/shape-allow.txt:2 allows"
    ));
    assert!(problems[1].contains("3 names across the layer, grown past the 2"));
}

#[test]
fn an_entry_that_no_longer_breaks_its_rule_must_be_removed() {
    let entries = allow::parse("fn a.rs::f 120\nfile a.rs 700\n").unwrap();
    let groups = allow::group(vec![finding(Rule::File, "a.rs", 700)]);
    let problems = allow::check(&groups, &entries);
    assert_eq!(
        problems,
        [
            ".ci/shape-allow.txt:1: `fn a.rs::f 120` is within 100 lines now (or is gone): remove this line (the allow-list only shrinks)"
        ]
    );
}

#[test]
fn anything_not_listed_fails() {
    let groups = allow::group(vec![finding(Rule::Fn, "a.rs::f", 101)]);
    let problems = allow::check(&groups, &[]);
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].contains("not on .ci/shape-allow.txt"),
        "{}",
        problems[0]
    );
}

#[test]
fn the_list_it_writes_reads_back_as_the_same_entries() {
    let groups = allow::group(vec![
        finding(Rule::Layers, "b.rs->llm", 1),
        finding(Rule::File, "a.rs", 700),
        finding(Rule::Fn, "a.rs::f", 101),
        finding(Rule::Fn, "a.rs::f", 130),
    ]);
    let text = allow::render(&groups);
    let entries = allow::parse(&text).unwrap();
    let read: Vec<(Rule, &str, usize)> = entries
        .iter()
        .map(|e| (e.rule, e.key.as_str(), e.size))
        .collect();
    assert_eq!(
        read,
        [
            (Rule::File, "a.rs", 700),
            (Rule::Fn, "a.rs::f", 130),
            (Rule::Layers, "b.rs->llm", 1)
        ]
    );
    assert!(allow::check(&groups, &entries).is_empty());
    assert!(allow::parse("file a.rs\n").is_err());
    assert!(allow::parse("file a.rs 1\nfile a.rs 2\n").is_err());
}
