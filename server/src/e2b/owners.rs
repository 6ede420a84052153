//! Who owns a file, as envd says it: entries carry user and group *names* (the sandbox's own
//! `/etc/passwd` and `/etc/group`, read through `Download` and kept a few seconds per
//! sandbox), and an upload is left owned by the user it was made as (sandboxd's transfer
//! writes as root; a root `Exec` then hands the files to that user, whose ids are asked once
//! per sandbox and user).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sandboxd_proto::envd::filesystem as ef;
use sandboxd_proto::v1 as pb;
use tonic::Status;

use super::inproc::request;
use super::inproc::Caller;
use super::E2bFront;

/// How long a sandbox's user and group names are kept before they are read again.
const NAMES_FRESH_FOR: Duration = Duration::from_secs(10);
/// The most of `/etc/passwd` or `/etc/group` that is read (the rest is ignored).
const DATABASE_LIMIT: usize = 1 << 20;

/// What is kept per sandbox.
#[derive(Default)]
pub struct Owners {
    names: Mutex<HashMap<String, (Instant, Names)>>,
    /// `uid:gid` by (sandbox, user; "" for the sandbox's own user).
    ids: Mutex<HashMap<(String, String), String>>,
}

/// Names by numeric id, from the sandbox's databases.
#[derive(Clone, Default)]
struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

/// `name:x:id:...` lines: id -> name (the first name of an id wins, as `getpwuid` answers).
fn parse_database(text: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(id)) = (fields.next(), fields.next(), fields.next()) else { continue };
        if let (false, Ok(id)) = (name.is_empty(), id.trim().parse::<u32>()) {
            out.entry(id).or_insert_with(|| name.to_string());
        }
    }
    out
}

/// `entries` with their numeric owner and group replaced by the sandbox's names (an id the
/// sandbox has no name for stays a number, as `ls -l` shows it).
pub async fn name_entries(
    front: &E2bFront,
    caller: &Caller,
    sandbox_id: &str,
    entries: &mut [ef::EntryInfo],
) -> Result<(), Status> {
    if entries.is_empty() {
        return Ok(());
    }
    let names = names(front, caller, sandbox_id).await?;
    for entry in entries {
        if let Some(name) = entry.owner.parse::<u32>().ok().and_then(|id| names.users.get(&id)) {
            entry.owner = name.clone();
        }
        if let Some(name) = entry.group.parse::<u32>().ok().and_then(|id| names.groups.get(&id)) {
            entry.group = name.clone();
        }
    }
    Ok(())
}

async fn names(front: &E2bFront, caller: &Caller, sandbox_id: &str) -> Result<Names, Status> {
    let owners = &front.inner.owners;
    if let Some((at, names)) = owners.names.lock().expect("owners").get(sandbox_id) {
        if at.elapsed() < NAMES_FRESH_FOR {
            return Ok(names.clone());
        }
    }
    let names = Names {
        users: parse_database(&read_small(front, caller, sandbox_id, "/etc/passwd").await?),
        groups: parse_database(&read_small(front, caller, sandbox_id, "/etc/group").await?),
    };
    let mut kept = owners.names.lock().expect("owners");
    kept.retain(|_, (at, _)| at.elapsed() < NAMES_FRESH_FOR);
    kept.insert(sandbox_id.to_string(), (Instant::now(), names.clone()));
    Ok(names)
}

/// The start of a small file of the sandbox; a missing one reads as empty (an image without a
/// user database shows numeric ids).
async fn read_small(
    front: &E2bFront,
    caller: &Caller,
    sandbox_id: &str,
    path: &str,
) -> Result<String, Status> {
    let download = pb::DownloadRequest { sandbox_id: sandbox_id.to_string(), path: path.to_string() };
    let mut chunks = match front.calls().download(request(caller, download)).await {
        Ok(r) => r.into_inner(),
        Err(e) if e.code() == tonic::Code::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(c) => out.extend_from_slice(&c.chunk),
            Err(e) if e.code() == tonic::Code::NotFound => return Ok(String::new()),
            Err(e) => return Err(e),
        }
        if out.len() >= DATABASE_LIMIT {
            out.truncate(DATABASE_LIMIT);
            break;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Hands `paths` (just uploaded, by root) to `user` ("" for the sandbox's own user), as envd
/// writes them as that user. Nothing to do when that user is root.
pub async fn give_to_user(
    front: &E2bFront,
    caller: &Caller,
    sandbox_id: &str,
    user: &str,
    paths: &[String],
) -> Result<(), Status> {
    if paths.is_empty() || user == "root" {
        return Ok(());
    }
    let ids = ids_of(front, caller, sandbox_id, user).await?;
    if ids == "0:0" {
        return Ok(());
    }
    // The paths go by environment, never into the command's text.
    let mut env: HashMap<String, String> = HashMap::from([("E2B_OWNER".to_string(), ids)]);
    let mut command = String::from("chown -h -- \"$E2B_OWNER\"");
    for (i, path) in paths.iter().enumerate() {
        env.insert(format!("E2B_PATH_{i}"), path.clone());
        command.push_str(&format!(" \"$E2B_PATH_{i}\""));
    }
    let exec = pb::ExecRequest {
        sandbox_id: sandbox_id.to_string(),
        command,
        env,
        user: Some("root".into()),
        timeout_s: Some(30.0),
        ..Default::default()
    };
    let out = front.calls().exec(request(caller, exec)).await?.into_inner();
    if out.return_code != 0 {
        return Err(Status::internal(format!(
            "the upload could not be given to user {user:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// `uid:gid` of `user` in the sandbox, asked once (as that user, `id -u` and `id -g`).
async fn ids_of(front: &E2bFront, caller: &Caller, sandbox_id: &str, user: &str) -> Result<String, Status> {
    let key = (sandbox_id.to_string(), user.to_string());
    if let Some(ids) = front.inner.owners.ids.lock().expect("owners").get(&key) {
        return Ok(ids.clone());
    }
    let exec = pb::ExecRequest {
        sandbox_id: sandbox_id.to_string(),
        command: "printf '%s:%s' \"$(id -u)\" \"$(id -g)\"".into(),
        user: (!user.is_empty()).then(|| user.to_string()),
        timeout_s: Some(10.0),
        ..Default::default()
    };
    let out = front.calls().exec(request(caller, exec)).await?.into_inner();
    // Read from inside the sandbox: only `<digits>:<digits>` is taken.
    let ids = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let valid =
        ids.split_once(':').is_some_and(|(u, g)| u.parse::<u32>().is_ok() && g.parse::<u32>().is_ok());
    if out.return_code != 0 || !valid {
        return Err(Status::internal(format!("the ids of user {user:?} could not be read in the sandbox")));
    }
    front.inner.owners.ids.lock().expect("owners").insert(key, ids.clone());
    Ok(ids)
}

/// Forget what is kept about `sandbox_id` (it was closed).
pub fn forget(front: &E2bFront, sandbox_id: &str) {
    front.inner.owners.names.lock().expect("owners").remove(sandbox_id);
    front.inner.owners.ids.lock().expect("owners").retain(|(id, _), _| id != sandbox_id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_databases_map_ids_to_their_first_name() {
        let users = parse_database(
            "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n\
             alias:x:1000:1000::/:/bin/sh\nbroken line\n:x:5:5\nbad:x:notanumber:0\n",
        );
        assert_eq!(users.get(&0).map(String::as_str), Some("root"));
        assert_eq!(users.get(&1000).map(String::as_str), Some("user"));
        assert_eq!(users.get(&5), None);
        assert_eq!(users.len(), 2);
        let groups = parse_database("root:x:0:\nuser:x:1000:\n");
        assert_eq!(groups.get(&1000).map(String::as_str), Some("user"));
    }
}
