use super::*;
use crate::hooks::pins_under;

/// A directory trusted now, as `agent trust` records it.
fn trusting(dir: &Path) -> (PathBuf, TrustRecord) {
    (
        dir.to_path_buf(),
        TrustRecord {
            pinned: pins_under(dir),
        },
    )
}

fn type_file(dir: &Path, file: &str, name: &str, tools: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(file);
    std::fs::write(
        &path,
        format!(
            "---\nname: {name}\ndescription: The {name}\ntools: {tools}\n---\nYou are {name}.\n"
        ),
    )
    .unwrap();
    path
}

/// Each listed type: origin, name (or the error's start), usable.
fn seen(listing: &Listing) -> Vec<String> {
    listing
        .types
        .iter()
        .map(|l| match &l.agent {
            Ok(a) => format!("{} {} {}", l.origin.as_str(), a.name, l.usable),
            Err(e) => format!("{} error {e}", l.origin.as_str()),
        })
        .collect()
}

#[test]
fn project_types_load_only_from_a_trusted_project_and_win_over_the_users() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let (project, user) = (root.join("repo"), root.join("config"));
    let sub = project.join("src");
    std::fs::create_dir_all(&sub).unwrap();
    type_file(
        &project.join(PROJECT_DIR),
        "reviewer.md",
        "reviewer",
        "read, grep, glob",
    );
    type_file(&user.join(USER_DIR), "a.md", "reviewer", "bash");
    type_file(&user.join(USER_DIR), "b.md", "scout", "Read, Frobnicate");
    std::fs::write(user.join(USER_DIR).join("notes.txt"), "not a type").unwrap();
    let catalog = Catalog::default();

    // Not trusted: the project's types are not loaded, and the note says
    // why and what to do.
    let listing = catalog.list(Some(&user), &sub, &[]);
    assert_eq!(seen(&listing), ["user reviewer true", "user scout true"]);
    assert_eq!(listing.notes.len(), 1);
    assert!(
        listing.notes[0].contains("not trusted")
            && listing.notes[0].contains(&format!("agent trust {}", project.display())),
        "{:?}",
        listing.notes
    );

    // Trusted: the project's reviewer wins over the user's.
    let trusted = [trusting(&root)];
    let listing = catalog.list(Some(&user), &sub, &trusted);
    assert!(listing.notes.is_empty());
    assert_eq!(
        seen(&listing),
        [
            "project reviewer true",
            "user reviewer false",
            "user scout true"
        ]
    );
    let (found, agent) = listing.find("reviewer").unwrap();
    assert_eq!(found.origin, Origin::Project);
    assert_eq!(
        found.tools,
        Some(["read", "grep", "glob"].map(String::from).to_vec())
    );
    assert_eq!(agent.prompt, "You are reviewer.");
    assert!(listing.types[1].problems[0].contains("wins"));
    let scout = &listing.types[2];
    assert_eq!(scout.tools, Some(vec!["read".to_string()]));
    assert_eq!(scout.problems, ["unknown tool `Frobnicate` is left out"]);
    assert_eq!(listing.names(), "reviewer, scout");
    let spec = listing.spawn_spec().unwrap();
    assert_eq!(
        spec.input_schema
            .pointer("/properties/agents/items/properties/agent_type/enum")
            .unwrap(),
        &serde_json::json!(["reviewer", "scout"])
    );

    // Changed since it was trusted: not loaded, and the user's wins again.
    type_file(
        &project.join(PROJECT_DIR),
        "reviewer.md",
        "reviewer",
        "bash",
    );
    let listing = catalog.list(Some(&user), &sub, &trusted);
    let s = seen(&listing);
    assert!(
        s[0].starts_with(
            "project error type reviewer is not loaded: it changed since its directory was trusted"
        ),
        "{s:?}"
    );
    assert_eq!(listing.find("reviewer").unwrap().0.origin, Origin::User);
}

#[test]
fn a_bad_file_is_listed_with_its_error_and_the_rest_load() {
    let user = tempfile::tempdir().unwrap();
    let dir = user.path().join(USER_DIR);
    type_file(&dir, "good.md", "good", "read");
    std::fs::write(dir.join("bad.md"), "---\nname: bad\n").unwrap();
    std::fs::write(dir.join("big.md"), vec![b'a'; MAX_FILE_BYTES as usize + 1]).unwrap();
    let listing = Catalog::default().list(Some(user.path()), user.path(), &[]);
    let s = seen(&listing);
    assert!(
        s[0].contains("bad.md:1: the front matter is not closed"),
        "{s:?}"
    );
    assert!(s[1].contains("at most 65536"), "{s:?}");
    assert_eq!(s[2], "user good true");
    assert!(Listing::default().spawn_spec().is_none());
}

#[test]
fn an_unchanged_file_is_not_read_again() {
    let user = tempfile::tempdir().unwrap();
    let dir = user.path().join(USER_DIR);
    let path = type_file(&dir, "a.md", "first", "read");
    let catalog = Catalog::default();
    assert_eq!(
        catalog.list(Some(user.path()), user.path(), &[]).names(),
        "first"
    );
    // Same size and time: the cached reading serves.
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    type_file(&dir, "a.md", "other", "read");
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(modified).unwrap();
    drop(f);
    assert_eq!(
        catalog.list(Some(user.path()), user.path(), &[]).names(),
        "first"
    );
    // A change of time: read again.
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(modified + std::time::Duration::from_secs(5))
        .unwrap();
    drop(f);
    assert_eq!(
        catalog.list(Some(user.path()), user.path(), &[]).names(),
        "other"
    );
}
