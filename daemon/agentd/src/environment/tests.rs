use super::*;
use crate::store::Store;

fn sent(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value(launch: &Launch, name: &str) -> Option<String> {
    launch
        .env()?
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.to_string_lossy().into_owned())
}

const SENT: [(&str, &str); 4] = [
    ("FOO", "bar"),
    ("GITHUB_TOKEN", "held-value"),
    ("ANTHROPIC_API_KEY", "sk-client"),
    ("PATH", "/usr/bin:/bin"),
];

#[test]
fn held_variables_reach_commands_until_a_restart_and_never_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let envs = Environments::new(store.environments_tree(), Policy::default());
    assert!(
        envs.launch("c1").env().is_none(),
        "no environment: the daemon's"
    );
    assert_eq!(envs.origin("c1").unwrap(), None);

    envs.receive("c1", sent(&SENT), 1_000).unwrap();
    let launch = envs.launch("c1");
    assert_eq!(value(&launch, "FOO").as_deref(), Some("bar"));
    assert_eq!(
        value(&launch, "GITHUB_TOKEN").as_deref(),
        Some("held-value")
    );
    assert_eq!(value(&launch, "ANTHROPIC_API_KEY"), None);
    assert!(Arc::ptr_eq(&launch, &envs.launch("c1")), "built once");
    envs.unloaded("c1");
    let rebuilt = envs.launch("c1");
    assert!(!Arc::ptr_eq(&launch, &rebuilt), "built again once unloaded");
    assert_eq!(rebuilt, launch, "with the held variable still there");
    let origin = Origin {
        set_at_ms: 1_000,
        variables: 3,
        held: 1,
        missing: 0,
    };
    assert_eq!(envs.origin("c1").unwrap(), Some(origin.clone()));
    let stored = envs.read("c1").unwrap().unwrap();
    assert_eq!(stored.held, ["GITHUB_TOKEN"]);
    assert!(!stored.vars.contains_key("GITHUB_TOKEN"));

    // A restart: what was stored is back, the held value is not.
    let again = Environments::new(store.environments_tree(), Policy::default());
    let launch = again.launch("c1");
    assert_eq!(value(&launch, "FOO").as_deref(), Some("bar"));
    assert_eq!(value(&launch, "GITHUB_TOKEN"), None);
    assert_eq!(
        again.origin("c1").unwrap(),
        Some(Origin {
            missing: 1,
            ..origin
        })
    );
}

#[test]
fn a_copy_takes_everything_and_a_refresh_replaces_the_launch() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let envs = Environments::new(store.environments_tree(), Policy::default());
    envs.receive("parent", sent(&SENT), 1).unwrap();
    envs.copy("parent", "child").unwrap();
    envs.copy("nobody", "other").unwrap();
    let child = envs.launch("child");
    assert_eq!(value(&child, "GITHUB_TOKEN").as_deref(), Some("held-value"));
    assert!(envs.launch("other").env().is_none());
    envs.receive("child", sent(&[("FOO", "new")]), 2).unwrap();
    assert_eq!(value(&envs.launch("child"), "FOO").as_deref(), Some("new"));
}
