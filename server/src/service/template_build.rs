//! Building a template (`crate::core::templates`) for any front-end: a build sandbox is made
//! from the base image by calls through the served stack as the build's caller (so the caller's tenant, quotas,
//! walls and network policy are a sandbox's), each step runs in it (`Exec` as the step's user,
//! in its workdir, with its env; files by `Upload` and an unpack as root), the start and ready
//! commands are checked, and the sandbox is committed as the template's image behind the
//! backend seam. The build sandbox is always closed; a failure leaves no image. A definition
//! whose image already exists is not built again (one build per key at a time).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_proto::v1 as pb;
use tonic::Status;

use super::calls::{Caller, Calls};
use crate::core::backend::SandboxBackend;
use crate::core::spec::SandboxId;
use crate::core::templates::{
    self, BuildFailure, BuildLog, BuildStage, BuiltTemplate, KeyLocks, LogLevel, Step, TemplateDefinition,
    TemplateImageConfig,
};

/// How long a ready command may keep failing before the build (or a create) gives up.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Lines of one step's output kept in the build log.
const MAX_LINES_PER_STEP: usize = 2000;

/// One build's inputs besides the definition.
pub struct BuildOptions<'a> {
    /// Build again even when the key's image exists.
    pub force: bool,
    /// The uploaded archive of a copy step, by its files hash.
    pub files: &'a (dyn Fn(&str) -> Option<PathBuf> + Send + Sync),
    /// The whole build's bound.
    pub timeout: Duration,
    /// The build sandbox's disk bound (GiB); `None`: the server's default.
    pub disk_gib: Option<u64>,
    /// The user steps run as until a user step (`None`: the image's own). E2B's builds run as
    /// root.
    pub build_user: Option<String>,
    /// The build sandbox's calls (create, exec, upload, close) go through the served stack as
    /// the build's caller, so they are authorized, audited and counted as any caller's.
    pub calls: Calls,
    pub locks: &'a KeyLocks,
}

/// `s` as one single-quoted shell word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// base64url of a command, as a label keeps it.
pub fn encode_command(cmd: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(cmd)
}

/// The inverse of [`encode_command`].
pub fn decode_command(value: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value).ok()?;
    String::from_utf8(bytes).ok().filter(|c| !c.is_empty())
}

/// The step number E2B's SDK maps a failure to (its stack trace index): "base", 1-based
/// steps, "finalize".
pub fn stage_name(stage: BuildStage) -> String {
    match stage {
        BuildStage::Base => "base".into(),
        BuildStage::Step(i) => (i + 1).to_string(),
        BuildStage::Finalize => "finalize".into(),
    }
}

/// Where the build stands while its steps run.
struct Cursor {
    sandbox_id: String,
    user: String,
    workdir: String,
    env: BTreeMap<String, String>,
    image_env: Vec<(String, String)>,
    set_workdir: bool,
    set_user: bool,
    deadline: Instant,
}

impl Cursor {
    fn remaining_s(&self) -> f64 {
        self.deadline.saturating_duration_since(Instant::now()).as_secs_f64().max(1.0)
    }
}

/// The copy step's unpack, in POSIX sh as root: E2B's semantics (the entry under the source's
/// glob-free directory is moved to the destination; a directory's contents are moved into it).
const COPY_SCRIPT: &str = r#"set -e
cd "$workdir" 2>/dev/null || cd /
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
mkdir -p "$unpack"
tar -x${zflag}f "$archive" -C "$unpack"
rm -f "$archive"
case "$owner" in *:*) ;; *) owner="$owner:$(id -g "$owner")" ;; esac
if [ -z "$base" ]; then
  chown -R "$owner" "$unpack"
  if [ -n "$mode" ]; then chmod -R "$mode" "$unpack"; fi
  mkdir -p "$target"
  for e in "$unpack"/* "$unpack"/.[!.]* "$unpack"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    mv "$e" "$target/"
  done
else
  cd "$(dirname "$unpack/$base")"
  entry=$(ls -A | head -n 1)
  if [ -z "$entry" ]; then echo "no files under $base" >&2; exit 1; fi
  if [ -L "$entry" ]; then
    mkdir -p "$(dirname "$target")"; chown -h "$owner" "$entry"; mv "$entry" "$target"
  elif [ -f "$entry" ]; then
    chown "$owner" "$entry"
    if [ -n "$mode" ]; then chmod "$mode" "$entry"; fi
    case "$target" in */) mkdir -p "$target" ;; *) mkdir -p "$(dirname "$target")" ;; esac
    mv "$entry" "$target"
  else
    chown -R "$owner" "$entry"
    if [ -n "$mode" ]; then chmod -R "$mode" "$entry"; fi
    mkdir -p "$target"
    for e in "$entry"/* "$entry"/.[!.]* "$entry"/..?*; do
      [ -e "$e" ] || [ -L "$e" ] || continue
      mv "$e" "$target/"
    done
  fi
fi
cd /
rm -rf "$unpack"
"#;

/// The glob-free leading directories of a copy source (`folder/*` -> `folder`, `a.txt` ->
/// `a.txt`, `*.txt` -> ``).
fn glob_free_base(src: &str) -> String {
    let mut parts = Vec::new();
    for part in src.trim_end_matches('/').split('/') {
        if part.contains(['*', '?', '[', '{']) {
            break;
        }
        if !part.is_empty() && part != "." {
            parts.push(part);
        }
    }
    parts.join("/")
}

/// What a build needs of the engine besides its calls: the backend's image lookups and its
/// commit of the build sandbox as an image. These have no RPC (no caller but a template build
/// asks for them), so this narrow handle is the one place a front-end reaches the backend
/// other than through `Calls`; every sandbox operation of a build is a call through the stack.
#[derive(Clone)]
pub struct TemplateEngine {
    backend: Arc<dyn SandboxBackend>,
}

impl TemplateEngine {
    pub fn new(backend: Arc<dyn SandboxBackend>) -> Self {
        Self { backend }
    }

    fn backend(&self) -> &Arc<dyn SandboxBackend> {
        &self.backend
    }

    /// Build `def` (see the module's doc); every step's output and outcome goes to `log`.
    pub async fn build_template(
        &self,
        caller: &Caller,
        def: &TemplateDefinition,
        options: BuildOptions<'_>,
        log: &BuildLog,
    ) -> Result<BuiltTemplate, BuildFailure> {
        templates::validate(def)?;
        let base = Some("base".to_string());
        let base_id = match self.backend().image_id(&def.base_image).await {
            Ok(Some(id)) => id,
            Ok(None) => {
                return Err(BuildFailure::at(
                    BuildStage::Base,
                    format!(
                        "base image {:?} is not on this server (no registry is used: load it there with \
                         `docker load`, or start from a template)",
                        def.base_image
                    ),
                ))
            }
            Err(e) => return Err(BuildFailure::at(BuildStage::Base, e.to_string())),
        };
        let key = templates::template_key(&base_id, def);
        let image = templates::template_image(&key);
        let lock = options.locks.lock_for(&key);
        let _one_at_a_time = lock.lock().await;
        if !options.force {
            if let Ok(Some(_)) = self.backend().image_id(&image).await {
                log.push(LogLevel::Info, base, format!("template {key} is built already: reusing {image}"));
                return Ok(BuiltTemplate { key, image, cached: true });
            }
        }
        log.push(LogLevel::Info, base.clone(), format!("building {image} from {}", def.base_image));
        let started = Instant::now();
        let spec = pb::SandboxSpec {
            image: def.base_image.clone(),
            ttl_s: Some(options.timeout.as_secs_f64() + 60.0),
            resources: options
                .disk_gib
                .map(|gib| pb::SandboxResources { disk_gib: Some(gib), ..Default::default() }),
            ..Default::default()
        };
        let created = options
            .calls
            .clone()
            .create(caller.request(pb::CreateRequest { spec: Some(spec) }))
            .await
            .map_err(|s| {
                BuildFailure::at(
                    BuildStage::Base,
                    format!("the build sandbox did not start: {}", s.message()),
                )
            })?;
        let sandbox_id = created.into_inner().sandbox.unwrap_or_default().sandbox_id;
        let deadline = started + options.timeout;
        let stage = std::sync::Mutex::new(BuildStage::Base);
        let steps = self.run_build(caller, def, &options, log, &sandbox_id, deadline, &key, &image, &stage);
        let outcome = match tokio::time::timeout_at(deadline.into(), steps).await {
            Ok(outcome) => outcome,
            Err(_) => Err(BuildFailure::at(
                *stage.lock().expect("stage"),
                format!("the build took longer than its bound of {} s", options.timeout.as_secs()),
            )),
        };
        let close = caller.request(pb::CloseRequest { sandbox_id: sandbox_id.clone() });
        if let Err(e) = options.calls.clone().close(close).await {
            tracing::warn!(sandbox_id, error = %e.message(), "closing a build sandbox failed");
        }
        match &outcome {
            Ok(_) => log.push(
                LogLevel::Info,
                Some("finalize".into()),
                format!("built {image} in {:.1} s", started.elapsed().as_secs_f64()),
            ),
            Err(f) => log.push(LogLevel::Error, Some(stage_name(f.stage)), f.message.clone()),
        }
        outcome.map(|()| BuiltTemplate { key, image, cached: false })
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_build(
        &self,
        caller: &Caller,
        def: &TemplateDefinition,
        options: &BuildOptions<'_>,
        log: &BuildLog,
        sandbox_id: &str,
        deadline: Instant,
        key: &str,
        image: &str,
        stage: &std::sync::Mutex<BuildStage>,
    ) -> Result<(), BuildFailure> {
        let at_base = |m: String| BuildFailure::at(BuildStage::Base, m);
        let facts = self
            .run(
                caller,
                options,
                sandbox_id,
                "printf '%s\\n%s' \"$(id -un 2>/dev/null || id -u)\" \"$PWD\"",
                None,
                None,
                &BTreeMap::new(),
                30.0,
            )
            .await
            .map_err(|s| at_base(format!("the base image has no usable shell: {}", s.message())))?;
        let text = String::from_utf8_lossy(&facts.stdout).to_string();
        let (user, workdir) = text.split_once('\n').unwrap_or((text.as_str(), "/"));
        let mut cursor = Cursor {
            sandbox_id: sandbox_id.to_string(),
            user: options.build_user.clone().unwrap_or_else(|| user.trim().to_string()),
            workdir: Some(workdir.trim()).filter(|w| w.starts_with('/')).unwrap_or("/").to_string(),
            env: BTreeMap::new(),
            image_env: Vec::new(),
            set_workdir: false,
            set_user: false,
            deadline,
        };
        for (i, step) in def.steps.iter().enumerate() {
            *stage.lock().expect("stage") = BuildStage::Step(i);
            let name = Some(stage_name(BuildStage::Step(i)));
            log.push(
                LogLevel::Info,
                name.clone(),
                format!("[step {}/{}] {}", i + 1, def.steps.len(), describe(step)),
            );
            self.run_step(caller, options, log, &mut cursor, step, name)
                .await
                .map_err(|message| BuildFailure::at(BuildStage::Step(i), message))?;
        }
        *stage.lock().expect("stage") = BuildStage::Finalize;
        let finalize = Some("finalize".to_string());
        let fail = |m: String| BuildFailure::at(BuildStage::Finalize, m);
        let commands = CommandContext {
            calls: &options.calls,
            caller,
            sandbox_id,
            user: &cursor.user,
            cwd: &cursor.workdir,
            env: &cursor.env,
        };
        if let Some(start) = &def.start_cmd {
            log.push(LogLevel::Info, finalize.clone(), format!("starting: {start}"));
            commands
                .start(start)
                .await
                .map_err(|s| fail(format!("the start command did not start: {}", s.message())))?;
        }
        if let Some(ready) = &def.ready_cmd {
            log.push(LogLevel::Info, finalize.clone(), format!("waiting for: {ready}"));
            commands.wait_ready(ready, READY_TIMEOUT).await.map_err(fail)?;
        }
        let mut labels = BTreeMap::from([(templates::TEMPLATE_KEY_LABEL.to_string(), key.to_string())]);
        if let Some(start) = &def.start_cmd {
            labels.insert(templates::TEMPLATE_START_LABEL.into(), encode_command(start));
        }
        if let Some(ready) = &def.ready_cmd {
            labels.insert(templates::TEMPLATE_READY_LABEL.into(), encode_command(ready));
        }
        let config = TemplateImageConfig {
            env: cursor.image_env.clone(),
            workdir: cursor.set_workdir.then(|| cursor.workdir.clone()),
            user: cursor.set_user.then(|| cursor.user.clone()),
            labels,
        };
        let id = SandboxId::parse("sandbox_id", sandbox_id).map_err(|e| fail(e.to_string()))?;
        self.backend()
            .commit_template(&id, image, &config)
            .await
            .map_err(|e| fail(format!("committing the template image failed: {e}")))?;
        Ok(())
    }

    async fn run_step(
        &self,
        caller: &Caller,
        options: &BuildOptions<'_>,
        log: &BuildLog,
        cursor: &mut Cursor,
        step: &Step,
        name: Option<String>,
    ) -> Result<(), String> {
        match step {
            Step::Run { command, user } => {
                let as_user = user.clone().unwrap_or_else(|| cursor.user.clone());
                let out = self
                    .run(
                        caller,
                        options,
                        &cursor.sandbox_id,
                        command,
                        Some(&as_user),
                        Some(&cursor.workdir),
                        &cursor.env,
                        cursor.remaining_s(),
                    )
                    .await
                    .map_err(|s| run_failure(command, &as_user, &s))?;
                output_lines(log, &name, LogLevel::Info, &out.stdout);
                output_lines(log, &name, LogLevel::Warn, &out.stderr);
                if out.error_type == "timeout" {
                    return Err(format!("failed to run command '{command}': the build's time ran out"));
                }
                let stderr = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
                if !out.error_type.is_empty() && unknown_user(&stderr) {
                    return Err(invalid_username(command, &as_user));
                }
                if out.return_code != 0 {
                    let tail = String::from_utf8_lossy(&out.stderr);
                    let tail = tail.trim().lines().last().unwrap_or_default().to_string();
                    return Err(format!(
                        "failed to run command '{command}': exit status {}{}",
                        out.return_code,
                        if tail.is_empty() { String::new() } else { format!(": {tail}") }
                    ));
                }
            }
            Step::Workdir { path } => {
                let path = absolute(&cursor.workdir, path);
                let cmd = format!("mkdir -p -- {}", quote(&path));
                let out = self
                    .run(
                        caller,
                        options,
                        &cursor.sandbox_id,
                        &cmd,
                        Some(&cursor.user),
                        Some("/"),
                        &cursor.env,
                        cursor.remaining_s(),
                    )
                    .await
                    .map_err(|s| s.message().to_string())?;
                if out.return_code != 0 {
                    return Err(format!(
                        "cannot make workdir {path:?}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                cursor.workdir = path;
                cursor.set_workdir = true;
            }
            Step::User { name: user } => {
                let cmd = format!("id -- {} >/dev/null", quote(user));
                let out = self
                    .run(
                        caller,
                        options,
                        &cursor.sandbox_id,
                        &cmd,
                        Some("root"),
                        Some("/"),
                        &BTreeMap::new(),
                        cursor.remaining_s(),
                    )
                    .await
                    .map_err(|s| s.message().to_string())?;
                if out.return_code != 0 {
                    return Err(format!("user {user:?} does not exist in the image"));
                }
                cursor.user = user.clone();
                cursor.set_user = true;
            }
            Step::Env { vars } => {
                for (k, v) in vars {
                    cursor.env.insert(k.clone(), v.clone());
                    cursor.image_env.push((k.clone(), v.clone()));
                }
            }
            Step::Copy { files_hash, src, dest, owner, mode } => {
                let archive = (options.files)(files_hash)
                    .ok_or_else(|| format!("the files of {src:?} (hash {files_hash}) were not uploaded"))?;
                let gzip = is_gzip(&archive).map_err(|e| format!("reading the upload of {src:?}: {e}"))?;
                let tag = &files_hash[..16.min(files_hash.len())];
                let in_sandbox = format!("/.sandboxd-copy-{tag}.tar");
                upload_archive(&options.calls, caller, &cursor.sandbox_id, &archive, &in_sandbox)
                    .await
                    .map_err(|s| {
                        format!("copying the files of {src:?} into the build failed: {}", s.message())
                    })?;
                let vars = [
                    ("archive", in_sandbox.clone()),
                    ("unpack", format!("/.sandboxd-copy-{tag}")),
                    ("base", glob_free_base(src)),
                    ("target", dest.clone()),
                    ("workdir", cursor.workdir.clone()),
                    ("owner", owner.clone().unwrap_or_else(|| cursor.user.clone())),
                    ("mode", mode.clone().unwrap_or_default()),
                    ("zflag", if gzip { "z".into() } else { String::new() }),
                ];
                let script: String =
                    vars.iter().map(|(k, v)| format!("{k}={}\n", quote(v))).collect::<String>() + COPY_SCRIPT;
                let out = self
                    .run(
                        caller,
                        options,
                        &cursor.sandbox_id,
                        &script,
                        Some("root"),
                        Some("/"),
                        &BTreeMap::new(),
                        cursor.remaining_s(),
                    )
                    .await
                    .map_err(|s| s.message().to_string())?;
                output_lines(log, &name, LogLevel::Debug, &out.stdout);
                if out.return_code != 0 {
                    return Err(format!(
                        "failed to copy {src:?} to {dest:?}: {}",
                        String::from_utf8_lossy(&out.stderr)
                            .trim()
                            .lines()
                            .last()
                            .unwrap_or("the unpack failed")
                    ));
                }
            }
        }
        Ok(())
    }

    /// `Exec` through the served stack.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        caller: &Caller,
        options: &BuildOptions<'_>,
        sandbox_id: &str,
        command: &str,
        user: Option<&str>,
        cwd: Option<&str>,
        env: &BTreeMap<String, String>,
        timeout_s: f64,
    ) -> Result<pb::ExecResponse, Status> {
        let exec = pb::ExecRequest {
            sandbox_id: sandbox_id.to_string(),
            command: command.to_string(),
            cwd: cwd.map(String::from),
            env: env.clone().into_iter().collect(),
            timeout_s: Some(timeout_s),
            user: user.map(String::from),
            stdin: None,
        };
        Ok(options.calls.clone().exec(caller.request(exec)).await?.into_inner())
    }
}

/// `archive` written to `path` in the sandbox by `Upload` (through the served stack).
async fn upload_archive(
    calls: &Calls,
    caller: &Caller,
    sandbox_id: &str,
    archive: &std::path::Path,
    path: &str,
) -> Result<(), Status> {
    use futures_util::StreamExt;
    use pb::upload_request::Request as Part;
    let file = tokio::fs::File::open(archive).await.map_err(|e| Status::internal(e.to_string()))?;
    let size = file.metadata().await.map_err(|e| Status::internal(e.to_string()))?.len();
    let header = pb::UploadHeader {
        sandbox_id: sandbox_id.to_string(),
        path: path.to_string(),
        size: Some(size),
        ..Default::default()
    };
    // A read error ends the stream short of `size`: the upload then fails as incomplete.
    let chunks = tokio_util::io::ReaderStream::with_capacity(file, UPLOAD_CHUNK)
        .take_while(|c| std::future::ready(c.is_ok()))
        .filter_map(|c| std::future::ready(c.ok()))
        .map(|c| pb::UploadRequest { request: Some(Part::Chunk(c.to_vec())) });
    let messages = futures_util::stream::once(std::future::ready(pb::UploadRequest {
        request: Some(Part::Header(header)),
    }))
    .chain(chunks);
    calls.clone().upload(caller.request(messages)).await?;
    Ok(())
}

/// The bytes of one `Upload` message of a copy step's archive.
const UPLOAD_CHUNK: usize = 256 * 1024;

/// Where a template's start and ready commands run: the sandbox, through the served stack, as
/// `user` in `cwd` with `env` (empty: the sandbox's own).
pub struct CommandContext<'a> {
    pub calls: &'a Calls,
    pub caller: &'a Caller,
    pub sandbox_id: &'a str,
    pub user: &'a str,
    pub cwd: &'a str,
    pub env: &'a BTreeMap<String, String>,
}

impl CommandContext<'_> {
    /// `command` started in the background (`StartProcess`).
    pub async fn start(&self, command: &str) -> Result<(), Status> {
        let start = pb::StartProcessRequest {
            sandbox_id: self.sandbox_id.to_string(),
            command: command.to_string(),
            cwd: Some(self.cwd.to_string()).filter(|c| !c.is_empty()),
            env: self.env.clone().into_iter().collect(),
            user: Some(self.user.to_string()).filter(|u| !u.is_empty()),
            ..Default::default()
        };
        self.calls.clone().start_process(self.caller.request(start)).await?;
        Ok(())
    }

    /// Runs `command` (`Exec`) until it exits 0 (every half second), up to `timeout`.
    pub async fn wait_ready(&self, command: &str, timeout: Duration) -> Result<(), String> {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let exec = pb::ExecRequest {
                sandbox_id: self.sandbox_id.to_string(),
                command: command.to_string(),
                cwd: Some(self.cwd.to_string()).filter(|c| !c.is_empty()),
                env: self.env.clone().into_iter().collect(),
                timeout_s: Some(left.as_secs_f64().max(1.0)),
                user: Some(self.user.to_string()).filter(|u| !u.is_empty()),
                stdin: None,
            };
            let out = self
                .calls
                .clone()
                .exec(self.caller.request(exec))
                .await
                .map_err(|s| format!("the ready command failed: {}", s.message()))?
                .into_inner();
            if out.return_code == 0 && out.error_type.is_empty() {
                return Ok(());
            }
            if Instant::now() + Duration::from_millis(500) >= until {
                return Err(format!(
                    "the ready command {command:?} did not succeed within {} s (last exit status {})",
                    timeout.as_secs(),
                    out.return_code
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn describe(step: &Step) -> String {
    match step {
        Step::Run { command, user } => match user {
            Some(u) => format!("RUN (as {u}) {command}"),
            None => format!("RUN {command}"),
        },
        Step::Copy { src, dest, .. } => format!("COPY {src} {dest}"),
        Step::Env { vars } => {
            format!("ENV {}", vars.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))
        }
        Step::Workdir { path } => format!("WORKDIR {path}"),
        Step::User { name } => format!("USER {name}"),
    }
}

/// Whether an exec's own error says the user is not in the image (docker's and the agent's words).
fn unknown_user(error: &str) -> bool {
    error.contains("unable to find user")
        || error.contains("no matching entries in passwd")
        || error.contains("unknown user")
}

/// E2B's wording for a step run as a user the image lacks.
fn invalid_username(command: &str, user: &str) -> String {
    format!("failed to run command '{command}': command failed: unauthenticated: invalid username: '{user}'")
}

/// An exec the service refused.
fn run_failure(command: &str, user: &str, status: &Status) -> String {
    let message = status.message();
    if unknown_user(&message.to_ascii_lowercase()) {
        return invalid_username(command, user);
    }
    format!("failed to run command '{command}': {message}")
}

fn output_lines(log: &BuildLog, step: &Option<String>, level: LogLevel, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for line in text.lines().take(MAX_LINES_PER_STEP) {
        log.push(level, step.clone(), line.to_string());
    }
}

fn absolute(workdir: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{}", workdir.trim_end_matches('/'), path.trim_start_matches("./"))
    }
}

fn is_gzip(path: &std::path::Path) -> std::io::Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 2];
    let mut file = std::fs::File::open(path)?;
    let n = file.read(&mut magic)?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_sources_lose_their_globs() {
        assert_eq!(glob_free_base("folder/*"), "folder");
        assert_eq!(glob_free_base("a.txt"), "a.txt");
        assert_eq!(glob_free_base("*.txt"), "");
        assert_eq!(glob_free_base("./src/**/x.py"), "src");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(decode_command(&encode_command("echo 'hi' $X")).as_deref(), Some("echo 'hi' $X"));
        assert_eq!(stage_name(BuildStage::Step(0)), "1");
        assert_eq!(absolute("/home/u", "./a"), "/home/u/a");
    }
}
