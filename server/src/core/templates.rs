//! Templates: an environment built once from a base image plus steps (run a command, copy
//! files, set env / workdir / user), then a start and a ready command, and kept as an image
//! keyed by everything that went into it (the base image's id, the steps, the copied files'
//! hashes). The same definition is built once; every later build of it, and every create, pool
//! and `CreateBatch` naming its image, reuses that image. The neutral words only: the build
//! itself runs in `service/template_build.rs`, the commit behind the backend seam.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::ProviderError;

/// Repository of every template image: `sandboxd-template:<32 hex of the key>`.
pub const TEMPLATE_REPOSITORY: &str = "sandboxd-template";
/// Label on a template image: its full key.
pub const TEMPLATE_KEY_LABEL: &str = "sandboxd.template.key";
/// Label on a template image: the start command (base64url), when it has one.
pub const TEMPLATE_START_LABEL: &str = "sandboxd.template.start";
/// Label on a template image: the ready command (base64url), when it has one.
pub const TEMPLATE_READY_LABEL: &str = "sandboxd.template.ready";

/// Steps one definition may hold.
pub const MAX_STEPS: usize = 256;
/// The longest command, path or value a step may carry.
const MAX_ARG: usize = 64 << 10;

/// One build step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Step {
    /// A shell command, as `user` (None: the build's current user).
    Run { command: String, user: Option<String> },
    /// The files of an uploaded archive (by its hash): the entry under `src`'s directory
    /// moved to `dest` (relative: below the current workdir), owned by `owner` (None: the
    /// current user), with `mode` (octal) when given.
    Copy { files_hash: String, src: String, dest: String, owner: Option<String>, mode: Option<String> },
    /// Environment for later steps and for the template's sandboxes.
    Env { vars: Vec<(String, String)> },
    /// The working directory of later steps and of the template's sandboxes (made if missing).
    Workdir { path: String },
    /// The user of later steps and of the template's sandboxes.
    User { name: String },
}

impl Step {
    /// The step's kind, as errors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Run { .. } => "run",
            Step::Copy { .. } => "copy",
            Step::Env { .. } => "env",
            Step::Workdir { .. } => "workdir",
            Step::User { .. } => "user",
        }
    }
}

/// What a template is built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct TemplateDefinition {
    /// The base image (already resolved to one this server can use).
    pub base_image: String,
    pub steps: Vec<Step>,
    /// Started in the background when a sandbox of the template starts.
    pub start_cmd: Option<String>,
    /// Run until it succeeds before a sandbox of the template counts as started.
    pub ready_cmd: Option<String>,
}

/// Where a build failed: the base image, step `i` (0-based), or the final start/ready check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildStage {
    Base,
    Step(usize),
    Finalize,
}

/// A refused or failed build: where, and why (the message names the step).
#[derive(Debug, Clone)]
pub struct BuildFailure {
    pub stage: BuildStage,
    pub message: String,
    /// The refusal's kind, for a status code.
    pub error: Option<Arc<ProviderError>>,
}

impl BuildFailure {
    pub fn at(stage: BuildStage, message: impl Into<String>) -> Self {
        Self { stage, message: message.into(), error: None }
    }
}

fn user_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '$'))
}

fn env_key_ok(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn text_ok(value: &str) -> bool {
    value.len() <= MAX_ARG && !value.contains('\0')
}

/// The definition checked: a clear error naming the first bad step and what is allowed.
pub fn validate(def: &TemplateDefinition) -> Result<(), BuildFailure> {
    if def.base_image.is_empty() || crate::core::spec::validate_image(&def.base_image).is_err() {
        return Err(BuildFailure::at(
            BuildStage::Base,
            format!("base image {:?} is not an image reference", def.base_image),
        ));
    }
    if def.steps.len() > MAX_STEPS {
        return Err(BuildFailure::at(
            BuildStage::Step(MAX_STEPS),
            format!("at most {MAX_STEPS} steps (got {})", def.steps.len()),
        ));
    }
    for (i, step) in def.steps.iter().enumerate() {
        let bad = |why: String| {
            Err(BuildFailure::at(BuildStage::Step(i), format!("step {} ({}): {why}", i + 1, step.kind())))
        };
        match step {
            Step::Run { command, user } => {
                if command.trim().is_empty() || !text_ok(command) {
                    return bad("the command must be non-empty, without NUL, at most 64 KiB".into());
                }
                if let Some(u) = user.as_deref().filter(|u| !user_name_ok(u)) {
                    return bad(format!("user {u:?} is not a user name (letters, digits, `_ - . $`)"));
                }
            }
            Step::Copy { files_hash, src, dest, owner, mode } => {
                if files_hash.len() < 16 || !files_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return bad(format!("files hash {files_hash:?} is not a hex digest"));
                }
                if src.is_empty()
                    || src.starts_with('/')
                    || src.split('/').any(|p| p == "..")
                    || !text_ok(src)
                {
                    return bad(format!("source {src:?} must be a relative path inside the build context"));
                }
                if dest.is_empty() || !text_ok(dest) || dest.contains('\n') {
                    return bad(format!("destination {dest:?} must be a non-empty path"));
                }
                if let Some(o) = owner.as_deref().filter(|o| !user_name_ok(o)) {
                    return bad(format!("owner {o:?} is not `user` or `user:group`"));
                }
                if let Some(m) = mode
                    .as_deref()
                    .filter(|m| m.is_empty() || m.len() > 4 || !m.bytes().all(|b| (b'0'..=b'7').contains(&b)))
                {
                    return bad(format!("mode {m:?} is not an octal mode (e.g. 0755)"));
                }
            }
            Step::Env { vars } => {
                for (k, v) in vars {
                    if !env_key_ok(k) || !text_ok(v) || v.contains('\n') {
                        return bad(format!(
                            "environment variable {k:?}: names are letters, digits and `_`, values without NUL or newline"
                        ));
                    }
                }
            }
            Step::Workdir { path } => {
                if path.is_empty() || !text_ok(path) || path.contains('\n') {
                    return bad(format!("workdir {path:?} must be a non-empty path"));
                }
            }
            Step::User { name } => {
                if !user_name_ok(name) {
                    return bad(format!("user {name:?} is not a user name (letters, digits, `_ - . $`)"));
                }
            }
        }
    }
    for (what, cmd) in [("start command", &def.start_cmd), ("ready command", &def.ready_cmd)] {
        if cmd.as_deref().is_some_and(|c| !text_ok(c)) {
            return Err(BuildFailure::at(
                BuildStage::Finalize,
                format!("the {what} has a NUL or is over 64 KiB"),
            ));
        }
    }
    Ok(())
}

/// The key of `def` built on the base image whose id is `base_image_id`: sha256 of both.
/// The base image's name is not part of it (two names of one image build one template).
pub fn template_key(base_image_id: &str, def: &TemplateDefinition) -> String {
    let canonical = serde_json::json!({
        "base_image_id": base_image_id,
        "steps": def.steps,
        "start_cmd": def.start_cmd,
        "ready_cmd": def.ready_cmd,
    });
    let digest = Sha256::digest(serde_json::to_vec(&canonical).unwrap_or_default());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The image a template of key `key` is kept as.
pub fn template_image(key: &str) -> String {
    format!("{TEMPLATE_REPOSITORY}:{}", &key[..key.len().min(32)])
}

/// What the commit records besides the filesystem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateImageConfig {
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// A built template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltTemplate {
    pub key: String,
    pub image: String,
    /// Found already built: nothing ran.
    pub cached: bool,
}

/// One line of a build's log.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildLogLine {
    pub unix_ms: i64,
    pub level: LogLevel,
    pub message: String,
    /// The step it belongs to, as E2B numbers them ("base", "1".., "finalize").
    pub step: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// A build's log as it grows (readers page through it by offset).
#[derive(Debug, Clone, Default)]
pub struct BuildLog(Arc<Mutex<Vec<BuildLogLine>>>);

impl BuildLog {
    pub fn push(&self, level: LogLevel, step: Option<String>, message: impl Into<String>) {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        self.0.lock().expect("build log").push(BuildLogLine {
            unix_ms,
            level,
            message: message.into(),
            step,
        });
    }

    /// Lines from `offset`, at most `limit`.
    pub fn page(&self, offset: usize, limit: usize) -> Vec<BuildLogLine> {
        self.0.lock().expect("build log").iter().skip(offset).take(limit).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.0.lock().expect("build log").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One build at a time per key: a second build of the same definition waits for the first and
/// then finds its image (built once, however many ask at once).
#[derive(Debug, Default)]
pub struct KeyLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl KeyLocks {
    pub fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.0.lock().expect("key locks");
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry(key.to_string()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(steps: Vec<Step>) -> TemplateDefinition {
        TemplateDefinition { base_image: "img:1".into(), steps, ..Default::default() }
    }

    #[test]
    fn keys_follow_what_went_in() {
        let a = def(vec![Step::Run { command: "echo a".into(), user: None }]);
        let b = def(vec![Step::Run { command: "echo b".into(), user: None }]);
        assert_eq!(template_key("sha256:1", &a), template_key("sha256:1", &a));
        assert_ne!(template_key("sha256:1", &a), template_key("sha256:2", &a), "base image id");
        assert_ne!(template_key("sha256:1", &a), template_key("sha256:1", &b), "steps");
        let renamed = TemplateDefinition { base_image: "other-name:2".into(), ..a.clone() };
        assert_eq!(
            template_key("sha256:1", &a),
            template_key("sha256:1", &renamed),
            "the base's name is not"
        );
        let image = template_image(&template_key("sha256:1", &a));
        assert!(image.starts_with("sandboxd-template:") && image.len() == "sandboxd-template:".len() + 32);
    }

    #[test]
    fn bad_definitions_name_their_step() {
        let bad = def(vec![
            Step::Run { command: "true".into(), user: None },
            Step::User { name: "; exit 1".into() },
        ]);
        let e = validate(&bad).unwrap_err();
        assert_eq!(e.stage, BuildStage::Step(1));
        assert!(e.message.contains("step 2 (user)"), "{}", e.message);
        let e = validate(&def(vec![Step::Env { vars: vec![("A=B".into(), "1".into())] }])).unwrap_err();
        assert!(e.message.contains("step 1 (env)"), "{}", e.message);
        let copy = |src: &str| Step::Copy {
            files_hash: "ab".repeat(32),
            src: src.into(),
            dest: "/app".into(),
            owner: None,
            mode: None,
        };
        assert!(validate(&def(vec![copy("../etc")])).unwrap_err().message.contains("relative path"));
        assert!(validate(&def(vec![copy("src/*.py")])).is_ok());
        let base = TemplateDefinition { base_image: "-x".into(), ..Default::default() };
        assert_eq!(validate(&base).unwrap_err().stage, BuildStage::Base);
    }
}
