//! `sandboxd-agent`: the resident process in every sandbox that runs commands and moves files
//! for the server over one private stdio channel (see `protocol`). It is built as a static
//! binary, needs nothing from the image, and resolves users from the image's own files.

pub mod files;
pub mod protocol;
pub mod serve;
pub mod spawn;
pub mod tree;
pub mod users;
