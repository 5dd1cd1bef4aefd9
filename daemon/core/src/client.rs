//! Who is talking to a conversation, and what they may do.

use serde::{Deserialize, Serialize};

/// A client attached to a conversation, or one that answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// The id the daemon gave the client's connection.
    pub id: String,
    /// The name the client gave (`user@host`, an editor's name, …).
    pub name: String,
    /// What it may do. Records written before roles existed came from the
    /// local socket, where every client was a driver.
    #[serde(default)]
    pub role: ClientRole,
    /// The name of the token it connected with over TCP (`None` on the
    /// local socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_name: Option<String>,
    /// Its network address over TCP (`None` on the local socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl ClientInfo {
    /// A local client (the Unix socket) with the given id, name and role.
    pub fn local(id: impl Into<String>, name: impl Into<String>, role: ClientRole) -> ClientInfo {
        ClientInfo {
            id: id.into(),
            name: name.into(),
            role,
            token_name: None,
            address: None,
        }
    }
}

/// What a client may do; each role may do everything the ones before it
/// may (the derived order is that inclusion).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ClientRole {
    /// Sees everything, changes nothing.
    Viewer,
    /// Also answers permission (and plan) requests.
    Approver,
    /// Also sends messages, cancels, changes settings, kills shells, ….
    #[default]
    Driver,
}

impl ClientRole {
    /// Every role, least first.
    pub const ALL: [ClientRole; 3] = [ClientRole::Viewer, ClientRole::Approver, ClientRole::Driver];

    /// Whether this role may do what `needed` may.
    pub fn allows(self, needed: ClientRole) -> bool {
        self >= needed
    }

    /// The role a client gets when it asks for `asked` (`None`: no
    /// preference) on a connection that allows `self`: never more than the
    /// connection allows.
    pub fn capped(self, asked: Option<ClientRole>) -> ClientRole {
        asked.map_or(self, |asked| asked.min(self))
    }

    /// The role's name, as people write it.
    pub fn name(self) -> &'static str {
        match self {
            ClientRole::Viewer => "viewer",
            ClientRole::Approver => "approver",
            ClientRole::Driver => "driver",
        }
    }

    /// The role named `name` (as [`ClientRole::name`] writes it).
    pub fn parse(name: &str) -> Option<ClientRole> {
        ClientRole::ALL
            .into_iter()
            .find(|r| r.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl std::fmt::Display for ClientRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn role() -> impl Strategy<Value = ClientRole> {
        prop::sample::select(ClientRole::ALL.to_vec())
    }

    proptest! {
        /// Asking for a role never gives more than the connection allows,
        /// and gives exactly what was asked when that is allowed.
        #[test]
        fn a_capped_role_never_exceeds_the_connection(conn in role(), asked in prop::option::of(role())) {
            let got = conn.capped(asked);
            prop_assert!(conn.allows(got));
            match asked {
                Some(a) if conn.allows(a) => prop_assert_eq!(got, a),
                Some(_) => prop_assert_eq!(got, conn),
                None => prop_assert_eq!(got, conn),
            }
        }

        /// `allows` is the inclusion of roles: reflexive and transitive,
        /// and of two different roles exactly one allows the other.
        #[test]
        fn roles_are_nested(a in role(), b in role(), c in role()) {
            prop_assert!(a.allows(a));
            if a.allows(b) && b.allows(c) {
                prop_assert!(a.allows(c));
            }
            if a != b {
                prop_assert!(a.allows(b) != b.allows(a));
            }
        }
    }

    #[test]
    fn names_round_trip_and_old_records_read_as_drivers() {
        for r in ClientRole::ALL {
            assert_eq!(ClientRole::parse(r.name()), Some(r));
        }
        assert_eq!(ClientRole::parse("owner"), None);
        let old: ClientInfo = serde_json::from_str(r#"{"id":"c1","name":"al@box"}"#).unwrap();
        assert_eq!(old, ClientInfo::local("c1", "al@box", ClientRole::Driver));
    }
}
