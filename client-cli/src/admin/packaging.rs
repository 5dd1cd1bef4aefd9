//! The packaging helpers: `agent completions` and `agent man`, built from
//! the whole command tree.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{line, out_err};
use crate::cli::Cli;
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell, io: &mut Io) -> Result<Exit, CliError> {
    let mut command = whole_command();
    // Into memory first: clap_complete panics when a write fails (a reader
    // that went away, `agent completions bash | head`).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "agent", &mut script);
    io.out.write_all(&script).map_err(out_err)?;
    io.out.flush().map_err(out_err)?;
    Ok(Exit::Ok)
}

/// `agent man [--out DIR]`: `agent.1` on stdout, or every page (`agent.1`,
/// `agent-run.1`, `agent-daemon-stop.1`, …) written into DIR.
pub fn man(out: Option<PathBuf>, io: &mut Io) -> Result<Exit, CliError> {
    let command = whole_command();
    match out {
        None => {
            clap_mangen::Man::new(command)
                .render(&mut io.out)
                .map_err(out_err)?;
            io.out.flush().map_err(out_err)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| CliError::io(format!("cannot create {}", dir.display()), e))?;
            let mut written = Vec::new();
            write_pages(command, &dir, &mut written)?;
            for path in &written {
                line(io, &path.display().to_string())?;
            }
        }
    }
    Ok(Exit::Ok)
}

/// Every command, argument and subcommand, built, as completions and man
/// pages show them. The subcommands' own parts are made when the tree is
/// built (`defer` in [`crate::cli::Command`]), after clap has copied the
/// tree under `help` (for `agent help daemon stop`): their subcommands are
/// added to that copy here.
fn whole_command() -> clap::Command {
    use clap::CommandFactory as _;
    let mut command = Cli::command();
    command.build();
    let nested: Vec<(String, Vec<clap::Command>)> = command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help" && sub.has_subcommands())
        .map(|sub| {
            let under = format!("{} help {}", command.get_name(), sub.get_name());
            let copies = help_copies(sub, &under);
            (sub.get_name().to_string(), copies)
        })
        .collect();
    // In place, in clap's order; a copy that is not there is left alone.
    command.mut_subcommands(|sub| {
        if sub.get_name() != "help" {
            return sub;
        }
        sub.mut_subcommands(|copy| {
            match nested.iter().find(|(name, _)| name == copy.get_name()) {
                // Only where clap copied none (they did not exist yet).
                Some((_, copies)) if !copy.has_subcommands() => copy.subcommands(copies.clone()),
                _ => copy,
            }
        })
    })
}

/// The subcommands of `command` as clap copies them under `help`: name,
/// description and subcommands, no arguments, no `help` of their own;
/// `under` is their parent's command line.
fn help_copies(command: &clap::Command, under: &str) -> Vec<clap::Command> {
    command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
        .map(|sub| {
            let bin_name = format!("{under} {}", sub.get_name());
            let mut copy = clap::Command::new(sub.get_name().to_string())
                .hide(sub.is_hide_set())
                .disable_help_flag(true)
                .disable_version_flag(true)
                .disable_help_subcommand(true)
                .subcommands(help_copies(sub, &bin_name))
                .bin_name(bin_name);
            if let Some(about) = sub.get_about() {
                copy = copy.about(about.clone());
            }
            copy
        })
        .collect()
}

/// Writes the page of `command` and of each subcommand, depth first.
fn write_pages(
    command: clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), CliError> {
    let mut command = command;
    command.build();
    let name = command
        .get_display_name()
        .unwrap_or(command.get_name())
        .to_string();
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut page)
        .map_err(out_err)?;
    std::fs::write(&path, page)
        .map_err(|e| CliError::io(format!("cannot write {}", path.display()), e))?;
    written.push(path);
    for sub in command.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub.clone(), dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::tests::captured;

    /// Every shell's script names the subcommands and their arguments, and
    /// knows the tree under `help` (`agent help budget raise`): the
    /// subcommands' own parts are built late (`defer`), after clap copies
    /// the tree under `help`.
    #[test]
    fn completions_know_every_subcommand_its_arguments_and_help() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
            clap_complete::Shell::Elvish,
            clap_complete::Shell::PowerShell,
        ] {
            let (mut io, out) = captured();
            completions(shell, &mut io).unwrap();
            let text = out.out.text();
            let under_help = match shell {
                clap_complete::Shell::Bash => "agent__subcmd__help__subcmd__budget__subcmd__raise",
                clap_complete::Shell::Zsh => {
                    "_agent__subcmd__help__subcmd__budget__subcmd__raise_commands"
                }
                clap_complete::Shell::Fish => {
                    "__fish_agent_using_subcommand help; and __fish_seen_subcommand_from budget\" -f -a \"raise\""
                }
                _ => "'agent;help;budget;raise'",
            };
            let expected = ["run", "attach", "doctor", "login", "daemon"]
                .into_iter()
                .chain(["steps-file", "drop-all", "add-dir"])
                .chain([under_help]);
            for word in expected {
                assert!(text.contains(word), "{shell:?} lacks {word}:\n{text}");
            }
        }
    }

    #[test]
    fn man_pages_cover_every_subcommand() {
        let (mut io, out) = captured();
        man(None, &mut io).unwrap();
        let page = out.out.text();
        assert!(page.contains(".TH"), "{page}");
        assert!(page.contains("doctor") && page.contains("login"), "{page}");

        let dir = tempfile::tempdir().unwrap();
        let (mut io, out) = captured();
        man(Some(dir.path().to_path_buf()), &mut io).unwrap();
        for name in [
            "agent.1",
            "agent-run.1",
            "agent-daemon-stop.1",
            "agent-shells-kill.1",
            "agent-login.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(!text.is_empty(), "{name}");
            assert!(out.out.text().contains(name), "{name} not listed");
        }
        let run = std::fs::read_to_string(dir.path().join("agent-run.1")).unwrap();
        assert!(run.contains("PROMPT"), "{run}");
        // Each page says what its subcommand does (the variant's doc comment,
        // not the doc comment of the type holding its arguments).
        for (name, says) in [
            ("agent-run.1", "Start a new conversation with PROMPT"),
            ("agent-shells.1", "List background shells"),
            ("agent-budget.1", "Answer a budget that holds"),
            ("agent-daemon.1", "Stop, restart or inspect the daemon"),
        ] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(text.contains(says), "{name} does not say {says:?}:\n{text}");
        }
    }
}
