//! `docker cp` command lines: a file in as a tar on stdin, out as a tar on stdout.

use super::*;

/// `docker cp - NAME:/`: a tar on stdin, extracted at the root (so it carries the parents).
pub fn cp_in_args(name: &str) -> Vec<String> {
    vec![s("cp"), s("-"), format!("{name}:/")]
}

/// `docker cp -L NAME:PATH -`: the file as a tar on stdout (a link is followed to its file).
pub fn cp_out_args(name: &str, path: &str) -> Vec<String> {
    vec![s("cp"), s("-L"), format!("{name}:{path}"), s("-")]
}
