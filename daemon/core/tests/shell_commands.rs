//! Real-world command lines through the permission policy: for each, the
//! parts the rules judge, the verdict under some rules, and the rule an
//! "allow always" answer would add. Then, for every line, a deny rule on
//! any command in it denies the whole line.
//!
//! The conversation works in `/w/p`.

use agentd_core::message::ToolCall;
use agentd_core::permission::{Mode, Policy, Rule, Verdict, split_compound, suggested_rule};
use serde_json::json;

const CWD: &str = "/w/p";

struct Case {
    command: &'static str,
    /// What `split_compound` lists: the commands, then the file writes,
    /// then the arithmetic.
    parts: &'static [&'static str],
    /// Rules in force, as `<action> <rule>`.
    rules: &'static [&'static str],
    /// `allow`, or `ask`/`deny` optionally followed by `~ text` the reason
    /// contains.
    verdict: &'static str,
    /// The rule "allow always" adds.
    suggested: &'static str,
}

const CASES: &[Case] = &[
    // Loops over files.
    Case {
        command: "for f in *.txt; do wc -l \"$f\"; done",
        parts: &["wc -l \"$f\""],
        rules: &["allow bash(wc:*)"],
        verdict: "allow",
        suggested: "bash(for f in *.txt ; do wc -l \"$f\" ; done)",
    },
    Case {
        command: "for f in *.txt; do wc -l \"$f\"; done",
        parts: &["wc -l \"$f\""],
        rules: &[],
        verdict: "ask ~ bash `wc -l \"$f\"` needs permission",
        suggested: "bash(for f in *.txt ; do wc -l \"$f\" ; done)",
    },
    Case {
        command: "for f in src/*.rs; do\n  echo \"== $f\"\n  head -n 5 \"$f\"\ndone",
        parts: &["echo \"== $f\"", "head -n 5 \"$f\""],
        rules: &["allow bash(echo:*)", "allow bash(head:*)"],
        verdict: "allow",
        suggested: "bash(for f in src/*.rs ; do echo \"== $f\" ; head -n 5 \"$f\" ; done)",
    },
    Case {
        command: "for f in *.py; do python -m py_compile \"$f\" || echo \"bad: $f\" >> errors.txt; done",
        parts: &[
            "python -m py_compile \"$f\"",
            "echo \"bad: $f\"",
            ">> errors.txt",
        ],
        rules: &["allow bash(python:*)", "allow bash(echo:*)"],
        verdict: "ask ~ the redirection `>> errors.txt` writes a file",
        suggested: "bash(for f in *.py ; do python -m py_compile \"$f\" || echo \"bad: $f\" >>errors.txt ; done)",
    },
    Case {
        command: "for p in agentd-core agentd; do cargo test -p \"$p\"; done",
        parts: &["cargo test -p \"$p\""],
        rules: &[],
        verdict: "ask ~ `cargo test -p \"$p\"`",
        suggested: "bash(cargo test:*)",
    },
    Case {
        command: "for d in */; do [ -d \"$d/.git\" ] && git -C \"$d\" pull; done",
        parts: &["[ -d \"$d/.git\" ]", "git -C \"$d\" pull"],
        rules: &["allow bash([:*)", "allow bash(git:*)"],
        verdict: "allow",
        suggested: "bash(for d in */ ; do [ -d \"$d/.git\" ] && git -C \"$d\" pull ; done)",
    },
    Case {
        command: "for i in $(seq 1 3); do echo $i; done",
        parts: &["seq 1 3", "echo $i"],
        rules: &["allow bash(seq:*)", "allow bash(echo:*)"],
        verdict: "allow",
        suggested: "bash(for i in $(seq 1 3) ; do echo $i ; done)",
    },
    Case {
        command: "for ((i = 1; i <= 3; i++)); do echo \"run $i\"; done",
        parts: &["echo \"run $i\"", "((i = 1; i <= 3; i++))"],
        rules: &["allow bash(echo:*)"],
        verdict: "ask ~ the arithmetic `((i = 1; i <= 3; i++))` needs permission",
        suggested: "bash(for ((i = 1; i <= 3; i++)) ; do echo \"run $i\" ; done)",
    },
    // A loop over a variable that programs read changes what runs.
    Case {
        command: "for PATH in /tmp/evil; do cargo build; done",
        parts: &["for PATH in /tmp/evil", "cargo build"],
        rules: &["allow bash(cargo build:*)"],
        verdict: "ask ~ `for PATH in /tmp/evil`",
        suggested: "bash(for PATH in /tmp/evil ; do cargo build ; done)",
    },
    // While-read loops.
    Case {
        command: "while read -r line; do echo \"$line\"; done < files.txt",
        parts: &["read -r line", "echo \"$line\""],
        rules: &["allow bash(read:*)", "allow bash(echo:*)"],
        verdict: "allow",
        suggested: "bash(while read -r line ; do echo \"$line\" ; done <files.txt)",
    },
    Case {
        command: "git ls-files | while read -r f; do wc -c \"$f\"; done",
        parts: &["git ls-files", "read -r f", "wc -c \"$f\""],
        rules: &["allow bash(git ls-files)", "allow bash(read:*)"],
        verdict: "ask ~ `wc -c \"$f\"`",
        suggested: "bash(git ls-files | while read -r f ; do wc -c \"$f\" ; done)",
    },
    Case {
        command: "while true; do curl -s localhost:8080/health && break; sleep 1; done",
        parts: &["true", "curl -s localhost:8080/health", "break", "sleep 1"],
        rules: &[
            "allow bash(true)",
            "allow bash(curl:*)",
            "allow bash(break)",
            "allow bash(sleep:*)",
        ],
        verdict: "allow",
        suggested: "bash(while true ; do curl -s localhost:8080/health && break ; sleep 1 ; done)",
    },
    Case {
        command: "until pg_isready -h localhost; do sleep 1; done",
        parts: &["pg_isready -h localhost", "sleep 1"],
        rules: &["allow bash(sleep:*)"],
        verdict: "ask ~ `pg_isready -h localhost`",
        suggested: "bash(until pg_isready -h localhost ; do sleep 1 ; done)",
    },
    // If, tests and case.
    Case {
        command: "if [ -f Cargo.toml ]; then cargo build; else make; fi",
        parts: &["[ -f Cargo.toml ]", "cargo build", "make"],
        rules: &["allow bash([:*)", "allow bash(cargo build:*)"],
        verdict: "ask ~ `make`",
        suggested: "bash(if [ -f Cargo.toml ] ; then cargo build ; else make ; fi)",
    },
    Case {
        command: "if test -d target; then rm -rf target; fi",
        parts: &["test -d target", "rm -rf target"],
        rules: &[
            "allow bash(test:*)",
            "allow bash(rm -rf target)",
            "deny bash(rm:*)",
        ],
        verdict: "deny ~ deny bash(rm:*)",
        suggested: "bash(if test -d target ; then rm -rf target ; fi)",
    },
    Case {
        command: "[[ -n \"$CI\" ]] && cargo test --locked",
        parts: &["cargo test --locked"],
        rules: &["allow bash(cargo test:*)"],
        verdict: "allow",
        suggested: "bash(cargo test:*)",
    },
    Case {
        command: "! grep -q TODO src/main.rs",
        parts: &["grep -q TODO src/main.rs"],
        rules: &["allow bash(grep:*)"],
        verdict: "allow",
        suggested: "bash(! grep -q TODO src/main.rs)",
    },
    Case {
        command: "case \"$1\" in\n  start) ./run.sh ;;\n  stop) pkill -f run.sh ;;\n  *) echo \"usage\" ;;\nesac",
        parts: &["./run.sh", "pkill -f run.sh", "echo \"usage\""],
        rules: &["allow bash(./run.sh)", "allow bash(echo:*)"],
        verdict: "ask ~ `pkill -f run.sh`",
        suggested: "bash(case \"$1\" in start ) ./run.sh ;; stop ) pkill -f run.sh ;; * ) echo \"usage\" ;; esac)",
    },
    // Groups, subshells, functions.
    Case {
        command: "(cd web && npm ci && npm run build)",
        parts: &["cd web", "npm ci", "npm run build"],
        rules: &[
            "allow bash(cd:*)",
            "allow bash(npm ci)",
            "allow bash(npm run:*)",
        ],
        verdict: "allow",
        suggested: "bash(( cd web && npm ci && npm run build ))",
    },
    Case {
        command: "{ echo start; make; echo end; } 2>&1 | tee build.log",
        parts: &["echo start", "make", "echo end", "tee build.log"],
        rules: &["allow bash(echo:*)", "allow bash(make)"],
        verdict: "ask ~ `tee build.log`",
        suggested: "bash({ echo start ; make ; echo end ; } 2>&1 | tee build.log)",
    },
    Case {
        command: "npm test || { echo \"tests failed\"; exit 1; }",
        parts: &["npm test", "echo \"tests failed\"", "exit 1"],
        rules: &["allow bash(npm test:*)", "allow bash(echo:*)"],
        verdict: "ask ~ `exit 1`",
        suggested: "bash(npm test || { echo \"tests failed\" ; exit 1 ; })",
    },
    Case {
        command: "build() { cargo build -p \"$1\"; }; build agentd",
        parts: &["cargo build -p \"$1\"", "build agentd"],
        rules: &["allow bash(cargo build:*)"],
        verdict: "ask ~ `build agentd`",
        suggested: "bash(build () { cargo build -p \"$1\" ; } ; build agentd)",
    },
    // Pipelines, substitutions, redirections.
    Case {
        command: "cd daemon && cargo test",
        parts: &["cd daemon", "cargo test"],
        rules: &["allow bash(cd:*)", "allow bash(cargo test:*)"],
        verdict: "allow",
        suggested: "bash(cd daemon && cargo test)",
    },
    Case {
        command: "make && make",
        parts: &["make", "make"],
        rules: &[],
        verdict: "ask ~ `make`",
        suggested: "bash(make)",
    },
    Case {
        command: "ls *.log 2>/dev/null | wc -l",
        parts: &["ls *.log", "wc -l"],
        rules: &["allow bash(ls:*)", "allow bash(wc:*)"],
        verdict: "allow",
        suggested: "bash(ls *.log 2>/dev/null | wc -l)",
    },
    Case {
        command: "git log --oneline | head -20",
        parts: &["git log --oneline", "head -20"],
        rules: &["allow bash(git log:*)"],
        verdict: "ask ~ `head -20`",
        suggested: "bash(git log --oneline | head -20)",
    },
    Case {
        command: "echo \"$(date +%F): $(git rev-parse --short HEAD)\" >> build.log",
        parts: &[
            "date +%F",
            "git rev-parse --short HEAD",
            "echo \"$(date +%F): $(git rev-parse --short HEAD)\"",
            ">> build.log",
        ],
        rules: &[
            "allow bash(date:*)",
            "allow bash(git rev-parse:*)",
            "allow bash(echo:*)",
            "allow edit(build.log)",
        ],
        verdict: "allow",
        suggested: "bash(echo \"$(date +%F): $(git rev-parse --short HEAD)\" >>build.log)",
    },
    Case {
        command: "tar czf backup.tgz src && echo ok > /tmp/status",
        parts: &["tar czf backup.tgz src", "echo ok", "> /tmp/status"],
        rules: &["allow bash(tar:*)", "allow bash(echo:*)"],
        verdict: "ask ~ outside the working directory: /tmp/status",
        suggested: "bash(tar czf backup.tgz src && echo ok >/tmp/status)",
    },
    Case {
        command: "x='a[$(id)]'; echo $((x))",
        parts: &["x='a[$(id)]'", "echo $((x))", "$((x))"],
        rules: &["allow bash(echo:*)"],
        verdict: "ask ~ the arithmetic `$((x))`",
        suggested: "bash(x='a[$(id)]' ; echo $((x)))",
    },
    // Here-documents.
    Case {
        command: "cat <<EOF\n$(whoami)\nEOF",
        parts: &["cat", "whoami"],
        rules: &["allow bash(cat)"],
        verdict: "ask ~ `whoami`",
        suggested: "bash",
    },
    Case {
        command: "cat > notes.md <<'EOF'\n# Notes\n$(not run)\nEOF",
        parts: &["cat", "> notes.md"],
        rules: &["allow bash(cat)", "allow edit(notes.md)"],
        verdict: "allow",
        suggested: "bash",
    },
    // find -exec and xargs: what they run answers to deny rules.
    Case {
        command: "find . -name '*.rs' -exec grep -l TODO {} \\;",
        parts: &["find . -name '*.rs' -exec grep -l TODO {} \\;"],
        rules: &["allow bash(find:*)", "deny bash(grep:*)"],
        verdict: "deny ~ (`grep -l TODO {}`)",
        suggested: "bash(find . -name '*.rs' -exec grep -l TODO {} \\;)",
    },
    Case {
        command: "find . -type f -name '*.tmp' -print0 | xargs -0 rm -f",
        parts: &["find . -type f -name '*.tmp' -print0", "xargs -0 rm -f"],
        rules: &[
            "allow bash(find:*)",
            "allow bash(xargs:*)",
            "deny bash(rm:*)",
        ],
        verdict: "deny ~ (`rm -f`)",
        suggested: "bash(find . -type f -name '*.tmp' -print0 | xargs -0 rm -f)",
    },
    Case {
        command: "git diff --name-only | xargs cargo fmt --",
        parts: &["git diff --name-only", "xargs cargo fmt --"],
        rules: &[
            "allow bash(git diff:*)",
            "allow bash(xargs:*)",
            "deny bash(rm:*)",
        ],
        verdict: "allow",
        suggested: "bash(git diff --name-only | xargs cargo fmt --)",
    },
    // Environment assignments.
    Case {
        command: "RUST_LOG=debug cargo run",
        parts: &["RUST_LOG=debug cargo run"],
        rules: &["allow bash(cargo run:*)"],
        verdict: "ask ~ `RUST_LOG=debug cargo run`",
        suggested: "bash(RUST_LOG=debug cargo run)",
    },
    Case {
        command: "FOO=1 rm -rf /",
        parts: &["FOO=1 rm -rf /"],
        rules: &["allow bash", "deny bash(rm:*)"],
        verdict: "deny",
        suggested: "bash(FOO=1 rm -rf /)",
    },
    Case {
        command: "sudo apt-get install -y jq",
        parts: &["sudo apt-get install -y jq"],
        rules: &["allow bash", "deny bash(apt-get:*)"],
        verdict: "deny",
        suggested: "bash(sudo apt-get install -y jq)",
    },
    Case {
        command: "bash -c 'rm -rf build'",
        parts: &["bash -c 'rm -rf build'"],
        rules: &["allow bash(bash:*)", "deny bash(rm:*)"],
        verdict: "deny",
        suggested: "bash(bash -c 'rm -rf build')",
    },
    // Comments and line continuations.
    Case {
        command: "# build it\ncargo build --release",
        parts: &["cargo build --release"],
        rules: &["allow bash(cargo build:*)"],
        verdict: "allow",
        suggested: "bash(cargo build:*)",
    },
    Case {
        command: "cargo test \\\n  --workspace \\\n  -- --nocapture",
        parts: &["cargo test --workspace -- --nocapture"],
        rules: &["allow bash(cargo test:*)"],
        verdict: "allow",
        suggested: "bash(cargo test:*)",
    },
    Case {
        command: "time cargo build",
        parts: &["cargo build"],
        rules: &["allow bash(cargo build:*)"],
        verdict: "allow",
        suggested: "bash(time cargo build)",
    },
];

fn policy(rules: &[&str]) -> Policy {
    let mut p = Policy::new(Mode::Default, CWD);
    p.rules = rules
        .iter()
        .map(|r| {
            r.parse::<Rule>()
                .unwrap_or_else(|e| panic!("rule {r:?}: {e}"))
        })
        .collect();
    p
}

fn bash(command: &str) -> ToolCall {
    ToolCall {
        id: "t1".to_string(),
        name: "bash".to_string(),
        input: json!({ "command": command }),
    }
}

fn render(v: &Verdict) -> String {
    match v {
        Verdict::Allow => "allow".to_string(),
        Verdict::Ask(r) => format!("ask: {r}"),
        Verdict::Deny(r) => format!("deny: {r}"),
    }
}

fn verdict_matches(v: &Verdict, expect: &str) -> bool {
    let (kind, needle) = match expect.split_once(" ~ ") {
        Some((k, n)) => (k, Some(n)),
        None => (expect, None),
    };
    let kind_ok = matches!(
        (v, kind),
        (Verdict::Allow, "allow") | (Verdict::Ask(_), "ask") | (Verdict::Deny(_), "deny")
    );
    kind_ok && needle.is_none_or(|n| render(v).contains(n))
}

#[test]
fn real_world_command_lines() {
    assert!(CASES.len() >= 30);
    let mut failures = Vec::new();
    for case in CASES {
        let parts = split_compound(case.command);
        let verdict = policy(case.rules).evaluate(&bash(case.command));
        let suggested = suggested_rule(&bash(case.command), CWD);
        let parts_ok = parts.as_deref().is_ok_and(|p| p == case.parts);
        let verdict_ok = verdict_matches(&verdict, case.verdict);
        if !(parts_ok && verdict_ok && suggested == case.suggested) {
            failures.push(format!(
                "{:?}\n  parts:     {:?}\n  expected:  {:?}\n  verdict:   {}\n  expected:  {}\n  suggested: {suggested}\n  expected:  {}",
                case.command,
                parts,
                case.parts,
                render(&verdict),
                case.verdict,
                case.suggested
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// The suggested rule, added on its own, allows the line it was suggested
/// for (an "always" answer does what it says).
#[test]
fn suggested_rules_allow_their_lines() {
    for case in CASES {
        if case.suggested == "bash" {
            continue;
        }
        let rules = [format!("allow {}", case.suggested)];
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        let mut p = policy(&rules);
        p.rules.retain(|r| r.pattern.is_some());
        let v = p.evaluate(&bash(case.command));
        // Writes outside the working directory still need their own rule.
        if case.parts.iter().any(|p| p.starts_with('>')) {
            assert!(
                !matches!(v, Verdict::Deny(_)),
                "{}: {}",
                case.command,
                render(&v)
            );
            continue;
        }
        assert_eq!(
            v,
            Verdict::Allow,
            "{} with {}",
            case.command,
            case.suggested
        );
    }
}

/// The program a part runs, for a deny rule on it: its first word that is
/// not an assignment, when that is plain text.
fn program(part: &str) -> Option<&str> {
    let word = part
        .split_whitespace()
        .find(|w| !w.contains('=') || w.starts_with(['-', '\'', '"']))?;
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '['));
    plain.then_some(word)
}

/// Deny wins: a deny rule on any command of a line denies the line,
/// whatever allows the rest (in every mode that runs commands).
#[test]
fn a_deny_rule_on_any_command_denies_the_line() {
    let mut checked = 0;
    for case in CASES {
        for part in case.parts {
            let Some(program) = program(part) else {
                continue;
            };
            let Ok(deny) = Rule::parse(
                &format!("bash({program}:*)"),
                agentd_core::permission::Action::Deny,
            ) else {
                continue;
            };
            for mode in [Mode::Default, Mode::AcceptEdits, Mode::Bypass] {
                let mut p = policy(case.rules);
                p.mode = mode;
                p.rules
                    .push(Rule::parse("bash", agentd_core::permission::Action::Allow).unwrap());
                p.rules.push(deny.clone());
                let v = p.evaluate(&bash(case.command));
                assert!(
                    matches!(v, Verdict::Deny(_)),
                    "{:?}: a deny rule on `{program}` must deny it in {mode:?}; got {}",
                    case.command,
                    render(&v)
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 90, "only {checked} deny checks ran");
}

mod generated {
    use super::*;
    use agentd_core::permission::Action;
    use proptest::prelude::*;

    /// Pieces of command lines: commands, reserved words in and out of
    /// place, operators, quotes, substitutions.
    const PIECES: &[&str] = &[
        "rm -rf x",
        "echo a",
        "ls",
        "git status",
        "cat f",
        "for f in *.txt;",
        "for f in $(rm y);",
        "do",
        "done",
        "while true;",
        "until false;",
        "if [ -f x ];",
        "then",
        "elif",
        "else",
        "fi",
        "case $x in",
        "a)",
        "*)",
        ";;",
        "esac",
        "{",
        "}",
        "(",
        ")",
        "((i++))",
        "$((1 + 2))",
        "[[ -f x ]]",
        "[[ $n -gt 1 ]]",
        "f()",
        "function g",
        "!",
        "time",
        ";",
        "&&",
        "||",
        "|",
        "&",
        "\n",
        "> out.txt",
        "2>&1",
        "< in",
        "<<EOF\n$(rm z)\nEOF\n",
        "'",
        "\"",
        "\\",
        "`",
        "$(",
        "A=1",
        "xargs rm",
        "find . -exec rm {} \\;",
        "sudo rm",
        "sh -c 'rm q'",
        "# c",
        "in",
        "select s in a b;",
        "arr=(a $(rm w))",
    ];

    fn line() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 1..12).prop_map(|p| p.join(" "))
    }

    /// Pieces each at the start of a command: every `rm` piece is run
    /// when bash can read the line.
    fn commands() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 1..12).prop_map(|p| p.join(" ; "))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Reading never panics, and a line with an `rm` anywhere bash
        /// would run it is denied by `deny bash(rm:*)` whatever else is
        /// allowed; an unreadable line is never allowed.
        #[test]
        fn deny_always_wins(command in line()) {
            let mut p = policy(&["allow bash", "allow edit(**)"]);
            p.rules.push(Rule::parse("bash(rm:*)", Action::Deny).unwrap());
            let verdict = p.evaluate(&bash(&command));
            match split_compound(&command) {
                Err(_) => prop_assert!(!matches!(verdict, Verdict::Allow)),
                Ok(parts) => {
                    if parts.iter().any(|part| part == "rm" || part.starts_with("rm ")) {
                        prop_assert!(matches!(verdict, Verdict::Deny(_)), "{:?}: {:?}", command, verdict);
                    }
                }
            }
            let _ = suggested_rule(&bash(&command), CWD);
        }

        /// Every `rm` that starts a command of a readable line (in a loop,
        /// a condition, a substitution, a function, behind xargs or sudo)
        /// makes it denied.
        #[test]
        fn every_rm_denies(command in commands()) {
            if split_compound(&command).is_ok() && command.contains("rm ") {
                let mut p = policy(&["allow bash"]);
                p.rules.push(Rule::parse("bash(rm:*)", Action::Deny).unwrap());
                let verdict = p.evaluate(&bash(&command));
                // Quotes and comments can turn an `rm` into text bash never
                // runs; lines without them have no such text.
                let text_only = command.contains(['\'', '"', '\\', '#']);
                if !text_only {
                    prop_assert!(matches!(verdict, Verdict::Deny(_)), "{:?}: {:?}", command, verdict);
                }
            }
        }
    }
}
