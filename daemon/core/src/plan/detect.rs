//! Plan detection: the seed's heuristic that scores a user's request for
//! whether it deserves a plan, a pure function of the text.

/// What [`plan_score`] found in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanScore {
    pub score: u32,
    /// The cues that counted, for people (`complexity: refactor`).
    pub cues: Vec<String>,
}

/// The score from which a message deserves a plan (the seed's "3+").
pub const PLAN_THRESHOLD: u32 = 3;

/// Words that make a task large by themselves: the change reshapes code
/// rather than adding to it. A word of the message counts when it starts
/// with one of them (`refactoring`, `migrated`).
const SWEEPING: &[&str] = &[
    "refactor",
    "restructur",
    "migrat",
    "rewrite",
    "rewriting",
    "redesign",
    "overhaul",
    "reorganiz",
    "reorganis",
];

/// Words that make a task complex (the seed's list and close relatives).
const COMPLEXITY: &[&str] = &[
    "extract",
    "implement",
    "replace",
    "move",
    "moving",
    "split",
    "rename",
    "consolidat",
    "decompos",
];

/// Architecture and design cues.
const DESIGN: &[&str] = &[
    "architectur",
    "design",
    "module",
    "layer",
    "abstraction",
    "interface",
    "pattern",
    "component",
    "subsystem",
    "codebase",
    "trait",
];

/// Dependency cues.
const DEPENDENCY: &[&str] = &[
    "dependenc",
    "depend",
    "upgrade",
    "crate",
    "package",
    "librar",
    "version",
];

/// Cues of breadth: the change spans many places.
const BREADTH: &[&str] = &["across", "everywhere", "throughout", "every", "all"];

/// File extensions that make a word a file mention.
const EXTENSIONS: &[&str] = &[
    "rs", "toml", "md", "py", "ts", "tsx", "js", "jsx", "go", "java", "kt", "c", "h", "cc", "cpp",
    "hpp", "rb", "json", "yaml", "yml", "proto", "sh", "sql", "html", "css", "swift", "lock",
];

/// The seed's plan detection score of `message`:
/// - a sweeping keyword (refactor, restructure, migrate, rewrite, redesign,
///   overhaul, reorganize): +3;
/// - a complexity keyword (move, extract, implement, replace, split,
///   rename …): +2, a second different one (of either list): +1;
/// - files mentioned: more than one +2 (the seed's "> 1 = complex"), more
///   than three +1 more;
/// - an architecture or design cue: +1;
/// - a dependency cue: +1;
/// - a breadth cue (across, everywhere, all …) with one of the above: +1.
pub fn plan_score(message: &str) -> PlanScore {
    let lower = message.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let found = |list: &[&str]| -> Vec<String> {
        let mut hits: Vec<String> = Vec::new();
        for w in &words {
            if let Some(k) = list.iter().find(|k| w.starts_with(**k))
                && !hits.iter().any(|h| h == k)
            {
                hits.push((*k).to_string());
            }
        }
        hits
    };
    let mut score = 0;
    let mut cues = Vec::new();
    let sweeping = found(SWEEPING);
    let complexity = found(COMPLEXITY);
    let keywords = sweeping.len() + complexity.len();
    if !sweeping.is_empty() {
        score += 3;
    } else if !complexity.is_empty() {
        score += 2;
    }
    if keywords > 1 {
        score += 1;
    }
    if keywords > 0 {
        let all: Vec<String> = sweeping.into_iter().chain(complexity).collect();
        cues.push(format!("complexity: {}", all.join(", ")));
    }
    let files = file_mentions(message);
    if files.len() > 1 {
        score += if files.len() > 3 { 3 } else { 2 };
        cues.push(format!("files: {}", files.len()));
    }
    let design = found(DESIGN);
    if !design.is_empty() {
        score += 1;
        cues.push(format!("design: {}", design.join(", ")));
    }
    let deps = found(DEPENDENCY);
    if !deps.is_empty() {
        score += 1;
        cues.push(format!("dependencies: {}", deps.join(", ")));
    }
    let exact = |list: &[&str]| words.iter().any(|w| list.contains(w));
    if score > 0 && exact(BREADTH) {
        score += 1;
        cues.push("breadth".to_string());
    }
    PlanScore { score, cues }
}

/// The seed's `shouldCreatePlan`: whether `message` scores at least
/// [`PLAN_THRESHOLD`].
pub fn should_create_plan(message: &str) -> bool {
    plan_score(message).score >= PLAN_THRESHOLD
}

/// The distinct files `message` mentions: words with a path separator or a
/// known extension (`src/main.rs`, `Cargo.toml`, `lib/`).
pub fn file_mentions(message: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for raw in message.split(|c: char| c.is_whitespace() || c == ',' || c == '`' || c == '"') {
        let w = raw.trim_matches(|c: char| matches!(c, '(' | ')' | '\'' | ':' | ';' | '?' | '!'));
        let w = w.strip_suffix('.').unwrap_or(w);
        if w.len() < 3 || w.starts_with("http") {
            continue;
        }
        let has_ext = w.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty() && EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
        });
        let is_path = w.contains('/')
            && w.chars().any(|c| c.is_alphabetic())
            && !w.contains("//")
            && w.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '*'));
        if (has_ext || is_path) && !files.iter().any(|f| f == w) {
            files.push(w.to_string());
        }
    }
    files
}
