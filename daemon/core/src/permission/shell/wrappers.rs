//! Commands that other commands run: `rm x` in `xargs rm x`, `find . -exec
//! rm {} ;`, `sudo rm x`, `env A=1 rm x`, `A=1 rm x`, `sh -c 'rm x'`,
//! `eval 'rm x'`.
//!
//! Deny and ask rules judge these too, so that a denied command is not let
//! through by the program that runs it. Allow rules do not: the command
//! that runs them is judged as written, and allowing it (`xargs:*`) is the
//! user's choice. A command line held in a variable (`sh -c "$CMD"`) is a
//! command whose text is unknown, which a deny rule might match.

use super::{FileWrite, MAX_DEPTH, Word, is_assignment, parse_at};

/// Wrapped commands and the file writes of wrapped command lines.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub commands: Vec<Vec<Word>>,
    pub writes: Vec<FileWrite>,
}

/// Options, per wrapper, that take the next word as their value.
const ENV_OPTIONS: &[&str] = &["-u", "--unset", "-C", "--chdir", "-P"];
const SUDO_OPTIONS: &[&str] = &[
    "-u",
    "--user",
    "-g",
    "--group",
    "-C",
    "--close-from",
    "-D",
    "--chdir",
    "-h",
    "--host",
    "-p",
    "--prompt",
    "-r",
    "--role",
    "-t",
    "--type",
    "-U",
    "--other-user",
    "-T",
    "--command-timeout",
];
const XARGS_OPTIONS: &[&str] = &[
    "-I",
    "-L",
    "-n",
    "-P",
    "-s",
    "-d",
    "-E",
    "-a",
    "--arg-file",
    "--delimiter",
    "--max-args",
    "--max-procs",
    "--max-chars",
    "--max-lines",
    "--replace",
    "--eof",
    "--process-slot-var",
];
const TIMEOUT_OPTIONS: &[&str] = &["-s", "--signal", "-k", "--kill-after"];
const SHELL_OPTIONS: &[&str] = &["-o", "+o", "-O", "+O", "--rcfile", "--init-file"];
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"];

/// The commands that the commands in `commands` run, found `depth` levels
/// deep.
pub(super) fn find(commands: &[Vec<Word>], depth: usize) -> Found {
    let mut found = Found::default();
    for words in commands {
        inner(words, depth, &mut found);
    }
    found
}

/// What the command `words` runs.
fn inner(words: &[Word], depth: usize, found: &mut Found) {
    if depth >= MAX_DEPTH {
        if let Some(first) = words.first() {
            found.commands.push(vec![Word::unknown(&first.raw)]);
        }
        return;
    }
    let assignments = words.iter().take_while(|w| is_assignment(&w.raw)).count();
    let rest = &words[assignments..];
    if rest.is_empty() {
        return;
    }
    if assignments > 0 {
        // `A=1 rm x` runs `rm x`.
        run(rest, depth, found);
        return;
    }
    let Some(program) = rest[0].literal.as_deref() else {
        return;
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    let args = &rest[1..];
    match program {
        "env" => env(args, depth, found),
        "sudo" => run(skip_options(args, SUDO_OPTIONS), depth, found),
        "doas" => run(skip_options(args, &["-u", "-C"]), depth, found),
        "nohup" | "setsid" | "builtin" | "chronic" | "coproc" => {
            run(skip_options(args, &[]), depth, found);
        }
        "command" => {
            let lists = args
                .iter()
                .take_while(|w| w.literal.as_deref().is_some_and(|l| l.starts_with('-')))
                .any(|w| w.literal.as_deref().is_some_and(|l| l.contains(['v', 'V'])));
            if !lists {
                run(skip_options(args, &[]), depth, found);
            }
        }
        "exec" => run(skip_options(args, &["-a"]), depth, found),
        "nice" => run(skip_options(args, &["-n", "--adjustment"]), depth, found),
        "ionice" => run(
            skip_options(args, &["-c", "-n", "--class", "--classdata"]),
            depth,
            found,
        ),
        "stdbuf" => run(skip_options(args, &["-i", "-o", "-e"]), depth, found),
        "time" => run(
            skip_options(args, &["-f", "--format", "-o", "--output"]),
            depth,
            found,
        ),
        "timeout" => {
            let after = skip_options(args, TIMEOUT_OPTIONS);
            run(after.get(1..).unwrap_or_default(), depth, found);
        }
        "xargs" => run(skip_options(args, XARGS_OPTIONS), depth, found),
        "find" => find_exec(args, depth, found),
        "eval" => literal_line(args, &rest[0], depth, found),
        "watch" => {
            let after = skip_options(args, &["-n", "--interval", "-d", "--differences"]);
            literal_line(after, &rest[0], depth, found);
        }
        shell if SHELLS.contains(&shell) => shell_c(args, &rest[0], depth, found),
        _ => {}
    }
}

/// `env`: the command after its options and assignments, or the command
/// line of `-S`.
fn env(args: &[Word], depth: usize, found: &mut Found) {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        match w.literal.as_deref() {
            Some("-S" | "--split-string") => {
                if let Some(line) = args.get(i + 1) {
                    command_line(line, depth, found);
                }
                return;
            }
            Some(o) if o.starts_with("--split-string=") || o.starts_with("-S") => {
                unknown(w, found);
                return;
            }
            _ => {}
        }
        i += 1;
    }
    let after = skip_options(args, ENV_OPTIONS);
    let command = after.iter().skip_while(|w| is_assignment(&w.raw)).count();
    run(&after[after.len() - command..], depth, found);
}

/// `find`: the commands of its `-exec`, `-execdir`, `-ok` and `-okdir`
/// actions.
fn find_exec(args: &[Word], depth: usize, found: &mut Found) {
    let mut i = 0;
    while i < args.len() {
        let action = args[i].literal.as_deref();
        if matches!(action, Some("-exec" | "-execdir" | "-ok" | "-okdir")) {
            let start = i + 1;
            let mut end = start;
            while end < args.len() && !matches!(args[end].literal.as_deref(), Some(";" | "+")) {
                end += 1;
            }
            run(&args[start..end], depth, found);
            i = end;
        }
        i += 1;
    }
}

/// `eval` and `watch`: their words joined are a command line; `program`
/// names it when a word expands.
fn literal_line(words: &[Word], program: &Word, depth: usize, found: &mut Found) {
    let text: Option<Vec<&str>> = words.iter().map(|w| w.literal.as_deref()).collect();
    match text {
        Some(parts) if !parts.is_empty() => {
            text_line(&parts.join(" "), program, depth, found);
        }
        Some(_) => {}
        None => unknown(program, found),
    }
}

/// A shell (`sh`, `bash`, …): with `-c`, the command line after its
/// options; `program` names it when there is none.
fn shell_c(args: &[Word], program: &Word, depth: usize, found: &mut Found) {
    let mut i = 0;
    let mut dash_c = false;
    while let Some(w) = args.get(i) {
        let Some(option) = w.literal.as_deref() else {
            break;
        };
        if option == "--" {
            i += 1;
            break;
        }
        if !(option.starts_with('-') || option.starts_with('+')) || option.len() < 2 {
            break;
        }
        i += 1;
        if SHELL_OPTIONS.contains(&option) {
            i += 1;
        } else if option.starts_with('-') && !option.starts_with("--") && option.contains('c') {
            dash_c = true;
        }
    }
    if dash_c {
        match args.get(i) {
            Some(line) => command_line(line, depth, found),
            None => unknown(program, found),
        }
    }
}

/// The words after a wrapper's options: options in `with_value` take the
/// next word. A word with an expansion ends the options (it could be
/// anything, so it is taken as the command, whose text is unknown).
fn skip_options<'a>(args: &'a [Word], with_value: &[&str]) -> &'a [Word] {
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let Some(option) = option_text(w) else {
            break;
        };
        if option == "--" {
            i += 1;
            break;
        }
        if !option.starts_with('-') || option == "-" {
            break;
        }
        i += 1;
        if with_value.contains(&option) {
            i += 1;
        }
    }
    args.get(i..).unwrap_or_default()
}

/// The text of a word that may be an option: its literal text, or its
/// source when it starts with `-` and expands nothing but braces and globs
/// (`-I{}`).
fn option_text(w: &Word) -> Option<&str> {
    w.literal.as_deref().or_else(|| {
        (w.raw.starts_with('-') && !w.raw.contains(['$', '`', '\'', '"', '\\']))
            .then_some(w.raw.as_str())
    })
}

/// `words` is a command another one runs.
fn run(words: &[Word], depth: usize, found: &mut Found) {
    if words.is_empty() {
        return;
    }
    found.commands.push(words.to_vec());
    inner(words, depth + 1, found);
}

/// A command line given as one word (`sh -c '…'`).
fn command_line(word: &Word, depth: usize, found: &mut Found) {
    match word.literal.as_deref() {
        Some(text) => text_line(text, word, depth, found),
        None => unknown(word, found),
    }
}

/// A command line given as text; `word` names it when it cannot be read.
fn text_line(text: &str, word: &Word, depth: usize, found: &mut Found) {
    let Ok(script) = parse_at(text, depth + 1) else {
        unknown(word, found);
        return;
    };
    found.commands.extend(script.commands);
    found.commands.extend(script.wrapped);
    for mut write in script.writes.into_iter().chain(script.wrapped_writes) {
        // After a `cd` in there, a relative target could be anywhere.
        let absolute = write
            .target
            .literal
            .as_deref()
            .is_some_and(|t| t.starts_with('/'));
        if script.changes_dir && !absolute {
            write.target.literal = None;
        }
        found.writes.push(write);
    }
}

/// A command whose text is unknown.
fn unknown(word: &Word, found: &mut Found) {
    found.commands.push(vec![Word::unknown(&word.raw)]);
}
