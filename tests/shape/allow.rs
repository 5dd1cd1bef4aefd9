//! The ratchet: `.ci/shape-allow.txt` lists what breaks a rule today with
//! the size it has now. An entry may not grow, an entry that no longer
//! breaks its rule must be removed, and anything not listed fails — so the
//! list only shrinks, to empty.

use crate::rules::{FILE_LIMIT, FN_LIMIT, Finding, Rule};
use std::collections::BTreeMap;

/// The allow-list, from the workspace root.
pub const PATH: &str = ".ci/shape-allow.txt";

/// One line of the allow-list: `rule key size`.
#[derive(Debug)]
pub struct Entry {
    pub rule: Rule,
    pub key: String,
    pub size: usize,
    /// Its line in the list.
    pub line: usize,
}

/// Parses the list; `#` starts a comment.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content.split_whitespace().collect();
        let [rule, key, size] = fields[..] else {
            return Err(format!(
                "{PATH}:{line}: expected `rule key size`, found `{content}`"
            ));
        };
        let rule = Rule::parse(rule)
            .ok_or_else(|| format!("{PATH}:{line}: unknown rule `{rule}` (file, fn, layers)"))?;
        let size = size
            .parse()
            .map_err(|_| format!("{PATH}:{line}: size `{size}` is not a number"))?;
        if let Some(first) = entries.iter().find(|e| e.rule == rule && e.key == key) {
            return Err(format!(
                "{PATH}:{line}: `{} {key}` is already on line {}",
                rule.name(),
                first.line
            ));
        }
        entries.push(Entry {
            rule,
            key: key.to_string(),
            size,
            line,
        });
    }
    Ok(entries)
}

/// The findings of one rule and key: one allow-list entry's worth.
#[derive(Debug)]
pub struct Group {
    pub rule: Rule,
    pub key: String,
    /// The largest finding (a file, a function), or how many there are (the
    /// names of a forbidden module in one file).
    pub size: usize,
    pub findings: Vec<Finding>,
}

pub fn group(findings: Vec<Finding>) -> Vec<Group> {
    let mut by_key: BTreeMap<(Rule, String), Vec<Finding>> = BTreeMap::new();
    for f in findings {
        by_key.entry((f.rule, f.key.clone())).or_default().push(f);
    }
    by_key
        .into_iter()
        .map(|((rule, key), findings)| {
            let size = match rule {
                Rule::Layers => findings.iter().map(|f| f.size).sum(),
                Rule::File | Rule::Fn => findings.iter().map(|f| f.size).max().unwrap_or(0),
            };
            Group {
                rule,
                key,
                size,
                findings,
            }
        })
        .collect()
}

/// Every problem, one message each: findings not on the list, entries that
/// grew, entries that no longer break their rule.
pub fn check(groups: &[Group], entries: &[Entry]) -> Vec<String> {
    let mut problems = Vec::new();
    for g in groups {
        let entry = entries.iter().find(|e| e.rule == g.rule && e.key == g.key);
        match entry {
            None => problems.extend(g.findings.iter().map(|f| {
                format!(
                    "{}: {} rule: {} (not on {PATH}; new code must keep the rule)",
                    f.at,
                    f.rule.name(),
                    f.what
                )
            })),
            Some(e) if g.size > e.size => problems.push(grown(g, e)),
            Some(_) => {}
        }
    }
    for e in entries {
        if !groups.iter().any(|g| g.rule == e.rule && g.key == e.key) {
            let limit = match e.rule {
                Rule::File => format!("is within {FILE_LIMIT} non-test lines now"),
                Rule::Fn => format!("is within {FN_LIMIT} lines now (or is gone)"),
                Rule::Layers => "no longer crosses that layer".to_string(),
            };
            problems.push(format!(
                "{PATH}:{}: `{} {} {}` {limit}: remove this line (the allow-list only shrinks)",
                e.line,
                e.rule.name(),
                e.key,
                e.size
            ));
        }
    }
    problems
}

fn grown(g: &Group, e: &Entry) -> String {
    let tail = format!(
        "grown past the {} that {PATH}:{} allows: bring it back to at most {} (an allowed entry may not grow; the list only shrinks)",
        e.size, e.line, e.size
    );
    match g.rule {
        Rule::File | Rule::Fn => {
            let f = g.findings.iter().filter(|f| f.size > e.size);
            f.map(|f| format!("{}: {} rule: {}; {tail}", f.at, g.rule.name(), f.what))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Rule::Layers => {
            let names: Vec<String> = g
                .findings
                .iter()
                .map(|f| format!("    {}: {}", f.at, f.what))
                .collect();
            format!(
                "{}: layers rule: {} names across the layer, {tail}:\n{}",
                g.key,
                g.size,
                names.join("\n")
            )
        }
    }
}

const HEADER: &str = "\
# The shape check's allow-list (tests/shape, issue 40 point 7): production
# code that breaks a rule today, each entry with the size it has now. The
# list only shrinks, to empty, as the splits of issue 40 land:
# - an entry may not grow past its size;
# - an entry that no longer breaks its rule fails the check until its line
#   is removed;
# - anything over a rule and not listed fails.
# Sizes: `file` non-test lines (limit 600), `fn` lines from signature to
# closing brace (limit 100; same-named functions of a file share a line),
# `layers` how many names of the forbidden module the file has.
# Regenerate from the tree (refused in CI) and read the diff — a blessing
# should only remove lines or lower sizes:
#   SHAPE_BLESS=1 cargo test -p agent-tests --test shape
";

/// The allow-list that records the findings as they are.
pub fn render(groups: &[Group]) -> String {
    let mut out = HEADER.to_string();
    for rule in Rule::ALL {
        let of_rule: Vec<&Group> = groups.iter().filter(|g| g.rule == rule).collect();
        if of_rule.is_empty() {
            continue;
        }
        let width = of_rule.iter().map(|g| g.key.len()).max().unwrap_or(0);
        out.push('\n');
        for g in of_rule {
            out.push_str(&format!(
                "{:<6} {:<width$} {}\n",
                rule.name(),
                g.key,
                g.size
            ));
        }
    }
    out
}

/// What a blessing changes, for the person who runs it.
pub fn changes(groups: &[Group], entries: &[Entry]) -> Vec<String> {
    let mut out = Vec::new();
    for g in groups {
        match entries.iter().find(|e| e.rule == g.rule && e.key == g.key) {
            None => out.push(format!(
                "ADDED (a new break of a rule; fix it instead?) {} {} {}",
                g.rule.name(),
                g.key,
                g.size
            )),
            Some(e) if e.size != g.size => out.push(format!(
                "changed {} {} {} -> {}",
                g.rule.name(),
                g.key,
                e.size,
                g.size
            )),
            Some(_) => {}
        }
    }
    for e in entries {
        if !groups.iter().any(|g| g.rule == e.rule && g.key == e.key) {
            out.push(format!("removed {} {} {}", e.rule.name(), e.key, e.size));
        }
    }
    out
}
