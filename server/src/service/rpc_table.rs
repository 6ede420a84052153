//! One table of per-RPC facts for `sandbox.v1.SandboxService`: whether a call changes something
//! (the audit log writes a line for it), where its sandbox id is, what access it needs, and
//! whether a relaying node forwards it to the node its sandbox runs on. The audit log
//! (`crate::audit`), the handlers' scope checks (`const { scope("X") }`, a typo is a compile
//! error), the relay layer (`service/forward.rs`) and `docs/access.md` all read it; a test walks
//! the generated service descriptor and fails on any RPC this table does not classify, so a new
//! RPC cannot be forgotten in one of those lists.

use crate::auth::Scope;

/// Where a call's sandbox id sits in its first request message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdAt {
    /// `string sandbox_id = 1`.
    Field1,
    /// Field 1 is a message (`UploadHeader`, `SandboxRef`, `PortForwardOpen`) whose field 1 is
    /// the id.
    Nested,
    /// A `PtyRequest`: `open` (1) or `attach` (6), each with the id in its field 1.
    Pty,
}

/// What a caller must present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A token for the call's sandbox with at least this scope, the tenant key that owns the
    /// sandbox (anyone else's is NOT_FOUND), or the operator.
    Sandbox(Scope),
    /// A tenant key or the operator: a capability token reaches only its own sandbox.
    Key,
    /// `Grant`: the scope it grants, on the sandbox it names (never wider than the caller's).
    GrantedScope,
    /// `Revoke`: an owner token, a tenant key or the operator.
    OwnerTokenOrKey,
}

/// The facts of one RPC.
#[derive(Debug, Clone, Copy)]
pub struct Rpc {
    /// The method name in `sandbox.v1.SandboxService`.
    pub name: &'static str,
    /// It changes something (or hands out access): the audit log writes a line for it,
    /// refusals included.
    pub mutating: bool,
    /// Where its sandbox id is (`None`: it is about no one sandbox, or about a snapshot).
    pub sandbox_id: Option<IdAt>,
    /// What the caller must present.
    pub need: Need,
    /// A relaying node (cluster mode) forwards it to the node its sandbox runs on; the others
    /// are answered by the node called.
    pub forwarded: bool,
}

const fn rpc(
    name: &'static str,
    mutating: bool,
    sandbox_id: Option<IdAt>,
    need: Need,
    forwarded: bool,
) -> Rpc {
    Rpc { name, mutating, sandbox_id, need, forwarded }
}

use IdAt::{Field1, Nested, Pty};
use Need::{GrantedScope, Key, OwnerTokenOrKey, Sandbox};
use Scope::{Operate, Owner, Read};

const MUT: bool = true;
const READS: bool = false;
const FWD: bool = true;
const HERE: bool = false;

/// Every RPC of `sandbox.v1.SandboxService`, in the proto's order. A new RPC gets a row here
/// (the descriptor test says so, with the row to add).
pub const RPCS: &[Rpc] = &[
    rpc("Create", MUT, None, Key, HERE),
    // Connect hands back the token it was given: audited as a change of who holds access.
    rpc("Connect", MUT, Some(Nested), Sandbox(Read), FWD),
    rpc("Exec", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("Upload", MUT, Some(Nested), Sandbox(Operate), FWD),
    rpc("Download", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("Status", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("Endpoint", READS, Some(Field1), Sandbox(Operate), FWD),
    // Close runs where its sandbox runs, so the owning node tells its watchers why; a node
    // that is down is closed from the node called.
    rpc("Close", MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc("Pty", MUT, Some(Pty), Sandbox(Operate), FWD),
    rpc("ExecStream", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("List", READS, None, Key, HERE),
    rpc("SetTimeout", MUT, Some(Field1), Sandbox(Owner), FWD),
    // Snapshots and forks: cluster mode does not offer them, so they are never relayed.
    rpc("Snapshot", MUT, Some(Field1), Sandbox(Owner), HERE),
    rpc("ListSnapshots", READS, None, Key, HERE),
    rpc("DeleteSnapshot", MUT, None, Key, HERE),
    rpc("Fork", MUT, Some(Field1), Sandbox(Owner), HERE),
    rpc("Diff", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("Pause", MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc("Resume", MUT, Some(Field1), Sandbox(Owner), FWD),
    // Relayed to the sandbox's node: its checkpoint is written there, and a live fork of it
    // must run there too (the checkpoint does not move between nodes).
    rpc("Checkpoint", MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc("Hibernate", MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc("Grant", MUT, Some(Field1), GrantedScope, HERE),
    rpc("Revoke", MUT, None, OwnerTokenOrKey, HERE),
    rpc("Logs", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("NetworkAddress", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("ListVolumes", READS, None, Key, HERE),
    rpc("DeleteVolume", MUT, None, Key, HERE),
    rpc("Watch", READS, None, Key, HERE),
    rpc("Stats", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("StatsStream", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("SetNetworkPolicy", MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc("CreatePool", MUT, None, Key, HERE),
    rpc("ListPools", READS, None, Key, HERE),
    rpc("DeletePool", MUT, None, Key, HERE),
    // Images onto nodes and pool targets from a schedule: a key's calls, answered by the node
    // called (which asks the other nodes itself).
    rpc("PrefetchImages", MUT, None, Key, HERE),
    rpc("SetPoolTargets", MUT, None, Key, HERE),
    rpc("ListPtySessions", READS, Some(Field1), Sandbox(Operate), FWD),
    rpc("StartProcess", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("ListProcesses", READS, Some(Field1), Sandbox(Operate), FWD),
    rpc("AttachProcess", READS, Some(Field1), Sandbox(Operate), FWD),
    rpc("SignalProcess", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("PortForward", MUT, Some(Nested), Sandbox(Operate), FWD),
    rpc("ListDir", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("Stat", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("MakeDir", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("Remove", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("Rename", MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc("WatchDir", READS, Some(Field1), Sandbox(Read), FWD),
    rpc("Usage", READS, Some(Field1), Sandbox(Read), FWD),
    // A batch of creates: a key's call like Create, answered by the node called.
    rpc("CreateBatch", MUT, None, Key, HERE),
    // A reset destroys the sandbox's state as Close does: scope owner.
    rpc("Reset", MUT, Some(Field1), Sandbox(Owner), FWD),
];

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The facts of RPC `name` (`None`: not a method of the service).
pub const fn get(name: &str) -> Option<&'static Rpc> {
    let mut i = 0;
    while i < RPCS.len() {
        if same(RPCS[i].name, name) {
            return Some(&RPCS[i]);
        }
        i += 1;
    }
    None
}

/// The scope RPC `name` needs on its sandbox. Meant for const context
/// (`const { scope("Exec") }`), where a name missing from the table, or an RPC about no one
/// sandbox, fails the build.
pub const fn scope(name: &str) -> Scope {
    match get(name) {
        Some(Rpc { need: Need::Sandbox(scope), .. }) => *scope,
        Some(_) => panic!("this RPC needs no sandbox scope (see service/rpc_table.rs)"),
        None => panic!("an RPC missing from service/rpc_table.rs"),
    }
}

/// Whether RPC `name` is audited.
pub fn mutating(name: &str) -> bool {
    get(name).is_some_and(|r| r.mutating)
}

/// Where a relayed RPC's sandbox id is; `None` for the calls the node called answers itself.
pub fn forwarded(name: &str) -> Option<IdAt> {
    get(name).filter(|r| r.forwarded).and_then(|r| r.sandbox_id)
}

/// The table as Markdown, as `docs/access.md` holds it between its `rpc-table` markers.
pub fn markdown() -> String {
    let mut out = String::from(
        "| RPC | Changes something (audited) | Sandbox id | Needs | Relayed to the sandbox's node |\n\
         |-----|-----------------------------|------------|-------|-------------------------------|\n",
    );
    for r in RPCS {
        let id = match r.sandbox_id {
            None => "-",
            Some(IdAt::Field1) => "`sandbox_id`",
            Some(IdAt::Nested) => "field 1's `sandbox_id`",
            Some(IdAt::Pty) => "`open`/`attach`'s `sandbox_id`",
        };
        let need = match r.need {
            Need::Sandbox(s) => format!("scope {s}"),
            Need::Key => "a tenant key or the operator".into(),
            Need::GrantedScope => "the scope it grants".into(),
            Need::OwnerTokenOrKey => "an owner token, a tenant key or the operator".into(),
        };
        let yes = |b: bool| if b { "yes" } else { "no" };
        out.push_str(&format!(
            "| {} | {} | {id} | {need} | {} |\n",
            r.name,
            yes(r.mutating),
            yes(r.forwarded)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_types::field_descriptor_proto::Type;
    use prost_types::{DescriptorProto, FileDescriptorSet};

    use super::*;

    fn descriptor() -> FileDescriptorSet {
        FileDescriptorSet::decode(sandboxd_proto::FILE_DESCRIPTOR_SET).expect("the contract's descriptor set")
    }

    fn message<'a>(set: &'a FileDescriptorSet, full_name: &str) -> &'a DescriptorProto {
        let name = full_name.trim_start_matches('.');
        set.file
            .iter()
            .flat_map(|f| f.message_type.iter().map(move |m| (f.package(), m)))
            .find(|(package, m)| format!("{package}.{}", m.name()) == name)
            .map(|(_, m)| m)
            .unwrap_or_else(|| panic!("no message {name} in the descriptor set"))
    }

    /// `message`'s field `number`: its name, type and (for a message field) its type name.
    fn field(m: &DescriptorProto, number: i32) -> Option<(&str, Type, &str)> {
        m.field.iter().find(|f| f.number() == number).map(|f| (f.name(), f.r#type(), f.type_name()))
    }

    fn id_field(m: &DescriptorProto, number: i32) -> bool {
        field(m, number).is_some_and(|(name, ty, _)| name == "sandbox_id" && ty == Type::String)
    }

    fn nested_id(set: &FileDescriptorSet, m: &DescriptorProto, number: i32) -> bool {
        match field(m, number) {
            Some((_, Type::Message, type_name)) => id_field(message(set, type_name), 1),
            _ => false,
        }
    }

    /// Every method of the service has a row, every row a method, and each row's sandbox id is
    /// where the request message really has it.
    #[test]
    fn the_table_classifies_every_rpc_of_the_descriptor() {
        let set = descriptor();
        let service = set
            .file
            .iter()
            .flat_map(|f| f.service.iter())
            .find(|s| s.name() == "SandboxService")
            .expect("sandbox.v1.SandboxService in the descriptor");
        let mut missing = Vec::new();
        for method in &service.method {
            let Some(row) = get(method.name()) else {
                missing.push(method.name().to_string());
                continue;
            };
            let input = message(&set, method.input_type());
            let found = match row.sandbox_id {
                Some(IdAt::Field1) => id_field(input, 1),
                Some(IdAt::Nested) => nested_id(&set, input, 1),
                Some(IdAt::Pty) => nested_id(&set, input, 1) && nested_id(&set, input, 6),
                None => true,
            };
            assert!(
                found,
                "service/rpc_table.rs says {}'s sandbox id is at {:?}, but {} has no such field",
                method.name(),
                row.sandbox_id,
                method.input_type()
            );
            assert!(
                !row.forwarded || row.sandbox_id.is_some(),
                "{} is forwarded but the table says where its sandbox id is: nowhere",
                method.name()
            );
        }
        assert!(
            missing.is_empty(),
            "RPCs of sandbox.v1.SandboxService missing from service/rpc_table.rs: {missing:?}. Add a row \
             to RPCS for each, e.g. `rpc(\"{}\", MUT or READS, Some(Field1) or None, Sandbox(Read|Operate|Owner) \
             or Key, FWD or HERE),`: MUT if it changes anything (it is then audited), where its request \
             carries the sandbox id, the scope a token needs (Key: tenant key or operator only), and FWD \
             if a relaying node must send it to the node its sandbox runs on",
            missing.first().map(String::as_str).unwrap_or_default()
        );
        let methods: Vec<&str> = service.method.iter().map(|m| m.name()).collect();
        for row in RPCS {
            assert!(
                methods.contains(&row.name),
                "service/rpc_table.rs has a row for {}, which the service lacks",
                row.name
            );
        }
        let mut names: Vec<&str> = RPCS.iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RPCS.len(), "an RPC has two rows");
    }

    /// The calls the audit log missed before the table (a process started in a sandbox left no
    /// line) are audited now.
    #[test]
    fn every_call_that_changes_a_sandbox_is_audited() {
        for name in [
            "StartProcess",
            "SignalProcess",
            "MakeDir",
            "Remove",
            "Rename",
            "PortForward",
            "CreatePool",
            "DeletePool",
            "Create",
            "Exec",
            "Close",
        ] {
            assert!(mutating(name), "{name} must be audited");
        }
        for name in ["Status", "List", "ListDir", "Stat", "Watch", "Download", "Nope"] {
            assert!(!mutating(name), "{name} changes nothing");
        }
    }

    #[test]
    fn scopes_and_relaying_read_from_the_table() {
        assert_eq!(const { scope("Exec") }, Scope::Operate);
        assert_eq!(const { scope("Close") }, Scope::Owner);
        assert_eq!(const { scope("Stat") }, Scope::Read);
        assert_eq!(forwarded("Create"), None);
        assert_eq!(forwarded("Snapshot"), None, "cluster mode has no snapshots");
        assert_eq!(forwarded("Close"), Some(IdAt::Field1));
        assert_eq!(forwarded("Pty"), Some(IdAt::Pty));
    }

    /// `docs/access.md` and `docs/architecture.md` hold the table as [`markdown`] prints it.
    #[test]
    fn the_docs_hold_the_table() {
        for doc in ["access.md", "architecture.md"] {
            let path = format!("{}/../docs/{doc}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).expect("the doc");
            let (start, end) = ("<!-- rpc-table:start -->\n", "<!-- rpc-table:end -->");
            let from = text.find(start).unwrap_or_else(|| panic!("docs/{doc} has no {start:?} marker"))
                + start.len();
            let to = text.find(end).unwrap_or_else(|| panic!("docs/{doc} has no {end:?} marker"));
            if std::env::var_os("SANDBOXD_WRITE_DOCS").is_some() && text[from..to] != markdown() {
                std::fs::write(&path, format!("{}{}{}", &text[..from], markdown(), &text[to..]))
                    .expect("write the doc");
                continue;
            }
            assert_eq!(
                &text[from..to],
                markdown(),
                "docs/{doc}'s RPC table differs from service/rpc_table.rs: run `SANDBOXD_WRITE_DOCS=1 cargo test -p \
                 sandboxd --lib rpc_table` or put this between its markers:\n{}",
                markdown()
            );
        }
    }
}
