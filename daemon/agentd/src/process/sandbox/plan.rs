//! The file-system plan of a sandbox: which paths get which access, worked
//! out level by level around the denied ones.
//!
//! Landlock only allows: a rule grants access to a whole subtree, and
//! nothing can take part of it back. So "read everything but `~/.ssh`"
//! cannot be one rule on `/`. Instead every directory on the way down to a
//! denied path gets only the right to list it, and each of its other
//! entries gets the full grant: `/` is listable, `/usr`, `/etc`, … are
//! readable, `/root` is listable, `/root/.ssh` gets nothing, and
//! `/root/proj` (and every other entry of `/root`) is readable. The plan is
//! made once and entries created later on a directory that is only
//! listable (a new file in `~`) are not covered by it.
//!
//! Pure: the directory listing is handed in, so tests need no file system.

use std::path::{Path, PathBuf};

/// What a rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Grant {
    /// List the directory (and the directories under it); read no file.
    List,
    /// Read, list and run everything under it.
    Read,
    /// Everything: read, write, create, remove.
    Write,
}

/// One rule of the plan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rule {
    pub(crate) path: PathBuf,
    pub(crate) grant: Grant,
}

/// The rules that give `grant` to each of `roots` except what is under
/// `denied`. `list` names the entries of a directory (full paths; symbolic
/// links left out: a link is followed when used, and then the rules of its
/// target hold). A root under a denied path gets nothing; a root with a
/// denied path under it is expanded level by level, as the module says.
pub(crate) fn plan(
    roots: &[(PathBuf, Grant)],
    denied: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<Rule> {
    let mut rules = Vec::new();
    for (root, grant) in roots {
        expand(root, *grant, denied, list, &mut rules, 0);
    }
    rules.sort();
    rules.dedup();
    rules
}

/// How deep the expansion goes: the deny list's paths are a handful of
/// levels deep; a deeper one (or a loop) stops here, the level left out.
const MAX_DEPTH: usize = 32;

fn expand(
    path: &Path,
    grant: Grant,
    denied: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
    rules: &mut Vec<Rule>,
    depth: usize,
) {
    if denied.iter().any(|d| path.starts_with(d)) || depth > MAX_DEPTH {
        return;
    }
    if !denied.iter().any(|d| d.starts_with(path)) {
        rules.push(Rule {
            path: path.to_path_buf(),
            grant,
        });
        return;
    }
    rules.push(Rule {
        path: path.to_path_buf(),
        grant: Grant::List,
    });
    for entry in list(path) {
        expand(&entry, grant, denied, list, rules, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A file system of the given paths (directories implied).
    fn tree(paths: &[&str]) -> BTreeMap<PathBuf, Vec<PathBuf>> {
        let mut dirs: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for p in paths {
            let mut path = PathBuf::from(p);
            while let Some(parent) = path.parent().map(Path::to_path_buf) {
                let children = dirs.entry(parent.clone()).or_default();
                if !children.contains(&path) {
                    children.push(path.clone());
                }
                path = parent;
            }
        }
        dirs
    }

    fn run(
        fs: &BTreeMap<PathBuf, Vec<PathBuf>>,
        roots: &[(&str, Grant)],
        denied: &[&str],
    ) -> Vec<Rule> {
        let roots: Vec<(PathBuf, Grant)> =
            roots.iter().map(|(p, g)| (PathBuf::from(p), *g)).collect();
        let denied: Vec<PathBuf> = denied.iter().map(PathBuf::from).collect();
        plan(&roots, &denied, &|dir| {
            fs.get(dir).cloned().unwrap_or_default()
        })
    }

    fn rule(path: &str, grant: Grant) -> Rule {
        Rule {
            path: PathBuf::from(path),
            grant,
        }
    }

    #[test]
    fn a_denied_directory_is_cut_out_level_by_level() {
        let fs = tree(&[
            "/usr/bin/bash",
            "/root/.ssh/id_ed25519",
            "/root/proj/src/main.rs",
            "/root/.bashrc",
            "/tmp/x",
        ]);
        let rules = run(&fs, &[("/", Grant::Read)], &["/root/.ssh"]);
        assert_eq!(
            rules,
            vec![
                rule("/", Grant::List),
                rule("/root", Grant::List),
                rule("/root/.bashrc", Grant::Read),
                rule("/root/proj", Grant::Read),
                rule("/tmp", Grant::Read),
                rule("/usr", Grant::Read),
            ]
        );
    }

    #[test]
    fn roots_without_denied_paths_are_one_rule_and_roots_inside_them_none() {
        let fs = tree(&["/w/a", "/data/db/x", "/tmp/t/data/y", "/tmp/t/work/z"]);
        let rules = run(
            &fs,
            &[
                ("/w", Grant::Write),
                ("/data/db", Grant::Write),
                ("/tmp", Grant::Write),
            ],
            &["/data", "/tmp/t/data"],
        );
        assert_eq!(
            rules,
            vec![
                rule("/tmp", Grant::List),
                rule("/tmp/t", Grant::List),
                rule("/tmp/t/work", Grant::Write),
                rule("/w", Grant::Write),
            ]
        );
    }

    #[test]
    fn a_denied_file_is_left_out_and_its_siblings_kept() {
        let fs = tree(&["/etc/agentd/credentials", "/etc/agentd/other", "/etc/hosts"]);
        let rules = run(&fs, &[("/etc", Grant::Read)], &["/etc/agentd/credentials"]);
        assert_eq!(
            rules,
            vec![
                rule("/etc", Grant::List),
                rule("/etc/agentd", Grant::List),
                rule("/etc/agentd/other", Grant::Read),
                rule("/etc/hosts", Grant::Read),
            ]
        );
    }

    proptest! {
        /// Whatever the tree and the deny list: no rule covers a denied
        /// path except to list it, and every path of the tree that is not
        /// under a denied one is covered by a rule with the full grant.
        #[test]
        fn denied_paths_are_never_granted_and_the_rest_always(
            files in proptest::collection::vec("(/[abc]){1,4}", 1..12),
            denied in proptest::collection::vec("(/[abc]){1,3}", 0..4),
        ) {
            let refs: Vec<&str> = files.iter().map(String::as_str).collect();
            let fs = tree(&refs);
            let denied_refs: Vec<&str> = denied.iter().map(String::as_str).collect();
            let rules = run(&fs, &[("/", Grant::Read)], &denied_refs);
            let under = |p: &Path, d: &str| p.starts_with(d);
            for r in &rules {
                if r.grant != Grant::List {
                    prop_assert!(!denied.iter().any(|d| under(&r.path, d) || Path::new(d).starts_with(&r.path)), "{r:?}");
                }
            }
            for f in &files {
                let f = Path::new(f);
                // Denied, or on the way to a denied path (only listable).
                if denied.iter().any(|d| under(f, d) || Path::new(d).starts_with(f)) {
                    continue;
                }
                prop_assert!(rules.iter().any(|r| r.grant == Grant::Read && f.starts_with(&r.path)), "{f:?} not readable: {rules:?}");
            }
        }
    }
}
