//! One table of per-RPC facts for `sandbox.v1.SandboxService`: whether a call changes something
//! (the audit log writes a line for it), where its sandbox id is, what access it needs, and
//! whether a relaying node forwards it to the node its sandbox runs on. The audit log
//! (`crate::audit`), the handlers' scope checks (`const { scope("X") }`, a typo is a compile
//! error), the relay layer (`service/forward.rs`) and `docs/access.md` all read it; a test walks
//! the generated service descriptor and fails on any RPC this table does not classify, so a new
//! RPC cannot be forgotten in one of those lists.

use crate::auth::Scope;
use crate::core::capabilities::Capability;

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
    /// The backend capability it needs (`None`: every backend answers it); a backend that
    /// lacks it never sees the call (`service/capable.rs` refuses it with UNIMPLEMENTED).
    pub needs: Option<Capability>,
}

impl Rpc {
    /// This RPC, answered only by a backend that offers `capability`.
    const fn needing(self, capability: Capability) -> Rpc {
        Rpc { needs: Some(capability), ..self }
    }
}

const fn rpc(
    name: &'static str,
    mutating: bool,
    sandbox_id: Option<IdAt>,
    need: Need,
    forwarded: bool,
) -> Rpc {
    Rpc { name, mutating, sandbox_id, need, forwarded, needs: None }
}

use IdAt::{Field1, Nested, Pty};
use Need::{GrantedScope, Key, OwnerTokenOrKey, Sandbox};
use Scope::{Operate, Owner, Read};

const MUT: bool = true;
const READS: bool = false;
const FWD: bool = true;
const HERE: bool = false;

/// The RPCs' names, for code that names one (a span, a key check, a scope): written here and
/// nowhere else (`no_rpc_name_is_written_outside_the_table` fails on a name spelt as a string
/// elsewhere in the server).
pub mod name {
    pub const CREATE: &str = "Create";
    pub const CONNECT: &str = "Connect";
    pub const EXEC: &str = "Exec";
    pub const UPLOAD: &str = "Upload";
    pub const DOWNLOAD: &str = "Download";
    pub const STATUS: &str = "Status";
    pub const ENDPOINT: &str = "Endpoint";
    pub const CLOSE: &str = "Close";
    pub const PTY: &str = "Pty";
    pub const EXEC_STREAM: &str = "ExecStream";
    pub const LIST: &str = "List";
    pub const SET_TIMEOUT: &str = "SetTimeout";
    pub const SNAPSHOT: &str = "Snapshot";
    pub const LIST_SNAPSHOTS: &str = "ListSnapshots";
    pub const DELETE_SNAPSHOT: &str = "DeleteSnapshot";
    pub const FORK: &str = "Fork";
    pub const DIFF: &str = "Diff";
    pub const PAUSE: &str = "Pause";
    pub const RESUME: &str = "Resume";
    pub const CHECKPOINT: &str = "Checkpoint";
    pub const HIBERNATE: &str = "Hibernate";
    pub const GRANT: &str = "Grant";
    pub const REVOKE: &str = "Revoke";
    pub const LOGS: &str = "Logs";
    pub const NETWORK_ADDRESS: &str = "NetworkAddress";
    pub const LIST_VOLUMES: &str = "ListVolumes";
    pub const DELETE_VOLUME: &str = "DeleteVolume";
    pub const WATCH: &str = "Watch";
    pub const STATS: &str = "Stats";
    pub const STATS_STREAM: &str = "StatsStream";
    pub const SET_NETWORK_POLICY: &str = "SetNetworkPolicy";
    pub const CREATE_POOL: &str = "CreatePool";
    pub const LIST_POOLS: &str = "ListPools";
    pub const DELETE_POOL: &str = "DeletePool";
    pub const PREFETCH_IMAGES: &str = "PrefetchImages";
    pub const SET_POOL_TARGETS: &str = "SetPoolTargets";
    pub const LIST_PTY_SESSIONS: &str = "ListPtySessions";
    pub const START_PROCESS: &str = "StartProcess";
    pub const LIST_PROCESSES: &str = "ListProcesses";
    pub const ATTACH_PROCESS: &str = "AttachProcess";
    pub const SIGNAL_PROCESS: &str = "SignalProcess";
    pub const PORT_FORWARD: &str = "PortForward";
    pub const LIST_DIR: &str = "ListDir";
    pub const STAT: &str = "Stat";
    pub const MAKE_DIR: &str = "MakeDir";
    pub const REMOVE: &str = "Remove";
    pub const RENAME: &str = "Rename";
    pub const WATCH_DIR: &str = "WatchDir";
    pub const USAGE: &str = "Usage";
    pub const CREATE_BATCH: &str = "CreateBatch";
    pub const RESET: &str = "Reset";
    pub const TENANT_USAGE: &str = "TenantUsage";
}

/// Every RPC of `sandbox.v1.SandboxService`, in the proto's order. A new RPC gets a row here
/// (the descriptor test says so, with the row to add).
pub const RPCS: &[Rpc] = &[
    rpc(name::CREATE, MUT, None, Key, HERE),
    // Connect hands back the token it was given: audited as a change of who holds access.
    rpc(name::CONNECT, MUT, Some(Nested), Sandbox(Read), FWD),
    rpc(name::EXEC, MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc(name::UPLOAD, MUT, Some(Nested), Sandbox(Operate), FWD),
    rpc(name::DOWNLOAD, READS, Some(Field1), Sandbox(Read), FWD),
    rpc(name::STATUS, READS, Some(Field1), Sandbox(Read), FWD),
    rpc(name::ENDPOINT, READS, Some(Field1), Sandbox(Operate), FWD),
    // Close runs where its sandbox runs, so the owning node tells its watchers why; a node
    // that is down is closed from the node called.
    rpc(name::CLOSE, MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc(name::PTY, MUT, Some(Pty), Sandbox(Operate), FWD),
    rpc(name::EXEC_STREAM, MUT, Some(Field1), Sandbox(Operate), FWD),
    rpc(name::LIST, READS, None, Key, HERE),
    rpc(name::SET_TIMEOUT, MUT, Some(Field1), Sandbox(Owner), FWD),
    // A snapshot is committed where its sandbox runs, and a fork's children are placed there:
    // relayed to the sandbox's node. Listing and deleting snapshots ask every node themselves.
    rpc(name::SNAPSHOT, MUT, Some(Field1), Sandbox(Owner), FWD).needing(Capability::Snapshots),
    rpc(name::LIST_SNAPSHOTS, READS, None, Key, HERE).needing(Capability::Snapshots),
    rpc(name::DELETE_SNAPSHOT, MUT, None, Key, HERE).needing(Capability::Snapshots),
    rpc(name::FORK, MUT, Some(Field1), Sandbox(Owner), FWD).needing(Capability::Snapshots),
    rpc(name::DIFF, READS, Some(Field1), Sandbox(Read), FWD),
    rpc(name::PAUSE, MUT, Some(Field1), Sandbox(Owner), FWD),
    rpc(name::RESUME, MUT, Some(Field1), Sandbox(Owner), FWD),
    // Relayed to the sandbox's node: its checkpoint is written there, and a live fork of it
    // must run there too (the checkpoint does not move between nodes).
    rpc(name::CHECKPOINT, MUT, Some(Field1), Sandbox(Owner), FWD).needing(Capability::LiveCheckpoints),
    rpc(name::HIBERNATE, MUT, Some(Field1), Sandbox(Owner), FWD).needing(Capability::LiveCheckpoints),
    rpc(name::GRANT, MUT, Some(Field1), GrantedScope, HERE),
    rpc(name::REVOKE, MUT, None, OwnerTokenOrKey, HERE),
    rpc(name::LOGS, READS, Some(Field1), Sandbox(Read), FWD),
    rpc(name::NETWORK_ADDRESS, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::NetworkAddress),
    rpc(name::LIST_VOLUMES, READS, None, Key, HERE).needing(Capability::Volumes),
    rpc(name::DELETE_VOLUME, MUT, None, Key, HERE).needing(Capability::Volumes),
    rpc(name::WATCH, READS, None, Key, HERE),
    rpc(name::STATS, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::Stats),
    rpc(name::STATS_STREAM, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::Stats),
    rpc(name::SET_NETWORK_POLICY, MUT, Some(Field1), Sandbox(Owner), FWD).needing(Capability::Egress),
    rpc(name::CREATE_POOL, MUT, None, Key, HERE),
    rpc(name::LIST_POOLS, READS, None, Key, HERE),
    rpc(name::DELETE_POOL, MUT, None, Key, HERE),
    // Images onto nodes and pool targets from a schedule: a key's calls, answered by the node
    // called (which asks the other nodes itself).
    rpc(name::PREFETCH_IMAGES, MUT, None, Key, HERE).needing(Capability::ImagePrefetch),
    rpc(name::SET_POOL_TARGETS, MUT, None, Key, HERE),
    rpc(name::LIST_PTY_SESSIONS, READS, Some(Field1), Sandbox(Operate), FWD)
        .needing(Capability::TerminalSessions),
    rpc(name::START_PROCESS, MUT, Some(Field1), Sandbox(Operate), FWD).needing(Capability::Processes),
    rpc(name::LIST_PROCESSES, READS, Some(Field1), Sandbox(Operate), FWD).needing(Capability::Processes),
    rpc(name::ATTACH_PROCESS, READS, Some(Field1), Sandbox(Operate), FWD).needing(Capability::Processes),
    rpc(name::SIGNAL_PROCESS, MUT, Some(Field1), Sandbox(Operate), FWD).needing(Capability::Processes),
    rpc(name::PORT_FORWARD, MUT, Some(Nested), Sandbox(Operate), FWD).needing(Capability::PortForward),
    rpc(name::LIST_DIR, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::FileCalls),
    rpc(name::STAT, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::FileCalls),
    rpc(name::MAKE_DIR, MUT, Some(Field1), Sandbox(Operate), FWD).needing(Capability::FileCalls),
    rpc(name::REMOVE, MUT, Some(Field1), Sandbox(Operate), FWD).needing(Capability::FileCalls),
    rpc(name::RENAME, MUT, Some(Field1), Sandbox(Operate), FWD).needing(Capability::FileCalls),
    rpc(name::WATCH_DIR, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::FileCalls),
    rpc(name::USAGE, READS, Some(Field1), Sandbox(Read), FWD).needing(Capability::Usage),
    // A batch of creates: a key's call like Create, answered by the node called.
    rpc(name::CREATE_BATCH, MUT, None, Key, HERE),
    // A reset destroys the sandbox's state as Close does: scope owner.
    rpc(name::RESET, MUT, Some(Field1), Sandbox(Owner), FWD).needing(Capability::Reset),
    rpc(name::TENANT_USAGE, READS, None, Key, HERE),
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
        "| RPC | Changes something (audited) | Sandbox id | Needs | Relayed to the sandbox's node | Backend capability |\n\
         |-----|-----------------------------|------------|-------|-------------------------------|--------------------|\n",
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
        let capability = r.needs.map_or("-".to_string(), |c| format!("`{c}`"));
        out.push_str(&format!(
            "| {} | {} | {id} | {need} | {} | {capability} |\n",
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
             to RPCS for each (and its constant in `name`), e.g. `rpc(\"{}\", MUT or READS, Some(Field1) or None, Sandbox(Read|Operate|Owner) \
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
        assert_eq!(forwarded("Snapshot"), Some(IdAt::Field1), "committed on the sandbox's node");
        assert_eq!(forwarded("ListSnapshots"), None, "every node asks the others itself");
        assert_eq!(forwarded("Close"), Some(IdAt::Field1));
        assert_eq!(forwarded("Pty"), Some(IdAt::Pty));
    }

    /// Outside this file an RPC is named by its `name::` constant, never spelt: a hand-written
    /// name (an audit call, a relay rule, a span) is how a front-end or a layer drifted from the
    /// table. Test modules are not read; the exceptions are other protocols' words that happen to
    /// be spelt as an RPC (envd's Connect methods, Docker's JSON).
    #[test]
    fn no_rpc_name_is_written_outside_the_table() {
        const NOT_OURS: &[(&str, &str)] = &[
            ("e2b/process.rs", "envd's process.Process methods"),
            ("e2b/filesystem.rs", "envd's filesystem.Filesystem methods"),
            ("backends/swarm/engine.rs", "Docker's JSON field `Status`"),
        ];
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![root.clone()];
        let mut found = Vec::new();
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            if !relative.ends_with(".rs") || relative == "service/rpc_table.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                for rpc in RPCS {
                    let quoted = format!("\"{}\"", rpc.name);
                    let Some(at) = line.find(&quoted) else { continue };
                    // Theirs: a match arm on their method names, a serde field name.
                    let arm = line.trim_start().starts_with('"') && line[at..].contains("=>");
                    let exempt = NOT_OURS.iter().any(|(file, _)| *file == relative)
                        && (arm || line.contains("rename ="));
                    if !exempt {
                        found.push(format!("server/src/{relative}:{}: {}", n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "RPC names spelt outside service/rpc_table.rs (use `rpc_table::name::…`; audit, relay, \
             metrics and traces come from the table for every front-end):\n{}",
            found.join("\n")
        );
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
