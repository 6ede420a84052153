//! What a backend can do beyond the calls every backend answers: one declared table per backend
//! ([`crate::core::backend::SandboxBackend::capabilities`], a required method, so a new backend
//! says what it offers before it compiles), read by the call path in front of the handlers
//! (`service/capable.rs` refuses an RPC whose capability the backend lacks, with UNIMPLEMENTED
//! naming it) and by the conformance suite (every declared capability answers, every other is
//! refused). The trait's methods of a capability default to the same refusal, so a backend
//! that leaves one out and does not declare it is consistent by construction; one that declares
//! it and forgets a method is what the conformance suite catches.

use std::fmt;

use crate::error::ProviderError;

/// One optional part of the backend interface. The RPCs each gates are in
/// `service/rpc_table.rs` (`needs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `snapshot`, `list_snapshots`, `delete_snapshot`, `fork`: filesystem snapshots and forks.
    Snapshots,
    /// `checkpoint`, `fork_live`, `hibernate`: processes and memory saved and restored.
    LiveCheckpoints,
    /// `attach_terminal`, `list_terminals`: terminal sessions the sandbox keeps across callers.
    TerminalSessions,
    /// `start_process`, `list_processes`, `attach_process`, `signal_process`.
    Processes,
    /// `port_forward`: a TCP connection from inside the sandbox.
    PortForward,
    /// `list_dir`, `stat`, `file_op`, `watch_dir`.
    FileCalls,
    /// `reset`: the sandbox back to its created state in place.
    Reset,
    /// `usage`: what a sandbox used since it started (the close's receipt).
    Usage,
    /// `stats`: resource use now.
    Stats,
    /// `apply_egress`: a network policy enforced from outside the sandbox.
    Egress,
    /// `network_address`: the sandbox's address on its network.
    NetworkAddress,
    /// `list_volumes`, `delete_volume`: named volumes.
    Volumes,
    /// `image_id`, `commit_template`: template images built from a sandbox (E2B templates).
    Templates,
    /// `prefetch_images`: images pulled onto nodes ahead of creates.
    ImagePrefetch,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 14] = [
        Capability::Snapshots,
        Capability::LiveCheckpoints,
        Capability::TerminalSessions,
        Capability::Processes,
        Capability::PortForward,
        Capability::FileCalls,
        Capability::Reset,
        Capability::Usage,
        Capability::Stats,
        Capability::Egress,
        Capability::NetworkAddress,
        Capability::Volumes,
        Capability::Templates,
        Capability::ImagePrefetch,
    ];

    /// The name operators and error messages use (snake_case, as in `docs/architecture.md`).
    pub const fn name(self) -> &'static str {
        match self {
            Capability::Snapshots => "snapshots",
            Capability::LiveCheckpoints => "live_checkpoints",
            Capability::TerminalSessions => "terminal_sessions",
            Capability::Processes => "processes",
            Capability::PortForward => "port_forward",
            Capability::FileCalls => "file_calls",
            Capability::Reset => "reset",
            Capability::Usage => "usage",
            Capability::Stats => "stats",
            Capability::Egress => "egress",
            Capability::NetworkAddress => "network_address",
            Capability::Volumes => "volumes",
            Capability::Templates => "templates",
            Capability::ImagePrefetch => "image_prefetch",
        }
    }

    const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// The refusal of a call this capability covers on a backend that lacks it (UNIMPLEMENTED).
    pub fn lacking(self, backend: &str) -> ProviderError {
        ProviderError::Unimplemented(format!(
            "the {backend} backend does not offer {self} (its capabilities: see docs/architecture.md)"
        ))
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend's declared capabilities and its name for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    backend: &'static str,
    bits: u32,
}

impl Capabilities {
    /// `backend` offering none of the optional capabilities.
    pub const fn none(backend: &'static str) -> Self {
        Self { backend, bits: 0 }
    }

    /// `backend` offering every capability.
    pub const fn all(backend: &'static str) -> Self {
        let mut caps = Self::none(backend);
        let mut i = 0;
        while i < Capability::ALL.len() {
            caps = caps.with(Capability::ALL[i]);
            i += 1;
        }
        caps
    }

    /// These and `capability`.
    pub const fn with(self, capability: Capability) -> Self {
        Self { backend: self.backend, bits: self.bits | capability.bit() }
    }

    /// These without `capability`.
    pub const fn without(self, capability: Capability) -> Self {
        Self { backend: self.backend, bits: self.bits & !capability.bit() }
    }

    pub const fn has(&self, capability: Capability) -> bool {
        self.bits & capability.bit() != 0
    }

    /// The backend's name, as refusals say it.
    pub const fn backend(&self) -> &'static str {
        self.backend
    }

    /// `Ok` when offered, else the refusal naming the capability and the backend.
    pub fn require(&self, capability: Capability) -> Result<(), ProviderError> {
        if self.has(capability) {
            Ok(())
        } else {
            Err(capability.lacking(self.backend))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_says_what_it_offers_and_refuses_the_rest_naming_both() {
        let caps = Capabilities::all("swarm").without(Capability::Snapshots).without(Capability::Volumes);
        assert!(caps.has(Capability::Processes));
        assert!(!caps.has(Capability::Snapshots));
        let lacking: Vec<Capability> = Capability::ALL.into_iter().filter(|c| !caps.has(*c)).collect();
        assert_eq!(lacking, vec![Capability::Snapshots, Capability::Volumes]);
        assert!(caps.require(Capability::Reset).is_ok());
        let refusal = caps.require(Capability::Volumes).unwrap_err();
        assert!(
            matches!(&refusal, ProviderError::Unimplemented(m) if m.contains("swarm") && m.contains("volumes"))
        );
        assert!(Capability::ALL.into_iter().all(|c| !Capabilities::none("fake").has(c)));
    }

    #[test]
    fn every_capability_has_its_own_bit_and_name() {
        let mut names = std::collections::BTreeSet::new();
        let mut bits = 0u32;
        for c in Capability::ALL {
            assert_eq!(bits & c.bit(), 0, "{c} shares a bit");
            bits |= c.bit();
            assert!(names.insert(c.name()), "{c} shares a name");
        }
    }
}
