//! Data-driven tests of `Policy::evaluate`, and properties of rule matching.
//!
//! Every case goes through one helper, [`check`]: rules (as `<action>
//! <rule>` text), a mode, a call, and the expected verdict (`allow`, `ask`
//! or `deny`, optionally followed by `~ text` that the reason must contain).
//!
//! The conversation works in `/w/p`, may also work in `/w/shared`, and the
//! runtime resolved these symbolic links: `link/passwd` → `/etc/passwd`,
//! `src/link.rs` → `/outside/x.rs`, `shared-link/a` → `/w/shared/a`.

#![expect(clippy::unwrap_used)]

use agentd_core::message::ToolCall;
use agentd_core::permission::{Action, Mode, Policy, Rule, Verdict, split_compound, suggest_rule};
use proptest::prelude::*;
use serde_json::{Value, json};

const CWD: &str = "/w/p";

fn policy(mode: Mode, rules: &[&str]) -> Policy {
    let mut p = Policy::new(mode, CWD);
    p.additional_dirs = vec!["/w/shared".to_string()];
    p.rules = rules
        .iter()
        .map(|r| {
            r.parse::<Rule>()
                .unwrap_or_else(|e| panic!("rule {r:?}: {e}"))
        })
        .collect();
    p.resolved_paths = [
        ("link/passwd", "/etc/passwd"),
        ("src/link.rs", "/outside/x.rs"),
        ("shared-link/a", "/w/shared/a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    p
}

fn tool(name: &str, input: Value) -> ToolCall {
    ToolCall {
        id: "t1".to_string(),
        name: name.to_string(),
        input,
    }
}

fn bash(command: &str) -> ToolCall {
    tool("bash", json!({ "command": command }))
}

fn write(path: &str) -> ToolCall {
    tool("write", json!({ "path": path, "content": "x" }))
}

fn edit(path: &str) -> ToolCall {
    tool(
        "edit",
        json!({ "path": path, "old_string": "a", "new_string": "b" }),
    )
}

fn read(path: &str) -> ToolCall {
    tool("read", json!({ "path": path }))
}

/// A patch touching `files` (each modified in place).
fn patch(files: &[&str]) -> ToolCall {
    let mut text = String::new();
    for f in files {
        text.push_str(&format!("--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-old\n+new\n"));
    }
    tool("patch", json!({ "patch": text }))
}

fn render(v: &Verdict) -> String {
    match v {
        Verdict::Allow => "allow".to_string(),
        Verdict::Ask(r) => format!("ask: {r}"),
        Verdict::Deny(r) => format!("deny: {r}"),
    }
}

/// Evaluates `call` under `rules` and `mode` and compares with `expect`:
/// `allow`, `ask`, `deny`, or `ask ~ text` / `deny ~ text` (the reason
/// contains `text`).
#[track_caller]
fn check(rules: &[&str], mode: Mode, call: ToolCall, expect: &str) {
    let verdict = policy(mode, rules).evaluate(&call);
    let got = render(&verdict);
    let (kind, needle) = match expect.split_once(" ~ ") {
        Some((k, n)) => (k, Some(n)),
        None => (expect, None),
    };
    let kind_ok = matches!(
        (&verdict, kind),
        (Verdict::Allow, "allow") | (Verdict::Ask(_), "ask") | (Verdict::Deny(_), "deny")
    );
    let needle_ok = needle.is_none_or(|n| got.contains(n));
    assert!(
        kind_ok && needle_ok,
        "\nrules: {rules:?}\nmode: {mode:?}\ncall: {} {}\nexpected: {expect}\ngot: {got}\n",
        call.name,
        call.input
    );
}

use Mode::{AcceptEdits, Bypass, Default, Plan, ReadOnly};

// ---------------------------------------------------------------------------
// Bash: exact and prefix rules.
// ---------------------------------------------------------------------------

#[test]
fn bash_exact_rules() {
    let r = &["allow bash(git status)"];
    check(r, Default, bash("git status"), "allow");
    check(r, Default, bash("  git   status  "), "allow");
    check(r, Default, bash("git\tstatus"), "allow");
    check(r, Default, bash("git status --short"), "ask");
    check(r, Default, bash("git"), "ask");
    check(r, Default, bash("git statuses"), "ask");
    // Quoting is compared as written: asking more is the safe side.
    check(r, Default, bash("git 'status'"), "ask");
    check(r, Default, bash("git diff"), "ask ~ `git diff`");
}

#[test]
fn bash_prefix_rules() {
    let r = &["allow bash(cargo test:*)"];
    check(r, Default, bash("cargo test"), "allow");
    check(r, Default, bash("cargo test -p agentd-core"), "allow");
    check(r, Default, bash("cargo  test  --  --nocapture"), "allow");
    check(r, Default, bash("cargo testing"), "ask");
    check(r, Default, bash("cargo test-all"), "ask");
    check(r, Default, bash("cargo build"), "ask");
    check(r, Default, bash("cargo"), "ask");
    check(
        &["allow bash(git:*)"],
        Default,
        bash("git push --force"),
        "allow",
    );
    check(&["allow bash(git:*)"], Default, bash("gitk"), "ask");
}

#[test]
fn bare_bash_rule_matches_every_command() {
    let r = &["allow bash"];
    check(
        r,
        Default,
        bash("rm -rf build && echo done > log.txt"),
        "allow",
    );
    check(r, Default, bash("echo $(date) `id`"), "allow");
    check(&["deny bash"], Default, bash("ls"), "deny");
    check(&["ask bash", "allow bash(ls)"], Default, bash("ls"), "ask");
}

// ---------------------------------------------------------------------------
// Compound commands: every part must be allowed.
// ---------------------------------------------------------------------------

#[test]
fn compound_commands_need_every_part() {
    let r = &["allow bash(git status)"];
    check(
        r,
        Default,
        bash("git status && rm -rf x"),
        "ask ~ `rm -rf x`",
    );
    check(r, Default, bash("git status; git status"), "allow");
    check(r, Default, bash("git status;git status;"), "allow");
    check(r, Default, bash("git status || rm -rf x"), "ask");
    check(r, Default, bash("git status | rm -rf x"), "ask");
    check(r, Default, bash("git status | git status"), "allow");
    check(r, Default, bash("git status |& git status"), "allow");
    check(r, Default, bash("git status & rm -rf x"), "ask");
    check(r, Default, bash("git status &"), "allow");
    check(r, Default, bash("(git status)"), "allow");
    check(r, Default, bash("(git status; rm -rf x)"), "ask");
    // A group's braces are not commands: bash runs only `git status`.
    check(r, Default, bash("{ git status; }"), "allow");
    check(
        r,
        Default,
        bash("{ git status; rm -rf x; }"),
        "ask ~ `rm -rf x`",
    );
    check(r, Default, bash("if git status; then rm -rf x; fi"), "ask");
    let r = &["allow bash(git status)", "allow bash(cargo test:*)"];
    check(r, Default, bash("git status && cargo test -p x"), "allow");
    check(
        r,
        Default,
        bash("git status && cargo test -p x && cargo publish"),
        "ask",
    );
}

#[test]
fn newlines_and_comments() {
    let r = &["allow bash(git status)"];
    check(
        r,
        Default,
        bash("git status\n rm -rf x"),
        "ask ~ `rm -rf x`",
    );
    check(r, Default, bash("git status\n\ngit status\n"), "allow");
    // A comment is not run: bash runs `git status` only.
    check(r, Default, bash("git status #&& rm -rf x"), "allow");
    check(r, Default, bash("git status # x\nrm -rf x"), "ask");
    // Not a comment: `#` inside a word.
    check(r, Default, bash("git status#&& rm -rf x"), "ask");
    // Line continuation joins the words.
    check(r, Default, bash("git \\\n status"), "allow");
}

#[test]
fn substitutions_are_parts() {
    let r = &["allow bash(echo:*)"];
    check(r, Default, bash("echo $(rm -rf x)"), "ask ~ `rm -rf x`");
    check(r, Default, bash("echo \"$(rm -rf x)\""), "ask ~ `rm -rf x`");
    check(r, Default, bash("echo `rm -rf x`"), "ask");
    check(r, Default, bash("echo \"`rm -rf x`\""), "ask");
    check(r, Default, bash("echo \"a $(rm -rf x) b\""), "ask");
    check(r, Default, bash("echo <(rm -rf x)"), "ask");
    check(r, Default, bash("echo ${x:-$(rm -rf x)}"), "ask");
    check(r, Default, bash("echo $((1 + 2))"), "ask");
    // Single quotes do not expand.
    check(r, Default, bash("echo '$(rm -rf x)'"), "allow");
    check(r, Default, bash("echo '`rm -rf x`'"), "allow");
    check(r, Default, bash("echo $HOME \"$USER\""), "allow");
    let r = &["allow bash(echo:*)", "allow bash(date)"];
    check(r, Default, bash("echo $(date)"), "allow");
    check(r, Default, bash("echo \"today: `date`\""), "allow");
    check(r, Default, bash("echo $(date; rm -rf x)"), "ask");
}

#[test]
fn quoting_tricks() {
    let r = &["allow bash(echo:*)"];
    check(r, Default, bash("echo \"a && rm -rf x\""), "allow");
    check(r, Default, bash("echo 'a; rm -rf x'"), "allow");
    check(r, Default, bash("echo a\\;rm -rf x"), "allow");
    // Escaped quotes are not quotes.
    check(r, Default, bash("echo \\\"a && rm -rf x\\\""), "ask");
    check(r, Default, bash("echo \\'a; rm -rf x\\'"), "ask");
    check(r, Default, bash("echo \"it's\" && rm -rf x"), "ask");
    check(r, Default, bash("echo \"a\\\" && rm -rf x\""), "allow");
    check(r, Default, bash("echo \"a\\\\\" && rm -rf x \"\""), "ask");
    // $'…' escapes its own quote: bash runs the rm on the next line.
    check(r, Default, bash("echo $'\\''\nrm -rf x\necho '"), "ask");
    check(r, Default, bash("echo $'a && rm -rf x'"), "allow");
    // Unreadable lines ask, whatever the rules.
    check(
        r,
        Default,
        bash("echo \"unterminated"),
        "ask ~ cannot be checked",
    );
    check(r, Default, bash("echo 'unterminated && rm -rf x"), "ask");
    check(r, Default, bash("echo $(rm -rf x"), "ask");
    check(r, Default, bash("echo `rm -rf x"), "ask");
    check(r, Default, bash("echo a)"), "ask");
    check(&["allow bash"], Default, bash("echo 'x"), "ask");
    check(&["deny bash"], Default, bash("echo 'x"), "deny");
}

#[test]
fn here_documents() {
    let r = &["allow bash(cat)"];
    check(r, Default, bash("cat <<EOF\nrm -rf x\nEOF"), "allow");
    check(r, Default, bash("cat <<EOF\n$(rm -rf x)\nEOF"), "ask");
    check(r, Default, bash("cat <<'EOF'\n$(rm -rf x)\nEOF"), "allow");
    check(r, Default, bash("cat <<EOF\nx\nEOF\nrm -rf x"), "ask");
    check(r, Default, bash("cat <<EOF\nit's\nEOF\nrm -rf x"), "ask");
    check(
        r,
        Default,
        bash("cat <<EOF\nno end"),
        "ask ~ not terminated",
    );
    check(r, Default, bash("cat <<< \"$(rm -rf x)\""), "ask");
}

#[test]
fn exact_rules_for_whole_compound_lines() {
    let r = &["allow bash(cargo fmt && cargo test)"];
    check(r, Default, bash("cargo fmt && cargo test"), "allow");
    check(r, Default, bash("cargo fmt  &&  cargo test "), "allow");
    check(
        r,
        Default,
        bash("cargo fmt && cargo test && rm -rf x"),
        "ask",
    );
    check(r, Default, bash("cargo fmt"), "ask");
    // A deny on a part still wins.
    let r = &["allow bash(cargo fmt && rm -rf x)", "deny bash(rm:*)"];
    check(r, Default, bash("cargo fmt && rm -rf x"), "deny");
}

// ---------------------------------------------------------------------------
// Redirections.
// ---------------------------------------------------------------------------

#[test]
fn redirections_to_files_are_writes() {
    let r = &["allow bash(cargo test:*)"];
    check(r, Default, bash("cargo test 2>&1"), "allow");
    check(r, Default, bash("cargo test >/dev/null 2>&1"), "allow");
    check(r, Default, bash("cargo test 2> /dev/null"), "allow");
    check(r, Default, bash("cargo test < input.txt"), "allow");
    check(
        r,
        Default,
        bash("cargo test > out.txt"),
        "ask ~ `> out.txt`",
    );
    check(r, Default, bash("cargo test >> out.txt"), "ask");
    check(r, Default, bash("cargo test 2> err.txt"), "ask");
    check(r, Default, bash("cargo test &> all.txt"), "ask");
    check(r, Default, bash("cargo test >& all.txt"), "ask");
    check(r, Default, bash("cargo test >out.txt"), "ask");
    check(r, Default, bash("cargo test | tee out.txt"), "ask");
    let r = &["allow bash(cargo test:*)", "allow write(out.txt)"];
    check(r, Default, bash("cargo test > out.txt"), "allow");
    check(r, Default, bash("cargo test > ./out.txt"), "allow");
    check(r, Default, bash("cargo test > other.txt"), "ask");
    check(r, Default, bash("cargo test > \"out.txt\""), "allow");
    let r = &["allow bash(cargo test:*)", "allow edit(logs/**)"];
    check(r, Default, bash("cargo test > logs/t.txt"), "allow");
    check(r, Default, bash("cargo test > logs/../../t.txt"), "ask");
    // After a `cd`, a relative target could be anywhere.
    let r = &[
        "allow bash(cd:*)",
        "allow bash(cargo test:*)",
        "allow edit(**)",
    ];
    check(r, Default, bash("cargo test > logs/t.txt"), "allow");
    check(r, Default, bash("cd /etc && cargo test > passwd"), "ask");
    check(
        r,
        Default,
        bash("cd /etc && cargo test > /w/p/t.txt"),
        "allow",
    );
    // A target with an expansion is not a known file.
    check(r, Default, bash("cargo test > $OUT"), "ask");
    check(r, Default, bash("cargo test > ~/t.txt"), "ask");
    check(r, Default, bash("cargo test > *.txt"), "ask");
}

#[test]
fn deny_rules_on_files_cover_redirections() {
    let r = &["allow bash", "deny write(/etc/**)"];
    check(r, Default, bash("echo x > /etc/passwd"), "deny");
    check(r, Default, bash("echo x >> /w/p/../../etc/passwd"), "deny");
    check(r, Default, bash("echo x > link/passwd"), "deny");
    check(r, Default, bash("echo x > out.txt"), "allow");
    // Might be /etc: ask rather than allow.
    check(r, Default, bash("echo x > $T"), "ask ~ cannot be checked");
    check(r, Default, bash("cd / && echo x > etc/passwd"), "ask");
    check(r, Bypass, bash("echo x > $T"), "ask");
    check(r, Bypass, bash("echo x > /etc/passwd"), "deny");
}

// ---------------------------------------------------------------------------
// Precedence: deny beats ask beats allow, whatever the order.
// ---------------------------------------------------------------------------

#[test]
fn deny_beats_ask_beats_allow() {
    for rules in [
        ["allow bash", "deny bash(rm:*)"],
        ["deny bash(rm:*)", "allow bash"],
    ] {
        check(&rules, Default, bash("rm -rf x"), "deny ~ deny bash(rm:*)");
        check(&rules, Default, bash("git status && rm -rf x"), "deny");
        check(&rules, Default, bash("echo $(rm -rf x)"), "deny");
        check(&rules, Default, bash("ls"), "allow");
    }
    check(
        &["deny bash(rm:*)", "allow bash(rm -rf x)"],
        Default,
        bash("rm -rf x"),
        "deny",
    );
    check(
        &["allow bash(rm -rf x)", "deny bash(rm -rf x)"],
        Default,
        bash("rm -rf x"),
        "deny",
    );
    check(
        &["ask bash(git push:*)", "allow bash(git:*)"],
        Default,
        bash("git push"),
        "ask ~ ask bash(git push:*)",
    );
    check(
        &["allow bash(git:*)", "ask bash(git push:*)"],
        Default,
        bash("git push"),
        "ask",
    );
    check(
        &["ask bash(git push:*)", "deny bash(git:*)"],
        Default,
        bash("git push"),
        "deny",
    );
    check(
        &["allow write(src/**)", "deny write(src/secret.rs)"],
        Default,
        write("src/secret.rs"),
        "deny",
    );
    check(
        &["allow write(src/**)", "ask write(src/*.lock)"],
        Default,
        write("src/a.lock"),
        "ask",
    );
    check(
        &["allow write", "deny write(*.env)"],
        Default,
        write(".env"),
        "deny",
    );
    check(
        &["deny write", "allow write(src/**)"],
        Default,
        write("src/a.rs"),
        "deny",
    );
}

#[test]
fn deny_rules_are_not_dodged_by_spelling() {
    let r = &["allow bash", "deny bash(rm:*)"];
    check(r, Default, bash("\"rm\" -rf x"), "deny");
    check(r, Default, bash("r''m -rf x"), "deny");
    check(r, Default, bash("\\rm -rf x"), "deny");
    check(r, Default, bash("/bin/rm -rf x"), "deny");
    check(r, Default, bash("$CMD -rf x"), "ask");
    check(r, Default, bash("`echo rm` -rf x"), "ask");
    check(r, Default, bash("rmdir x"), "allow");
    let r = &["allow bash", "deny bash(git push --force)"];
    check(r, Default, bash("git push --force"), "deny");
    check(r, Default, bash("git push \"--force\""), "deny");
    check(r, Default, bash("git push $F"), "ask");
    check(r, Default, bash("git push --force-with-lease"), "allow");
}

// ---------------------------------------------------------------------------
// Path rules.
// ---------------------------------------------------------------------------

#[test]
fn path_globs_relative_to_cwd() {
    let r = &["allow write(src/**)"];
    check(r, Default, write("src/a.rs"), "allow");
    check(r, Default, write("src/deep/er/a.rs"), "allow");
    check(r, Default, write("./src/a.rs"), "allow");
    check(r, Default, write("/w/p/src/a.rs"), "allow");
    check(r, Default, write("srcx/a.rs"), "ask");
    check(
        r,
        Default,
        write("a.rs"),
        "ask ~ write a.rs needs permission",
    );
    check(r, Default, write("src"), "ask");
    let r = &["allow edit(*.md)"];
    check(r, Default, edit("README.md"), "allow");
    check(r, Default, edit("docs/a.md"), "ask");
    check(
        &["allow edit(**/*.md)"],
        Default,
        edit("docs/a.md"),
        "allow",
    );
    check(
        &["allow edit(docs/)"],
        Default,
        edit("docs/x/a.md"),
        "allow",
    );
    check(&["allow write(/tmp/**)"], Default, write("/tmp/x"), "allow");
    check(&["allow write(/tmp/**)"], Default, write("/tmpx/x"), "ask");
}

#[test]
fn paths_escaping_cwd_are_not_allowed_by_relative_rules() {
    let r = &["allow write(**)"];
    check(r, Default, write("src/a.rs"), "allow");
    check(r, Default, write("../../etc/passwd"), "ask");
    check(r, Default, write("src/../../../etc/passwd"), "ask");
    check(r, Default, write("/etc/passwd"), "ask");
    check(r, Default, write("/w/pp/x"), "ask");
    // Symbolic links, as the runtime resolved them.
    check(r, Default, write("link/passwd"), "ask ~ /etc/passwd");
    check(r, Default, write("src/link.rs"), "ask");
    // `~` is not expanded here: unknown, never allowed by a path rule.
    check(r, Default, write("~/x"), "ask");
    check(
        &["allow write(/etc/**)"],
        Default,
        write("link/passwd"),
        "allow",
    );
}

#[test]
fn read_rules_cover_reads_and_searches() {
    let r = &["deny read(/etc/**)"];
    check(r, Default, read("/etc/passwd"), "deny");
    check(r, Default, read("link/passwd"), "deny");
    check(r, Default, read("../../etc/shadow"), "deny");
    check(r, Default, read("src/a.rs"), "allow");
    check(
        r,
        Default,
        tool("grep", json!({"pattern": "x", "path": "/etc"})),
        "deny",
    );
    check(
        r,
        Default,
        tool("glob", json!({"pattern": "*", "path": "/etc/ssl"})),
        "deny",
    );
    check(
        r,
        Default,
        tool("keyword_search", json!({"keywords": ["x"], "path": "/etc"})),
        "deny",
    );
    check(r, Default, tool("glob", json!({"pattern": "*"})), "allow");
    // A glob searches where its pattern starts, whatever its `path`.
    for pattern in [
        "/etc/ssl/*.pem",
        "../../etc/*",
        "sub/../../../etc/**/*.conf",
    ] {
        check(
            r,
            Default,
            tool("glob", json!({"pattern": pattern})),
            "deny",
        );
    }
    check(
        r,
        Default,
        tool("glob", json!({"pattern": "../etc/*", "path": "/"})),
        "deny",
    );
    check(
        r,
        Default,
        tool("glob", json!({"pattern": "src/**/*.rs"})),
        "allow",
    );
    check(r, Default, read("~/x"), "ask ~ cannot be checked");
    check(
        &["deny grep(secrets/**)"],
        Default,
        read("secrets/k"),
        "deny",
    );
    check(&["ask read(.env)"], Default, read(".env"), "ask");
    check(&["ask read(.env)"], Default, read("src/.env"), "allow");
    // A path rule on a reading tool says nothing about writes.
    check(&["allow read(**)"], Default, write("a.rs"), "ask");
}

#[test]
fn write_rules_cover_every_file_writing_tool() {
    let r = &["allow edit(src/**)"];
    check(r, Default, write("src/a.rs"), "allow");
    check(r, Default, edit("src/a.rs"), "allow");
    check(r, Default, patch(&["src/a.rs", "src/x/b.rs"]), "allow");
    check(
        r,
        Default,
        patch(&["src/a.rs", "docs/b.md"]),
        "ask ~ docs/b.md",
    );
    check(r, Default, patch(&["src/a.rs", "../x.rs"]), "ask");
    let r = &["allow edit(src/**)", "allow patch(docs/**)"];
    check(r, Default, patch(&["src/a.rs", "docs/b.md"]), "allow");
    let r = &["allow edit(src/**)", "deny write(src/gen/**)"];
    check(r, Default, patch(&["src/a.rs", "src/gen/b.rs"]), "deny");
    check(r, Default, edit("src/gen/b.rs"), "deny");
    // A bare rule is about its tool only.
    check(&["allow edit"], Default, edit("x"), "allow");
    check(&["allow edit"], Default, write("x"), "ask");
    // A patch without file headers is no file: path rules do not allow it.
    check(
        &["allow edit(**)"],
        Default,
        tool("patch", json!({"patch": "junk"})),
        "ask",
    );
    check(
        &["allow patch"],
        Default,
        tool("patch", json!({"patch": "junk"})),
        "allow",
    );
    check(
        &["allow edit(**)"],
        Default,
        tool("write", json!({"content": "x"})),
        "ask",
    );
}

// ---------------------------------------------------------------------------
// Modes.
// ---------------------------------------------------------------------------

#[test]
fn read_only_and_plan_modes_deny_mutating_tools() {
    for mode in [ReadOnly, Plan] {
        check(&[], mode, write("a.rs"), "deny ~ is not available in");
        check(&["allow write"], mode, write("a.rs"), "deny");
        check(&["allow bash"], mode, bash("git status"), "deny");
        check(&[], mode, edit("a.rs"), "deny ~ use request_mode_upgrade");
        check(&[], mode, patch(&["a.rs"]), "deny");
        check(
            &[],
            mode,
            tool("kill_shell", json!({"shell_id": "s"})),
            "deny",
        );
        check(&[], mode, tool("mcp_thing", json!({})), "deny");
        check(&[], mode, read("a.rs"), "allow");
        check(&[], mode, tool("think", json!({"thought": "x"})), "allow");
        check(
            &[],
            mode,
            tool("bash_output", json!({"shell_id": "s"})),
            "allow",
        );
        check(
            &[],
            mode,
            tool("request_mode_upgrade", json!({"reason": "fix"})),
            "ask ~ fix",
        );
        check(&["deny read(/etc/**)"], mode, read("/etc/passwd"), "deny");
    }
    check(
        &[],
        ReadOnly,
        write("a.rs"),
        "deny ~ write is not available in read_only mode; use request_mode_upgrade to ask for write access",
    );
    check(&[], Plan, write("a.rs"), "deny ~ plan mode");
}

#[test]
fn accept_edits_allows_edits_inside_the_working_directories() {
    let m = AcceptEdits;
    check(&[], m, edit("src/a.rs"), "allow");
    check(&[], m, write("new/file.txt"), "allow");
    check(&[], m, patch(&["a.rs", "src/b.rs"]), "allow");
    check(&[], m, edit("/w/shared/notes.md"), "allow");
    check(&[], m, edit("shared-link/a"), "allow");
    check(
        &[],
        m,
        edit("../other/x"),
        "ask ~ outside the working directories",
    );
    check(&[], m, edit("/etc/passwd"), "ask");
    check(&[], m, edit("link/passwd"), "ask");
    check(&[], m, edit("src/link.rs"), "ask");
    check(&[], m, patch(&["a.rs", "../../x.rs"]), "ask");
    check(&[], m, edit("~/x"), "ask");
    // Deny and ask rules still win.
    check(&["deny edit(secrets/**)"], m, edit("secrets/k"), "deny");
    check(&["ask edit(*.lock)"], m, write("Cargo.lock"), "ask");
    // Bash still asks; its file redirections count as edits.
    check(&[], m, bash("ls"), "ask");
    check(
        &["allow bash(echo:*)"],
        m,
        bash("echo x > notes.txt"),
        "allow",
    );
    check(
        &["allow bash(echo:*)"],
        Default,
        bash("echo x > notes.txt"),
        "ask",
    );
    check(
        &["allow bash(echo:*)"],
        m,
        bash("echo x > /tmp/notes.txt"),
        "ask",
    );
    check(&[], m, read("x"), "allow");
}

#[test]
fn asks_about_writes_outside_say_so() {
    let outside = |path: &str| format!("ask ~ outside the working directory: {path}");
    for m in [Default, AcceptEdits] {
        check(&[], m, write("/etc/motd"), &outside("/etc/motd"));
        check(&[], m, edit("../other/x"), &outside("/w/other/x"));
        // Where a link really goes is what counts, and what is shown.
        check(&[], m, edit("src/link.rs"), &outside("/outside/x.rs"));
        check(&[], m, patch(&["a.rs", "../../x.rs"]), &outside("/x.rs"));
        check(
            &["allow bash(echo:*)"],
            m,
            bash("echo x > /tmp/notes.txt"),
            &outside("/tmp/notes.txt"),
        );
        check(
            &["ask edit(/etc/**)"],
            m,
            write("/etc/motd"),
            &outside("/etc/motd"),
        );
    }
    // Inside the working or an additional directory it is not outside.
    let not_outside = |call: ToolCall| {
        let v = policy(Default, &[]).evaluate(&call);
        let reason = match &v {
            Verdict::Ask(r) => r.clone(),
            other => panic!("{other:?}"),
        };
        assert!(!reason.contains("outside"), "{reason}");
    };
    not_outside(write("src/a.rs"));
    not_outside(write("/w/shared/a"));
    not_outside(write("shared-link/a"));
    not_outside(bash("echo x > notes.txt"));
    // An unknown place is not called outside, and a deny stays a deny.
    not_outside(edit("~/x"));
    check(
        &["deny write(/etc/**)"],
        Default,
        write("/etc/motd"),
        "deny",
    );
}

#[test]
fn bypass_allows_all_but_deny_rules() {
    let m = Bypass;
    check(&[], m, bash("rm -rf /"), "allow");
    check(&[], m, write("/etc/passwd"), "allow");
    check(&[], m, tool("mcp_thing", json!({})), "allow");
    check(&["ask bash(git push:*)"], m, bash("git push"), "allow");
    check(&["deny bash(rm:*)"], m, bash("rm -rf x"), "deny");
    check(&["deny bash(rm:*)"], m, bash("ls && rm -rf x"), "deny");
    check(&["deny write(/etc/**)"], m, write("/etc/passwd"), "deny");
    // Only the policy's own limits remain: unreadable lines, mode upgrades.
    check(&[], m, bash("echo 'x"), "ask");
    check(
        &[],
        m,
        tool("request_mode_upgrade", json!({"reason": "r"})),
        "ask",
    );
}

#[test]
fn defaults_without_rules() {
    let m = Default;
    for ro in [
        "read",
        "glob",
        "grep",
        "keyword_search",
        "think",
        "bash_output",
    ] {
        check(
            &[],
            m,
            tool(ro, json!({"path": "x", "shell_id": "s"})),
            "allow",
        );
    }
    check(&[], m, write("a.rs"), "ask");
    check(&[], m, edit("a.rs"), "ask");
    check(&[], m, patch(&["a.rs"]), "ask");
    check(&[], m, bash("ls"), "ask ~ `ls`");
    check(&[], m, tool("bash", json!({})), "ask");
    check(&[], m, tool("kill_shell", json!({"shell_id": "s"})), "ask");
    check(
        &[],
        m,
        tool("mcp_thing", json!({})),
        "ask ~ mcp_thing needs permission",
    );
    check(
        &[],
        m,
        tool("request_mode_upgrade", json!({"reason": "r"})),
        "ask",
    );
    check(
        &["allow request_mode_upgrade"],
        m,
        tool("request_mode_upgrade", json!({})),
        "ask",
    );
    check(
        &["deny request_mode_upgrade"],
        m,
        tool("request_mode_upgrade", json!({})),
        "deny",
    );
    check(&["deny read"], m, read("x"), "deny");
    check(&["ask think"], m, tool("think", json!({})), "ask");
}

#[test]
fn other_tools_and_their_patterns() {
    let r = &["allow kill_shell(sh-1)"];
    check(
        r,
        Default,
        tool("kill_shell", json!({"shell_id": "sh-1"})),
        "allow",
    );
    check(
        r,
        Default,
        tool("kill_shell", json!({"shell_id": "sh-2"})),
        "ask",
    );
    check(
        &["allow mcp_thing"],
        Default,
        tool("mcp_thing", json!({})),
        "allow",
    );
    check(
        &["allow mcp_thing(x)"],
        Default,
        tool("mcp_thing", json!({"x": 1})),
        "ask",
    );
}

/// A web read asks unless a rule allows its host; the request names the
/// host so "always" can allow it alone.
#[test]
fn web_fetch_is_prompt_free_only_for_allowed_domains() {
    let fetch = |url: &str| tool("web_fetch", json!({ "url": url }));
    let r = &[
        "allow web_fetch(domain:docs.rs)",
        "allow web_fetch(domain:*.rust-lang.org)",
        "deny web_fetch(domain:evil.example)",
    ];
    check(r, Default, fetch("https://docs.rs/serde"), "allow");
    check(r, Default, fetch("https://DOCS.rs:443/x"), "allow");
    check(r, Default, fetch("https://doc.rust-lang.org/std"), "allow");
    check(
        r,
        Default,
        fetch("https://rust-lang.org/"),
        "ask ~ web_fetch from rust-lang.org needs permission",
    );
    check(r, Default, fetch("https://docs.rs.evil.example/"), "ask");
    check(r, Default, fetch("https://evil.example/"), "deny");
    check(r, ReadOnly, fetch("https://docs.rs/"), "allow");
    check(r, Plan, fetch("https://example.org/"), "ask");
    check(&[], Bypass, fetch("https://example.org/"), "allow");
    check(
        &["allow web_fetch"],
        Default,
        fetch("https://example.org/"),
        "allow",
    );
    let call = fetch("http://127.0.0.1:8080/page");
    assert_eq!(
        suggest_rule(&call, CWD).map(|r| r.to_string()).as_deref(),
        Some("web_fetch(domain:127.0.0.1)")
    );
    assert_eq!(suggest_rule(&fetch("not a url"), CWD), None);
}

#[test]
fn allow_all_is_the_default_policy() {
    let p = Policy::default();
    assert_eq!(p, Policy::allow_all());
    assert_eq!(p.mode, Mode::Bypass);
    assert_eq!(p.doom_loop, Action::Ask);
    for call in [bash("rm -rf x"), write("/etc/x"), tool("x", json!({}))] {
        assert_eq!(p.evaluate(&call), Verdict::Allow);
    }
    let p = Policy::new(Mode::Default, "/w/p");
    assert!(p.rules.is_empty());
    assert_eq!(p.doom_loop, Action::Ask);
    assert!(matches!(p.evaluate(&bash("ls")), Verdict::Ask(_)));
}

#[test]
fn paths_to_resolve_names_what_the_policy_looks_up() {
    assert_eq!(Policy::paths_to_resolve(&write("a/b")), ["a/b"]);
    assert_eq!(Policy::paths_to_resolve(&patch(&["x", "y"])), ["x", "y"]);
    assert_eq!(
        Policy::paths_to_resolve(&bash("echo > 'a b' 2>&1 >> c; cat > $X")),
        ["a b", "c"]
    );
    assert!(Policy::paths_to_resolve(&tool("think", json!({}))).is_empty());
}

// ---------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------

/// Pieces of command lines, including the tricky ones.
const WORDS: &[&str] = &[
    "git",
    "status",
    "cargo",
    "test",
    "rm",
    "-rf",
    "x",
    "echo",
    "ls",
    "cat",
    "date",
    "out.txt",
    "'a b'",
    "\"a && b\"",
    "\"$(rm x)\"",
    "$(git status)",
    "`rm x`",
    "'$(rm x)'",
    "$X",
    "#c",
    "a\\;b",
    "$'\\''",
    "/etc/passwd",
    "~/f",
    "cd",
];
/// Plain separators, then operators, then pieces that unbalance quotes or
/// open substitutions (rarer, so that many lines read and some are allowed).
const SEPARATORS: &[&str] = &[" "];
const OPERATORS: &[&str] = &[
    " && ",
    " || ",
    "; ",
    " | ",
    " & ",
    "\n",
    " > ",
    " 2>&1 ",
    " >> ",
    " < ",
    " >/dev/null ",
];
const TRICKY: &[&str] = &[
    " $( ", " ) ", " ( ", "'", "\"", "\\", " <<EOF\n", "\nEOF\n", "`", " $(echo ", ")",
];

fn separator_strategy() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        6 => prop::sample::select(SEPARATORS),
        3 => prop::sample::select(OPERATORS),
        1 => prop::sample::select(TRICKY),
    ]
}

fn command_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(WORDS), separator_strategy()), 1..8).prop_map(
        |pieces| {
            let mut s = String::new();
            for (word, sep) in pieces {
                s.push_str(word);
                s.push_str(sep);
            }
            s
        },
    )
}

/// Rules of every kind except exact rules for whole compound lines (which
/// allow exactly the line they name, parts included).
const RULES: &[&str] = &[
    "bash",
    "bash(git status)",
    "bash(git:*)",
    "bash(cargo test:*)",
    "bash(rm:*)",
    "bash(echo:*)",
    "bash(echo x)",
    "bash(ls)",
    "bash(cat)",
    "bash(date)",
    "bash(cd:*)",
    "write(out.txt)",
    "edit(**)",
    "write(/etc/**)",
    "read(**)",
    "write",
];

fn action_strategy() -> impl Strategy<Value = Action> {
    prop_oneof![Just(Action::Allow), Just(Action::Ask), Just(Action::Deny)]
}

fn rules_strategy(allow_heavy: bool) -> impl Strategy<Value = Vec<Rule>> {
    let action = if allow_heavy {
        prop_oneof![
            4 => Just(Action::Allow),
            1 => Just(Action::Ask),
            1 => Just(Action::Deny),
        ]
        .boxed()
    } else {
        action_strategy().boxed()
    };
    prop::collection::vec((0..RULES.len(), action), 0..6).prop_map(|rules| {
        rules
            .into_iter()
            .map(|(i, a)| Rule::parse(RULES[i], a).unwrap())
            .collect()
    })
}

fn mode_strategy() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Default),
        Just(Mode::AcceptEdits),
        Just(Mode::Bypass),
        Just(Mode::ReadOnly),
        Just(Mode::Plan),
    ]
}

fn with_rules(mode: Mode, rules: Vec<Rule>) -> Policy {
    let mut p = policy(mode, &[]);
    p.rules = rules;
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Rule order never matters.
    #[test]
    fn shuffling_rules_never_changes_the_verdict(
        rules in rules_strategy(false)
            .prop_flat_map(|r| (Just(r.clone()), Just(r).prop_shuffle())),
        command in command_strategy(),
        path in prop::sample::select(vec!["src/a.rs", "out.txt", "/etc/passwd", "../x", "link/passwd", "~/x"]),
        mode in mode_strategy(),
    ) {
        let (rules, shuffled) = rules;
        let a = with_rules(mode, rules);
        let b = with_rules(mode, shuffled);
        for call in [bash(&command), write(path), read(path), patch(&[path, "src/b.rs"])] {
            prop_assert_eq!(a.evaluate(&call), b.evaluate(&call));
        }
    }

    /// A compound line is allowed only if every part is: if one part of
    /// `split_compound(c)`, run alone, would not be allowed, `c` is not.
    /// An unreadable line is never allowed.
    #[test]
    fn a_part_not_allowed_means_the_line_is_not_allowed(
        command in command_strategy(),
        rules in rules_strategy(true),
        mode in prop_oneof![Just(Mode::Default), Just(Mode::AcceptEdits), Just(Mode::Bypass)],
    ) {
        let p = with_rules(mode, rules);
        let verdict = p.evaluate(&bash(&command));
        match split_compound(&command) {
            Err(_) => prop_assert_ne!(verdict, Verdict::Allow),
            Ok(parts) => {
                for part in parts {
                    if p.evaluate(&bash(&part)) != Verdict::Allow {
                        prop_assert_ne!(
                            &verdict, &Verdict::Allow,
                            "part {:?} of {:?} is not allowed alone", part, command
                        );
                    }
                }
            }
        }
    }

    /// A deny rule that matches a part denies the line, wherever it sits
    /// and whatever else allows it.
    #[test]
    fn a_denied_part_denies_the_line(
        command in command_strategy(),
        rules in rules_strategy(true),
    ) {
        let mut rules = rules;
        rules.push(Rule::parse("bash(rm:*)", Action::Deny).unwrap());
        let p = with_rules(Mode::Default, rules);
        if let Ok(parts) = split_compound(&command) {
            let has_rm = parts.iter().any(|part| part == "rm" || part.starts_with("rm "));
            if has_rm {
                prop_assert!(matches!(p.evaluate(&bash(&command)), Verdict::Deny(_)));
            }
        }
    }

    /// The suggested rule, added, allows the call it was suggested for.
    #[test]
    fn the_suggested_rule_allows_its_call(
        command in command_strategy(),
        path in prop::sample::select(vec!["src/a.rs", "a.md", "src/x/y/z.rs", "/tmp/x", "../q/r", "a[1].rs", "we(ird.rs"]),
    ) {
        for call in [bash(&command), edit(path), patch(&[path, "src/b.rs"])] {
            if let Some(rule) = suggest_rule(&call, CWD) {
                let mut p = Policy::new(Mode::Default, CWD);
                p.rules.push(rule.clone());
                prop_assert_eq!(
                    p.evaluate(&call), Verdict::Allow,
                    "rule {} for {} {}", rule, call.name, call.input
                );
                prop_assert_eq!(Rule::parse(&rule.to_string(), Action::Allow).unwrap(), rule);
            }
        }
    }

    /// Reading arbitrary text never panics.
    #[test]
    fn arbitrary_text_is_read_without_panicking(command in ".{0,64}", rule in ".{0,24}") {
        let _ = split_compound(&command);
        let _ = Rule::parse(&rule, Action::Allow);
        let p = with_rules(Mode::Default, vec![]);
        let _ = p.evaluate(&bash(&command));
        let _ = suggest_rule(&bash(&command), CWD);
    }

    /// Rules print back to what they were read from.
    #[test]
    fn rules_round_trip(i in 0..RULES.len(), action in action_strategy()) {
        let rule = Rule::parse(RULES[i], action).unwrap();
        prop_assert_eq!(rule.to_string(), RULES[i]);
        prop_assert_eq!(rule.spec().parse::<Rule>().unwrap(), rule);
    }
}

#[test]
#[should_panic(expected = "expected: allow")]
fn check_reports_a_mismatch() {
    check(&[], Default, bash("ls"), "allow");
}

#[test]
#[ignore = "prints how the generated commands read"]
fn generated_commands_statistics() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::default();
    let (mut ok, mut err, mut allowed) = (0, 0, 0);
    let p = policy(
        Default,
        &[
            "allow bash(git:*)",
            "allow bash(echo:*)",
            "allow bash(ls)",
            "allow bash(cat)",
            "allow write(out.txt)",
        ],
    );
    for _ in 0..2000 {
        let c = command_strategy().new_tree(&mut runner).unwrap().current();
        match split_compound(&c) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
        if p.evaluate(&bash(&c)) == Verdict::Allow {
            allowed += 1;
            if allowed < 15 {
                println!("allowed: {c:?} -> {:?}", split_compound(&c));
            }
        }
    }
    println!("readable {ok}, unreadable {err}, allowed {allowed}");
}

#[test]
fn mcp_wildcards_are_only_for_mcp_names() {
    let r: Rule = "allow mcp__github__*".parse().unwrap();
    assert!(r.names("mcp__github__create_issue"));
    assert!(!r.names("mcp__github"));
    assert!(!r.names("mcp__gitlab__create_issue"));
    let all: Rule = "deny mcp__*".parse().unwrap();
    assert!(all.names("mcp__a__b"));
    assert!(!all.names("read"));
    assert!("allow bash*".parse::<Rule>().is_err());
    assert!("allow mcp__a*b".parse::<Rule>().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A web_fetch domain rule allows exactly the hosts it names, whatever
    /// the rest of the URL says: `domain:H` that host, `domain:*.H` every
    /// host below it, never `H` itself nor a host that only ends like it.
    #[test]
    fn domain_rules_allow_exactly_the_hosts_they_name(
        host in "[a-z][a-z0-9-]{0,8}(\\.[a-z][a-z0-9-]{0,8}){1,2}",
        sub in "[a-z][a-z0-9]{0,6}",
        port in prop::option::of(1u16..),
        path in "(/[a-zA-Z0-9._@:-]{0,8}){0,3}",
        query in prop::option::of("[a-z=&@/]{0,10}"),
    ) {
        let url = |h: &str| {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let query = query.as_ref().map(|q| format!("?{q}")).unwrap_or_default();
            format!("https://{h}{port}{path}{query}")
        };
        let fetch = |h: &str| tool("web_fetch", json!({ "url": url(h) }));
        let verdict = |rule: &str, h: &str| policy(Mode::Default, &[rule]).evaluate(&fetch(h));
        let exact = format!("allow web_fetch(domain:{host})");
        let below = format!("allow web_fetch(domain:*.{host})");
        let subdomain = format!("{sub}.{host}");
        let lookalike = format!("{sub}{host}");
        prop_assert_eq!(verdict(&exact, &host), Verdict::Allow);
        prop_assert!(matches!(verdict(&exact, &subdomain), Verdict::Ask(_)));
        prop_assert_eq!(verdict(&below, &subdomain), Verdict::Allow);
        prop_assert!(matches!(verdict(&below, &host), Verdict::Ask(_)));
        prop_assert!(matches!(verdict(&below, &lookalike), Verdict::Ask(_)));
        prop_assert_eq!(agentd_core::permission::url_host(&url(&host)), Some(host.clone()));
    }
}
