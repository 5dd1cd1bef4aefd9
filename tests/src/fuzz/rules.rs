//! The `rules` target: the permission rule parser, the shell-command
//! parser and [`Policy::evaluate`] (agentd-core), in process.
//!
//! Each case draws a call (a bash line built from a grammar of bash —
//! compound commands, substitutions, here-documents, wrappers such as
//! `sudo` and `sh -c`, quoting, comments — then sometimes damaged; random
//! text; or a file tool on a path), a set of random rules (texts built from
//! the call's own parts, from a vocabulary, or random) and a mode.
//! Checked:
//! - nothing panics: rule texts (`Rule::parse`, `<action> <rule>`),
//!   `split_compound`, `evaluate`, `paths_to_resolve`, `suggest_rule`;
//! - a rule read back from its text is the same rule;
//! - deny always wins, as `permission.rs` documents it ("every rule that
//!   matches a part counts … deny beats ask beats allow … any part denied:
//!   deny"; read_only/plan deny mutating tools; bypass allows all but what
//!   a deny rule denies): a deny rule that surely matches the call — the
//!   bare tool, a prefix or exact rule on one of the line's simple commands
//!   whose words are plain literals, an exact path — makes the verdict
//!   deny, whatever the other rules, in every mode; a call denied stays
//!   denied when allow and ask rules are added and in every mode; adding a
//!   deny or ask rule never makes a verdict weaker; the order of the rules
//!   never matters.
//!
//! "Surely" matters: the policy asks, rather than denies, when a deny rule
//! only *might* match (an expansion such as `$X` where the rule names a
//! word, a path it cannot know), as its documentation says; the cases
//! built here avoid that on purpose.

use agentd_core::message::ToolCall;
use agentd_core::permission::{
    Action, Mode, Policy, Rule, Verdict, split_compound, suggest_rule, suggested_rule,
};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::{FuzzOptions, Progress, Report, Target, catch, minimize};

const CWD: &str = "/w/p";
/// Sure denials checked per case (the bare one first, then the line's).
const MAX_SURE: usize = 4;
const MODES: [Mode; 5] = [
    Mode::Default,
    Mode::AcceptEdits,
    Mode::Bypass,
    Mode::ReadOnly,
    Mode::Plan,
];

/// Runs the target for the budget.
pub fn run(opts: &FuzzOptions) -> Report {
    let mut report = Report::new(Target::Rules, opts.seed);
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let deadline = std::time::Instant::now() + opts.budget;
    let mut progress = Progress::new(Target::Rules, opts.progress);
    let mut stats = Stats::default();
    let mut slowest = (std::time::Duration::ZERO, String::new());
    while std::time::Instant::now() < deadline && !report.full() {
        report.cases += 1;
        let case = Case::draw(&mut rng);
        let started = std::time::Instant::now();
        let result = case.check(&mut stats);
        let took = started.elapsed();
        if took > slowest.0 {
            slowest = (took, case.to_string());
        }
        if let Err(e) = result {
            let small = case.minimized();
            let why = small.check(&mut Stats::default()).err().unwrap_or(e);
            report.fail(format!("{why}\n    {small}"));
        }
        progress.tick(report.cases, || {
            format!(
                ", {} readable lines, {} sure denials checked",
                stats.readable, stats.sure_denials
            )
        });
    }
    report.notes.push(format!(
        "slowest case: {:.1} ms: {}",
        slowest.0.as_secs_f64() * 1000.0,
        slowest.1.chars().take(300).collect::<String>()
    ));
    report.notes.push(format!(
        "{} calls: {} bash lines ({} readable), {} sure denials checked, {} denials kept under added allow/ask rules and modes",
        report.cases, stats.bash, stats.readable, stats.sure_denials, stats.kept_denials
    ));
    report
}

#[derive(Debug, Default)]
struct Stats {
    bash: u64,
    readable: u64,
    sure_denials: u64,
    kept_denials: u64,
}

/// One case: a call, rule texts with their actions, and a mode.
#[derive(Debug, Clone)]
struct Case {
    tool: &'static str,
    /// The command line, or the path.
    subject: String,
    rules: Vec<(Action, String)>,
    /// Allow/ask rules added to a denied call.
    extra: Vec<(Action, String)>,
    mode: Mode,
    /// Texts only read as rules (never panic, read back the same).
    junk: Vec<String>,
    /// Which of the sure denials to check.
    pick: usize,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rules: Vec<String> = self.rules.iter().map(|(a, r)| format!("{a} {r}")).collect();
        let extra: Vec<String> = self.extra.iter().map(|(a, r)| format!("{a} {r}")).collect();
        write!(
            f,
            "{} {:?}, mode {}, rules {rules:?}, added {extra:?}, rule texts {:?}",
            self.tool, self.subject, self.mode, self.junk
        )
    }
}

fn call(tool: &str, subject: &str) -> ToolCall {
    let input = match tool {
        "bash" => json!({ "command": subject }),
        "write" => json!({ "path": subject, "content": "x" }),
        "edit" => json!({ "path": subject, "old_string": "a", "new_string": "b" }),
        "glob" => json!({ "pattern": subject }),
        "patch" => json!({
            "patch": format!("--- a/{subject}\n+++ b/{subject}\n@@ -1 +1 @@\n-old\n+new\n")
        }),
        _ => json!({ "path": subject }),
    };
    ToolCall {
        id: "t1".to_string(),
        name: tool.to_string(),
        input,
    }
}

fn policy(mode: Mode, rules: Vec<Rule>) -> Policy {
    let mut p = Policy::new(mode, CWD);
    p.additional_dirs = vec!["/w/shared".to_string()];
    p.resolved_paths
        .insert("link/passwd".into(), "/etc/passwd".into());
    p.rules = rules;
    p
}

fn parse_all(texts: &[(Action, String)]) -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    for (action, text) in texts {
        if let Some(rule) = read_rule(text, *action)? {
            out.push(rule);
        }
    }
    Ok(out)
}

/// Reads a rule text (and checks it reads back the same); `None` when it
/// is not a rule.
fn read_rule(text: &str, action: Action) -> Result<Option<Rule>, String> {
    let parsed =
        catch(|| Rule::parse(text, action)).map_err(|p| format!("Rule::parse({text:?}) {p}"))?;
    let spec = format!("{action} {text}");
    let from_str = catch(|| spec.parse::<Rule>()).map_err(|p| format!("{spec:?}.parse() {p}"))?;
    let Ok(rule) = parsed else {
        return Ok(None);
    };
    if from_str.as_ref() != Ok(&rule) && !text.trim_start().starts_with(['(', ')']) {
        // `<action> <rule>` reads what `Rule::parse` reads (a leading
        // parenthesis aside: `allow (x)` is an empty tool name either way).
        return Err(format!(
            "{spec:?} reads as {from_str:?}, but Rule::parse({text:?}) as {rule:?}"
        ));
    }
    let again = Rule::parse(&rule.to_string(), action);
    if again.as_ref() != Ok(&rule) {
        return Err(format!(
            "rule {text:?} reads as {rule:?}, prints as {:?}, which reads as {again:?}",
            rule.to_string()
        ));
    }
    let back = rule.spec().parse::<Rule>();
    if back.as_ref() != Ok(&rule) {
        return Err(format!(
            "rule {rule:?}: its spec {:?} reads as {back:?}",
            rule.spec()
        ));
    }
    Ok(Some(rule))
}

fn evaluate(mode: Mode, rules: &[Rule], call: &ToolCall) -> Result<Verdict, String> {
    let p = policy(mode, rules.to_vec());
    catch(|| p.evaluate(call)).map_err(|e| format!("evaluate, mode {mode}: {e}"))
}

fn rank(v: &Verdict) -> u8 {
    match v {
        Verdict::Allow => 0,
        Verdict::Ask(_) => 1,
        Verdict::Deny(_) => 2,
    }
}

impl Case {
    fn draw(rng: &mut StdRng) -> Case {
        let (tool, subject) = match rng.random_range(0..10) {
            0..=5 => ("bash", command(rng)),
            6 => ("bash", random_text(rng)),
            _ => {
                let tool = *["write", "edit", "read", "patch", "glob", "grep"]
                    .choose(rng)
                    .unwrap_or(&"write");
                let path = if rng.random_bool(0.2) {
                    random_text(rng)
                } else {
                    PATHS.choose(rng).unwrap_or(&"a").to_string()
                };
                (tool, path)
            }
        };
        let parts = if tool == "bash" {
            split_compound(&subject).unwrap_or_default()
        } else {
            Vec::new()
        };
        let n = rng.random_range(0..6);
        let rules = (0..n)
            .map(|_| (random_action(rng), rule_text(rng, tool, &subject, &parts)))
            .collect();
        let n = rng.random_range(1..5);
        let extra = (0..n)
            .map(|_| {
                let action = if rng.random_bool(0.5) {
                    Action::Allow
                } else {
                    Action::Ask
                };
                (action, rule_text(rng, tool, &subject, &parts))
            })
            .collect();
        let junk = (0..rng.random_range(0..3))
            .map(|_| {
                let mut t = random_text(rng);
                if rng.random_bool(0.5) {
                    t = format!("{}({t})", TOOLS.choose(rng).unwrap_or(&"bash"));
                }
                t
            })
            .collect();
        Case {
            tool,
            subject,
            rules,
            extra,
            mode: *MODES.choose(rng).unwrap_or(&Mode::Default),
            junk,
            pick: rng.random_range(0..1024),
        }
    }

    fn check(&self, stats: &mut Stats) -> Result<(), String> {
        for text in &self.junk {
            read_rule(text, Action::Deny)?;
        }
        let call = call(self.tool, &self.subject);
        let mut sure: Vec<Rule> = vec![Rule {
            tool: self.tool.to_string(),
            pattern: None,
            action: Action::Deny,
        }];
        if self.tool == "bash" {
            stats.bash += 1;
            let parts = catch(|| split_compound(&self.subject))
                .map_err(|e| format!("split_compound: {e}"))?;
            catch(|| suggest_rule(&call, CWD)).map_err(|e| format!("suggest_rule: {e}"))?;
            catch(|| suggested_rule(&call, CWD)).map_err(|e| format!("suggested_rule: {e}"))?;
            if let Ok(parts) = parts {
                stats.readable += 1;
                for part in &parts {
                    for text in sure_denials(part) {
                        if let Some(rule) = read_rule(&text, Action::Deny)? {
                            sure.push(rule);
                        }
                    }
                }
            }
        } else if plain_path(&self.subject) {
            let tool = if matches!(self.tool, "read" | "grep") {
                "read"
            } else {
                "write"
            };
            if matches!(self.tool, "read" | "grep" | "write" | "edit" | "patch")
                && let Some(rule) = read_rule(&format!("{tool}({})", self.subject), Action::Deny)?
            {
                sure.push(rule);
            }
        }
        catch(|| Policy::paths_to_resolve(&call)).map_err(|e| format!("paths_to_resolve: {e}"))?;

        let rules = parse_all(&self.rules)?;
        let extra = parse_all(&self.extra)?;
        let verdict = evaluate(self.mode, &rules, &call)?;

        // The order of the rules does not matter.
        let mut reversed = rules.clone();
        reversed.reverse();
        let other = evaluate(self.mode, &reversed, &call)?;
        if other != verdict {
            return Err(format!(
                "reversing the rules changes the verdict from {verdict:?} to {other:?}"
            ));
        }

        // A call denied (by rules: read_only and plan deny by the mode)
        // stays denied with more allow/ask rules, in any mode.
        let by_rules = matches!(self.mode, Mode::Default | Mode::AcceptEdits | Mode::Bypass);
        if by_rules && matches!(verdict, Verdict::Deny(_)) {
            stats.kept_denials += 1;
            let mut more = rules.clone();
            more.extend(extra.iter().cloned());
            for mode in MODES {
                let v = evaluate(mode, &more, &call)?;
                if !matches!(v, Verdict::Deny(_)) {
                    return Err(format!(
                        "denied in mode {} ({verdict:?}), but {v:?} in mode {mode} with allow/ask rules added",
                        self.mode
                    ));
                }
            }
        }

        // Adding a deny or ask rule never makes the verdict weaker.
        for (action, text) in self.extra.iter().take(2) {
            let stronger = if *action == Action::Allow {
                Action::Deny
            } else {
                *action
            };
            if let Some(rule) = read_rule(text, stronger)? {
                let mut more = rules.clone();
                more.push(rule.clone());
                let v = evaluate(self.mode, &more, &call)?;
                if rank(&v) < rank(&verdict) {
                    return Err(format!(
                        "adding `{}` weakens the verdict from {verdict:?} to {v:?}",
                        rule.spec()
                    ));
                }
            }
        }

        // A deny rule that surely matches denies, whatever else, in every
        // mode. (A few of them: each costs five evaluations.)
        let mut line = sure.split_off(1);
        if !line.is_empty() {
            let k = self.pick % line.len();
            line.rotate_left(k);
        }
        sure.extend(line.into_iter().take(MAX_SURE - 1));
        for deny in sure {
            stats.sure_denials += 1;
            let mut all = rules.clone();
            all.extend(extra.iter().cloned());
            all.push(deny.clone());
            for mode in MODES {
                let v = evaluate(mode, &all, &call)?;
                if !matches!(v, Verdict::Deny(_)) {
                    return Err(format!(
                        "`{}` matches the call, but in mode {mode} the verdict is {v:?}",
                        deny.spec()
                    ));
                }
            }
        }
        Ok(())
    }

    /// A smaller case that still fails: fewer rules, a shorter subject.
    fn minimized(&self) -> Case {
        let fails = |c: &Case| c.check(&mut Stats::default()).is_err();
        let mut best = self.clone();
        let rules = minimize(&best.rules, 200, |r| {
            fails(&Case {
                rules: r.to_vec(),
                ..best.clone()
            })
        });
        best.rules = rules;
        let extra = minimize(&best.extra, 200, |r| {
            fails(&Case {
                extra: r.to_vec(),
                ..best.clone()
            })
        });
        best.extra = extra;
        let junk = minimize(&best.junk, 50, |r| {
            fails(&Case {
                junk: r.to_vec(),
                ..best.clone()
            })
        });
        best.junk = junk;
        let chars: Vec<char> = best.subject.chars().collect();
        let subject = minimize(&chars, 2000, |s| {
            fails(&Case {
                subject: s.iter().collect(),
                ..best.clone()
            })
        });
        best.subject = subject.into_iter().collect();
        best
    }
}

/// Characters that keep a word a plain literal: no quoting, expansion,
/// glob, operator or reserved meaning.
fn plain_word(w: &str) -> bool {
    !w.is_empty()
        && w.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | ',' | '+' | '@' | '%')
        })
        && !RESERVED.contains(&w)
}

const RESERVED: &[&str] = &[
    "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "for", "select", "case",
    "esac", "in", "function", "time",
];

/// Deny rules that surely match a simple command `part` of a line (as
/// `split_compound` prints it): a prefix rule on its first word, and an
/// exact rule on the whole command, when those words are plain literals.
fn sure_denials(part: &str) -> Vec<String> {
    let words: Vec<&str> = part.split(' ').collect();
    let mut out = Vec::new();
    if let Some(first) = words.first()
        && plain_word(first)
    {
        out.push(format!("bash({first}:*)"));
        if words.iter().all(|w| plain_word(w)) {
            out.push(format!("bash({part})"));
            out.push(format!("bash({part}:*)"));
        }
    }
    out
}

/// A path a rule can name exactly: no glob characters, no `~`, not a
/// symbolic link (rules match where a link leads), no trailing `/` (in a
/// rule that means "everything below", not the directory itself).
fn plain_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with("link/")
        && !p.ends_with('/')
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'))
}

fn random_action(rng: &mut StdRng) -> Action {
    *[Action::Allow, Action::Ask, Action::Deny]
        .choose(rng)
        .unwrap_or(&Action::Ask)
}

const TOOLS: &[&str] = &[
    "bash",
    "bash",
    "bash",
    "write",
    "edit",
    "patch",
    "read",
    "glob",
    "grep",
    "kill_shell",
    "bash_output",
    "think",
    "mcp__x.y",
    "nope",
];

const PATHS: &[&str] = &[
    "src/a.rs",
    "out.txt",
    "/etc/passwd",
    "../x/y",
    "a/./b",
    "a//b",
    "/w/p/../q",
    "/w/shared/z",
    "link/passwd",
    "~/x",
    "src/**",
    "*.md",
    ".",
    "/",
    "src/[ab].rs",
    "we(ird.rs",
    "a b/c",
];

/// A rule text for a case: the tool bare, a pattern taken from the call
/// (a part, a prefix of one, its path), from a vocabulary, or random.
fn rule_text(rng: &mut StdRng, tool: &str, subject: &str, parts: &[String]) -> String {
    let on = if rng.random_bool(0.7) {
        tool
    } else {
        *TOOLS.choose(rng).unwrap_or(&"bash")
    };
    let pattern = match rng.random_range(0..10) {
        0 => return on.to_string(),
        1..=4 if !parts.is_empty() => {
            let part = parts.choose(rng).map(String::as_str).unwrap_or("ls");
            let words: Vec<&str> = part.split(' ').collect();
            let k = rng.random_range(1..=words.len().max(1));
            let prefix = words[..k.min(words.len())].join(" ");
            if rng.random_bool(0.6) {
                format!("{prefix}:*")
            } else {
                prefix
            }
        }
        5 => subject.to_string(),
        6 => random_text(rng),
        _ => {
            if matches!(on, "bash") {
                let c = simple(rng, 0);
                if rng.random_bool(0.5) {
                    format!("{c}:*")
                } else {
                    c
                }
            } else {
                PATHS.choose(rng).unwrap_or(&"a").to_string()
            }
        }
    };
    format!("{on}({pattern})")
}

/// Random text, biased towards what shells and rules give meaning to.
fn random_text(rng: &mut StdRng) -> String {
    const ALPHABET: &[char] = &[
        'a', 'b', 'r', 'm', ' ', ' ', '\t', '\n', '\\', '\'', '"', '`', '$', '(', ')', '{', '}',
        '[', ']', '<', '>', '|', '&', ';', '#', '*', '?', '~', '!', '=', ':', '/', '.', '-', '0',
        '1', '2', 'é', '✓', '\u{0}', '\r', '%', '@', '^', ',',
    ];
    let n = rng.random_range(0..60);
    (0..n)
        .map(|_| {
            if rng.random_bool(0.9) {
                *ALPHABET.choose(rng).unwrap_or(&'a')
            } else {
                rng.random::<char>()
            }
        })
        .collect()
}

const COMMANDS: &[&str] = &[
    "rm", "ls", "git", "cat", "echo", "cargo", "cd", "/bin/rm", "make", "printf", "true", "test",
    "python3", "kill", "mv", "cp", "chmod", "curl",
];
const ARGS: &[&str] = &[
    "-rf",
    "x",
    "status",
    "push",
    "test",
    "-p",
    "a.txt",
    "src",
    "'a b'",
    "\"q $X\"",
    "$X",
    "${Y:-z}",
    "*.rs",
    "~/f",
    "/etc/passwd",
    "--",
    "a\\ b",
    "$'\\x41'",
    "{a,b}",
    "\"$(rm x)\"",
    "'$(rm x)'",
    "1",
    "0",
    "-exec",
    "{}",
    "\\;",
    "=",
    "#notcomment",
    "a#b",
    "-c",
];
const WRAPPERS: &[&str] = &[
    "sudo",
    "xargs",
    "env A=1",
    "A=1",
    "nice -n 5",
    "timeout 5",
    "nohup",
    "exec",
    "command",
    "builtin",
    "time",
    "!",
    "xargs -0",
    "find . -exec",
    "doas",
];
const REDIRECTS: &[&str] = &[
    ">",
    ">>",
    "2>",
    "&>",
    "<",
    "<>",
    ">|",
    "2>&1",
    ">/dev/null",
    "1>&2",
    "<<<",
    "&>>",
];
const TARGETS: &[&str] = &[
    "out.txt",
    "/etc/passwd",
    "$F",
    "../up",
    "link/passwd",
    "/dev/null",
    "'q q'",
];

/// A simple command: optional wrapper, a command, arguments, redirections.
fn simple(rng: &mut StdRng, depth: usize) -> String {
    let mut words: Vec<String> = Vec::new();
    if rng.random_bool(0.15) {
        words.push(WRAPPERS.choose(rng).unwrap_or(&"sudo").to_string());
    }
    words.push(COMMANDS.choose(rng).unwrap_or(&"ls").to_string());
    for _ in 0..rng.random_range(0..4) {
        if depth < 3 && rng.random_bool(0.08) {
            let inner = list(rng, depth + 1);
            let sub = match rng.random_range(0..4) {
                0 => format!("$({inner})"),
                1 => format!("`{}`", simple(rng, depth + 1)),
                2 => format!("<({inner})"),
                _ => format!("\"$({inner})\""),
            };
            words.push(sub);
        } else if depth < 3 && rng.random_bool(0.04) {
            let inner = list(rng, depth + 1).replace('\'', "");
            words.push(format!("-c '{inner}'"));
        } else if rng.random_bool(0.05) {
            words.push("$((i + 1))".to_string());
        } else {
            words.push(ARGS.choose(rng).unwrap_or(&"x").to_string());
        }
    }
    if rng.random_bool(0.15) {
        let op = REDIRECTS.choose(rng).unwrap_or(&">");
        if op.contains('&') && op.len() > 2 || op.contains("/dev") {
            words.push(op.to_string());
        } else {
            words.push(format!(
                "{op} {}",
                TARGETS.choose(rng).unwrap_or(&"out.txt")
            ));
        }
    }
    words.join(" ")
}

/// A command: simple, or compound around lists.
fn command_at(rng: &mut StdRng, depth: usize) -> String {
    if depth >= 3 || rng.random_bool(0.7) {
        return simple(rng, depth);
    }
    let d = depth + 1;
    match rng.random_range(0..12) {
        0 => format!("for f in a b $X; do {}; done", list(rng, d)),
        1 => format!(
            "if {}; then {}; else {}; fi",
            list(rng, d),
            list(rng, d),
            list(rng, d)
        ),
        2 => format!("while {}; do {}; done", simple(rng, d), list(rng, d)),
        3 => format!(
            "case $x in a|b) {};; *) {};; esac",
            list(rng, d),
            list(rng, d)
        ),
        4 => format!("{{ {}; }}", list(rng, d)),
        5 => format!("( {} )", list(rng, d)),
        6 => format!("f() {{ {}; }}", list(rng, d)),
        7 => "((i++))".to_string(),
        8 => "[[ $a -eq 1 ]]".to_string(),
        9 => format!("cat <<EOF\n$(rm x) {}\nEOF\n", simple(rng, d)),
        10 => format!("cat <<'X'\n{}\nX\n", simple(rng, d)),
        _ => format!("for ((i=0; i<3; i++)); do {}; done", simple(rng, d)),
    }
}

/// Commands joined by operators.
fn list(rng: &mut StdRng, depth: usize) -> String {
    const OPS: &[&str] = &[" && ", " || ", "; ", " | ", " & ", "\n", " |& ", " ;\n"];
    let mut s = command_at(rng, depth);
    for _ in 0..rng.random_range(0..3) {
        s.push_str(OPS.choose(rng).unwrap_or(&"; "));
        s.push_str(&command_at(rng, depth));
    }
    s
}

/// A bash line: a list, sometimes with a comment, a line continuation, or
/// a few characters changed (to unbalance quotes and brackets).
fn command(rng: &mut StdRng) -> String {
    let mut s = list(rng, 0);
    if rng.random_bool(0.1) {
        s.push_str(" # a comment $(rm x)");
    }
    if rng.random_bool(0.05) {
        s = s.replacen(' ', " \\\n", 1);
    }
    if rng.random_bool(0.2) {
        let mut chars: Vec<char> = s.chars().collect();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..=chars.len());
            match rng.random_range(0..3) {
                0 if at < chars.len() => {
                    chars.remove(at);
                }
                _ => {
                    let c = *[
                        '\'', '"', '(', ')', '`', '$', '{', '}', '\\', ';', '\n', '<',
                    ]
                    .choose(rng)
                    .unwrap_or(&'\'');
                    chars.insert(at, c);
                }
            }
        }
        s = chars.into_iter().collect();
    }
    if rng.random_bool(0.02) {
        // Deep nesting.
        let n = rng.random_range(10..80);
        let mut deep = String::new();
        for _ in 0..n {
            deep.push_str(["$(", "(", "`", "{ ", "\"$("].choose(rng).unwrap_or(&"$("));
        }
        deep.push_str("rm x");
        s = deep;
    }
    let mut words: Vec<&str> = s.split(' ').collect();
    if words.len() > 3 && rng.random_bool(0.02) {
        words.shuffle(rng);
        return words.join(" ");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sure_denials_only_name_plain_words() {
        assert_eq!(
            sure_denials("rm -rf x"),
            vec!["bash(rm:*)", "bash(rm -rf x)", "bash(rm -rf x:*)"]
        );
        assert_eq!(sure_denials("rm $X"), vec!["bash(rm:*)"]);
        assert!(sure_denials("\"rm\" x").is_empty());
        assert!(sure_denials("> out.txt").is_empty());
    }

    #[test]
    fn exact_paths_are_plain() {
        assert!(plain_path("src/a.rs") && plain_path("/etc/passwd") && plain_path("a/./b"));
        for p in ["", "~/x", "*.md", "a b", "link/passwd", "-/", "/"] {
            assert!(!plain_path(p), "{p}");
        }
    }
}
