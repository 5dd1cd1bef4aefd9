//! The command line's words read before clap parses them: which
//! subcommand they name (so only it gets the global options), and how far
//! a word is from a subcommand's name (a misspelt command is not a prompt).

/// The subcommand a command line (without the program's name) runs, as
/// clap will find it: the first word that is not an option or an option's
/// value, when it names a subcommand (`help NAME`: NAME). `None` for an
/// interactive session (no word, or a prompt).
pub(super) fn named_subcommand(
    command: &clap::Command,
    words: &[std::ffi::OsString],
) -> Option<String> {
    let takes_value = |arg: Option<&clap::Arg>| arg.is_some_and(|a| a.get_action().takes_values());
    let mut words = words.iter();
    let mut after_help = false;
    while let Some(word) = words.next() {
        // Lossy: a path in `--socket=…` need not be UTF-8, and no
        // subcommand name has a replacement character.
        let word = word.to_string_lossy();
        let word = word.as_ref();
        if word == "--" {
            return None;
        }
        if let Some(long) = word.strip_prefix("--") {
            if !long.contains('=')
                && takes_value(command.get_arguments().find(|a| a.get_long() == Some(long)))
            {
                words.next();
            }
            continue;
        }
        if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-xy`: flags, up to one that takes a value (the rest of the
            // word, else the next word).
            for (at, c) in shorts.char_indices() {
                if takes_value(command.get_arguments().find(|a| a.get_short() == Some(c))) {
                    if at + c.len_utf8() == shorts.len() {
                        words.next();
                    }
                    break;
                }
            }
            continue;
        }
        if word == "help" && !after_help {
            after_help = true;
            continue;
        }
        return command
            .find_subcommand(word)
            .map(|sub| sub.get_name().to_string());
    }
    None
}

/// Levenshtein distance, for telling a misspelt command from a prompt.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}
