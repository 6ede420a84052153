//! `sandboxd-agent`: the resident process in every sandbox that runs commands, moves files and
//! holds terminal and process sessions for the server, over one private stdio channel
//! (`serve`) or on a root-only unix socket (`socket`, and `init`, where it is also the
//! sandbox's keep-alive). It is built as a static binary, needs nothing from the image, and
//! resolves users from the image's own files.

pub mod channel;
pub mod connect;
pub mod exec;
pub mod files;
pub mod forward;
pub mod fs;
pub mod init;
pub mod launch;
pub mod probe;
pub mod processes;
pub mod protocol;
pub mod reaper;
pub mod relay;
pub mod ring;
pub mod serve;
pub mod sessions;
pub mod socket;
pub mod spawn;
pub mod terminal;
pub mod tree;
pub mod users;
pub mod xattrs;
