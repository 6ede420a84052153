//! What `runtime_requirements.rs` and `named_network.rs` share (two binaries, since the
//! network check must run alone in its own): unique names, an exec as text, a close, and the
//! lines a `docker` listing prints.

use sandboxd_client::proto;
use testkit::docker;
use testkit::raw::RawClient;

/// `prefix` and 10 random hex digits: a name no other run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// `command` in sandbox `id`: (return code, stdout, stderr).
pub async fn exec(raw: &mut RawClient, id: &str, command: &str) -> (i32, String, String) {
    let r = testkit::raw::exec(raw, id, command).await;
    (
        r.return_code,
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

pub async fn close(raw: &mut RawClient, id: &str) {
    raw.close(proto::CloseRequest { sandbox_id: id.into() }).await.expect("close");
}

/// The non-empty lines `docker args` printed.
pub fn docker_lines(args: &[&str]) -> Vec<String> {
    String::from_utf8_lossy(&docker(args).stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}
