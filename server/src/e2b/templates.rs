//! E2B's template API (`Template.build`, `Template.exists`, build status and logs, tags) over
//! sandboxd's template engine (`SandboxApi::build_template`): a name (`alias[:tag]`) per
//! tenant, its builds and tags kept in this process; each build's image is the engine's
//! (`sandboxd-template:<key>`), so a definition built before is reused, not built again.
//! The builder's file uploads land on this listener (`PUT` to the URL the files call hands
//! out, a one-time capability in its query) in a directory removed when the build ends.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use tokio::io::AsyncWriteExt;
use tonic::Status;

use super::inproc::Caller;
use super::{errors, E2bFront};
use crate::auth::Principal;
use crate::core::templates::{BuildLog, KeyLocks, Step, TemplateDefinition};
use crate::service::template_build::{self, BuildOptions};

type Reply = Result<Response, Response>;

fn refuse(status: Status) -> Response {
    errors::rest(status)
}

/// E2B's tag when a name has none.
const DEFAULT_TAG: &str = "default";
/// The build status call's page of log entries (E2B's own).
const LOG_PAGE: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BuildStatus {
    Waiting,
    Building,
    Ready,
    Error,
}

impl BuildStatus {
    fn as_str(self) -> &'static str {
        match self {
            BuildStatus::Waiting => "waiting",
            BuildStatus::Building => "building",
            BuildStatus::Ready => "ready",
            BuildStatus::Error => "error",
        }
    }
}

struct Build {
    template_id: String,
    status: BuildStatus,
    log: BuildLog,
    /// The failure: message and E2B's step name.
    reason: Option<(String, Option<String>)>,
    image: Option<String>,
    start_cmd: Option<String>,
    ready_cmd: Option<String>,
    /// Tags this build takes once ready.
    tags: Vec<String>,
}

struct Template {
    /// The tenant it belongs to ("" for the operator's).
    scope: String,
    alias: String,
    /// tag -> (build id, assigned at unix ms).
    tags: BTreeMap<String, (String, i64)>,
    /// files hash -> the upload capability handed out for it.
    upload_tokens: HashMap<String, String>,
}

/// The names, builds and uploads of this front-end.
pub struct Registry {
    inner: Mutex<Entries>,
    uploads: tempfile::TempDir,
    locks: KeyLocks,
}

#[derive(Default)]
struct Entries {
    templates: HashMap<String, Template>,
    builds: HashMap<String, Build>,
}

impl Registry {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            inner: Mutex::default(),
            uploads: tempfile::Builder::new().prefix("sandboxd-e2b-uploads-").tempdir()?,
            locks: KeyLocks::default(),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner.lock().expect("template registry")
    }

    fn upload_dir(&self, template_id: &str) -> PathBuf {
        self.uploads.path().join(template_id)
    }
}

/// What a create of an E2B template name starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub image: String,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
}

fn scope_of(principal: &Principal) -> String {
    principal.tenant().unwrap_or_default().to_string()
}

/// `alias[:tag]` split, each checked: aliases are `a-z 0-9 _ -` (E2B's), tags `A-Z a-z 0-9 . _ -`.
fn split_name(field: &str, name: &str) -> Result<(String, Option<String>), Status> {
    let (alias, tag) = match name.split_once(':') {
        Some((a, t)) => (a, Some(t)),
        None => (name, None),
    };
    let alias_ok = !alias.is_empty()
        && alias.len() <= 128
        && alias.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !alias.starts_with(['-', '_']);
    if !alias_ok {
        return Err(Status::invalid_argument(format!(
            "{field}: template name {alias:?} must be 1-128 of a-z, 0-9, `-` and `_` (not starting with `-` or `_`)"
        )));
    }
    if let Some(tag) = tag {
        check_tag(field, tag)?;
    }
    Ok((alias.to_string(), tag.map(String::from)))
}

fn check_tag(field: &str, tag: &str) -> Result<(), Status> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !tag.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{field}: tag {tag:?} must be 1-128 of A-Z, a-z, 0-9, `.`, `_` and `-` (not starting with `.` or `-`)"
        )))
    }
}

/// A tag as `assign_tags` and `remove_tags` give it: `tag` or `alias:tag` of `alias`.
fn tag_of(field: &str, alias: &str, given: &str) -> Result<String, Status> {
    match given.split_once(':') {
        Some((a, t)) => {
            if a != alias {
                return Err(Status::invalid_argument(format!(
                    "{field}: {given:?} names template {a:?}, not {alias:?}"
                )));
            }
            check_tag(field, t)?;
            Ok(t.to_string())
        }
        None => {
            check_tag(field, given)?;
            Ok(given.to_string())
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis() as i64
}

fn rfc3339(unix_ms: i64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

fn body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, Status> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de)
        .map_err(|e| Status::invalid_argument(format!("request body field `{}`: {}", e.path(), e.inner())))
}

impl Entries {
    /// The template `id_or_name` (an id, or `alias` in the caller's scope; the operator's
    /// reaches every scope).
    fn find(&self, principal: &Principal, id_or_name: &str) -> Option<String> {
        let scope = scope_of(principal);
        let visible = |t: &Template| t.scope == scope || principal.tenant().is_none();
        if let Some(t) = self.templates.get(id_or_name) {
            if visible(t) {
                return Some(id_or_name.to_string());
            }
        }
        let alias = id_or_name.split_once(':').map_or(id_or_name, |(a, _)| a);
        let mut found: Vec<(&String, &Template)> =
            self.templates.iter().filter(|(_, t)| t.alias == alias && visible(t)).collect();
        found.sort_by_key(|(_, t)| t.scope != scope);
        found.first().map(|(id, _)| (*id).clone())
    }

    /// The ready build `name` (`alias[:tag]` or a template id) names.
    fn ready_build(&self, principal: &Principal, name: &str) -> Option<&Build> {
        let id = self.find(principal, name)?;
        let tag = name.split_once(':').map_or(DEFAULT_TAG, |(_, t)| t);
        let template = self.templates.get(&id)?;
        let (build_id, _) = template.tags.get(tag)?;
        self.builds.get(build_id).filter(|b| b.status == BuildStatus::Ready)
    }
}

/// The image (and start/ready commands) of template `name` for `principal`: the config's
/// `server.e2b.templates` first, then the builds of this front-end (none for a caller not known:
/// the call it is for is refused by the stack's gate).
pub fn resolve(front: &E2bFront, principal: Option<&Principal>, name: &str) -> Option<Resolved> {
    if let Some(image) = front.inner.config.templates.get(name) {
        return Some(Resolved { image: image.clone(), start_cmd: None, ready_cmd: None });
    }
    let principal = principal?;
    let entries = front.inner.templates.entries();
    let build = entries.ready_build(principal, name)?;
    Some(Resolved {
        image: build.image.clone()?,
        start_cmd: build.start_cmd.clone(),
        ready_cmd: build.ready_cmd.clone(),
    })
}

/// After a create of a template with a start command: start it and wait for its ready
/// command, as the template's sandboxes start on E2B.
pub async fn start(
    front: &E2bFront,
    caller: &Caller,
    sandbox_id: &str,
    template: &Resolved,
) -> Result<(), Status> {
    let calls = front.calls();
    let env = BTreeMap::new();
    let commands =
        template_build::CommandContext { calls: &calls, caller, sandbox_id, user: "", cwd: "", env: &env };
    if let Some(cmd) = &template.start_cmd {
        commands.start(cmd).await?;
    }
    if let Some(ready) = &template.ready_cmd {
        commands
            .wait_ready(ready, template_build::READY_TIMEOUT)
            .await
            .map_err(Status::failed_precondition)?;
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BuildRequestV3 {
    name: Option<String>,
    alias: Option<String>,
    tags: Option<Vec<String>>,
    #[allow(dead_code)]
    team_id: Option<String>,
    #[allow(dead_code)]
    cpu_count: Option<u32>,
    #[serde(rename = "memoryMB")]
    #[allow(dead_code)]
    memory_mb: Option<u64>,
}

/// `POST /v3/templates`: a template (new, or the caller's of that name) and a build of it.
pub async fn request_build(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let req: BuildRequestV3 = body(&bytes).map_err(refuse)?;
    let name =
        req.name.or(req.alias).ok_or_else(|| refuse(Status::invalid_argument("`name` is required")))?;
    let (alias, tag) = split_name("name", &name).map_err(refuse)?;
    let mut tags: Vec<String> = tag.into_iter().collect();
    for t in req.tags.unwrap_or_default() {
        let t = tag_of("tags", &alias, &t).map_err(refuse)?;
        if !tags.contains(&t) {
            tags.push(t);
        }
    }
    if tags.is_empty() {
        tags.push(DEFAULT_TAG.into());
    }
    if front.inner.config.templates.contains_key(&alias) {
        return Err(refuse(Status::already_exists(format!(
            "template {alias:?} is this server's own (server.e2b.templates); choose another name"
        ))));
    }
    let scope = scope_of(&principal);
    let build_id = uuid::Uuid::new_v4().to_string();
    let mut entries = front.inner.templates.entries();
    let template_id = match entries.templates.iter().find(|(_, t)| t.alias == alias && t.scope == scope) {
        Some((id, _)) => id.clone(),
        None => {
            let id = format!("tpl{}", &uuid::Uuid::new_v4().simple().to_string()[..17]);
            entries.templates.insert(
                id.clone(),
                Template {
                    scope,
                    alias: alias.clone(),
                    tags: BTreeMap::new(),
                    upload_tokens: HashMap::new(),
                },
            );
            id
        }
    };
    entries.builds.insert(
        build_id.clone(),
        Build {
            template_id: template_id.clone(),
            status: BuildStatus::Waiting,
            log: BuildLog::default(),
            reason: None,
            image: None,
            start_cmd: None,
            ready_cmd: None,
            tags: tags.clone(),
        },
    );
    let out = json!({
        "templateID": template_id,
        "buildID": build_id,
        "public": false,
        "names": [alias],
        "aliases": [alias],
        "tags": tags,
    });
    Ok((StatusCode::ACCEPTED, Json(out)).into_response())
}

/// The template `id` (or name) as the caller sees it; 404 otherwise.
fn template_id(front: &E2bFront, principal: &Principal, id: &str) -> Result<String, Status> {
    front
        .inner
        .templates
        .entries()
        .find(principal, id)
        .ok_or_else(|| Status::not_found(format!("template {id:?} not found")))
}

/// `GET /templates/{id}/files/{hash}`: present (uploaded for this template), else where to upload.
pub async fn file_upload_link(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path((id, hash)): Path<(String, String)>,
) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let id = template_id(&front, &principal, &id).map_err(refuse)?;
    if hash.len() < 16 || hash.len() > 128 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(refuse(Status::invalid_argument(format!("files hash {hash:?} is not a hex digest"))));
    }
    let path = front.inner.templates.upload_dir(&id).join(&hash);
    if path.is_file() {
        return Ok((StatusCode::CREATED, Json(json!({ "present": true }))).into_response());
    }
    let token = uuid::Uuid::new_v4().simple().to_string();
    if let Some(t) = front.inner.templates.entries().templates.get_mut(&id) {
        t.upload_tokens.insert(hash.clone(), token.clone());
    }
    let host = super::header(&headers, "host").unwrap_or("127.0.0.1");
    let url = format!("http://{host}/_sandboxd/template-files/{id}/{hash}?token={token}");
    Ok((StatusCode::CREATED, Json(json!({ "present": false, "url": url }))).into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct UploadQuery {
    token: Option<String>,
}

/// `PUT /_sandboxd/template-files/{id}/{hash}?token=…`: the archive of a copy step, bounded
/// by `server.e2b.builds.max_upload_mib`; written whole or not at all.
pub async fn upload_file(
    State(front): State<E2bFront>,
    Path((id, hash)): Path<(String, String)>,
    Query(query): Query<UploadQuery>,
    body: axum::body::Body,
) -> Reply {
    let expected = {
        let entries = front.inner.templates.entries();
        entries.templates.get(&id).and_then(|t| t.upload_tokens.get(&hash).cloned())
    };
    let given = query.token.unwrap_or_default();
    let allowed = expected.is_some_and(|e| bool::from(e.as_bytes().ct_eq(given.as_bytes())));
    if !allowed {
        return Err(refuse(Status::permission_denied("this upload URL is not one this server handed out")));
    }
    let dir = front.inner.templates.upload_dir(&id);
    let limit = front.inner.config.builds.max_upload_mib << 20;
    let written = async {
        tokio::fs::create_dir_all(&dir).await?;
        let part = dir.join(format!("{hash}.part"));
        let mut file = tokio::fs::File::create(&part).await?;
        let mut stream = body.into_data_stream();
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(std::io::Error::other)?;
            size += chunk.len() as u64;
            if size > limit {
                drop(file);
                let _ = tokio::fs::remove_file(&part).await;
                return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, "too large"));
            }
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        drop(file);
        tokio::fs::rename(&part, dir.join(&hash)).await
    }
    .await;
    match written {
        Ok(()) => Ok(StatusCode::OK.into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            Err(refuse(Status::resource_exhausted(format!(
                "the upload is over server.e2b.builds.max_upload_mib ({} MiB)",
                front.inner.config.builds.max_upload_mib
            ))))
        }
        Err(e) => Err(refuse(Status::internal(format!("storing the upload failed: {e}")))),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StepJson {
    #[serde(rename = "type")]
    kind: String,
    args: Option<Vec<String>>,
    files_hash: Option<String>,
    force: Option<bool>,
    #[allow(dead_code)]
    force_upload: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BuildStartV2 {
    from_image: Option<String>,
    from_template: Option<String>,
    from_image_registry: Option<Value>,
    force: Option<bool>,
    steps: Option<Vec<StepJson>>,
    start_cmd: Option<String>,
    ready_cmd: Option<String>,
}

fn arg(args: &[String], i: usize) -> Option<String> {
    args.get(i).filter(|a| !a.is_empty()).cloned()
}

/// E2B's steps as the engine's; a bad one is refused naming it (E2B's 1-based step number).
fn steps_of(steps: Vec<StepJson>) -> Result<(Vec<Step>, bool), Status> {
    let mut out = Vec::with_capacity(steps.len());
    let mut force = false;
    for (i, step) in steps.into_iter().enumerate() {
        let n = i + 1;
        let args = step.args.unwrap_or_default();
        force |= step.force.unwrap_or(false);
        let need = |count: usize, what: &str| {
            if args.len() < count {
                Err(Status::invalid_argument(format!("steps[{i}] (step {n}, {}): needs {what}", step.kind)))
            } else {
                Ok(())
            }
        };
        out.push(match step.kind.to_ascii_uppercase().as_str() {
            "RUN" => {
                need(1, "a command")?;
                Step::Run { command: args[0].clone(), user: arg(&args, 1) }
            }
            "COPY" => {
                need(2, "a source and a destination")?;
                let files_hash = step.files_hash.clone().ok_or_else(|| {
                    Status::invalid_argument(format!("steps[{i}] (step {n}, COPY): needs filesHash"))
                })?;
                Step::Copy {
                    files_hash,
                    src: args[0].clone(),
                    dest: args[1].clone(),
                    owner: arg(&args, 2),
                    mode: arg(&args, 3),
                }
            }
            "ENV" => {
                if args.len() % 2 != 0 {
                    return Err(Status::invalid_argument(format!(
                        "steps[{i}] (step {n}, ENV): args must be name, value pairs"
                    )));
                }
                Step::Env { vars: args.chunks(2).map(|kv| (kv[0].clone(), kv[1].clone())).collect() }
            }
            "WORKDIR" => {
                need(1, "a path")?;
                Step::Workdir { path: args[0].clone() }
            }
            "USER" => {
                need(1, "a user")?;
                Step::User { name: args[0].clone() }
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "steps[{i}] (step {n}): type {other:?} is not one of RUN, COPY, ENV, WORKDIR, USER"
                )))
            }
        });
    }
    Ok((out, force))
}

/// `POST /v2/templates/{id}/builds/{build}`: the definition, built in the background.
pub async fn start_build(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path((id, build_id)): Path<(String, String)>,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let caller = front.api_caller(&headers).map_err(refuse)?;
    let id = template_id(&front, &principal, &id).map_err(refuse)?;
    let req: BuildStartV2 = body(&bytes).map_err(refuse)?;
    if req.from_image_registry.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(refuse(Status::invalid_argument(
            "fromImageRegistry: this server uses no registry; load the image on it and name it in fromImage",
        )));
    }
    let base_image = match (req.from_image, req.from_template) {
        (_, Some(t)) => resolve(&front, Some(&principal), &t)
            .map(|r| r.image)
            .ok_or_else(|| refuse(Status::not_found(format!("fromTemplate: template {t:?} not found"))))?,
        (Some(image), None) => front.inner.config.images.get(&image).cloned().unwrap_or(image),
        (None, None) => {
            return Err(refuse(Status::invalid_argument("one of fromImage or fromTemplate is required")))
        }
    };
    let (steps, step_force) = steps_of(req.steps.unwrap_or_default()).map_err(refuse)?;
    let def = TemplateDefinition { base_image, steps, start_cmd: req.start_cmd, ready_cmd: req.ready_cmd };
    let force = req.force.unwrap_or(false) || step_force;
    let log = {
        let mut entries = front.inner.templates.entries();
        let build = entries.builds.get_mut(&build_id).filter(|b| b.template_id == id).ok_or_else(|| {
            refuse(Status::not_found(format!("build {build_id:?} of template {id:?} not found")))
        })?;
        if build.status != BuildStatus::Waiting {
            return Err(refuse(Status::already_exists(format!("build {build_id:?} was started already"))));
        }
        build.status = BuildStatus::Building;
        build.start_cmd = def.start_cmd.clone();
        build.ready_cmd = def.ready_cmd.clone();
        build.log.clone()
    };
    tokio::spawn(run_build(front, caller, id, build_id, def, force, log));
    Ok(StatusCode::ACCEPTED.into_response())
}

async fn run_build(
    front: E2bFront,
    caller: Caller,
    template_id: String,
    build_id: String,
    def: TemplateDefinition,
    force: bool,
    log: BuildLog,
) {
    let registry = &front.inner.templates;
    let dir = registry.upload_dir(&template_id);
    let files_dir = dir.clone();
    let files = move |hash: &str| Some(files_dir.join(hash)).filter(|p| p.is_file());
    let builds = &front.inner.config.builds;
    let options = BuildOptions {
        force,
        files: &files,
        timeout: Duration::from_secs(builds.timeout_s),
        disk_gib: builds.disk_gib,
        build_user: Some("root".into()),
        calls: front.calls(),
        locks: &registry.locks,
    };
    let outcome = front.inner.engine.build_template(&caller, &def, options, &log).await;
    // The uploads were this build's: nothing of them stays.
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let mut entries = registry.entries();
    let Some(build) = entries.builds.get_mut(&build_id) else { return };
    match outcome {
        Ok(built) => {
            tracing::info!(template_id, build_id, image = %built.image, cached = built.cached, "template built");
            build.status = BuildStatus::Ready;
            build.image = Some(built.image);
            let tags = build.tags.clone();
            let at = now_ms();
            if let Some(t) = entries.templates.get_mut(&template_id) {
                for tag in tags {
                    t.tags.insert(tag, (build_id.clone(), at));
                }
            }
        }
        Err(failure) => {
            tracing::info!(template_id, build_id, error = %failure.message, "template build failed");
            build.status = BuildStatus::Error;
            build.reason = Some((failure.message, Some(template_build::stage_name(failure.stage))));
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusQuery {
    logs_offset: Option<usize>,
    limit: Option<usize>,
}

fn log_entry(line: &crate::core::templates::BuildLogLine) -> Value {
    let mut entry = json!({
        "timestamp": rfc3339(line.unix_ms),
        "level": line.level.as_str(),
        "message": line.message,
    });
    if let Some(step) = &line.step {
        entry["step"] = json!(step);
    }
    entry
}

/// `GET /templates/{id}/builds/{build}/status`: the state and a page of the log.
pub async fn build_status(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    Path((id, build_id)): Path<(String, String)>,
    Query(query): Query<StatusQuery>,
) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let id = template_id(&front, &principal, &id).map_err(refuse)?;
    let entries = front.inner.templates.entries();
    let build = entries.builds.get(&build_id).filter(|b| b.template_id == id).ok_or_else(|| {
        refuse(Status::not_found(format!("build {build_id:?} of template {id:?} not found")))
    })?;
    let page =
        build.log.page(query.logs_offset.unwrap_or(0), query.limit.unwrap_or(LOG_PAGE).clamp(1, LOG_PAGE));
    let mut out = json!({
        "templateID": id,
        "buildID": build_id,
        "status": build.status.as_str(),
        "logs": page.iter().map(|l| format!("[{}] {}", rfc3339(l.unix_ms), l.message)).collect::<Vec<_>>(),
        "logEntries": page.iter().map(log_entry).collect::<Vec<_>>(),
    });
    if let Some((message, step)) = &build.reason {
        out["reason"] = json!({ "message": message, "step": step, "logEntries": [] });
    }
    Ok(Json(out).into_response())
}

/// `GET /templates/aliases/{alias}`: 200 when the caller has a template of that name (or the
/// server maps it), 404 otherwise.
pub async fn alias(State(front): State<E2bFront>, headers: HeaderMap, Path(alias): Path<String>) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    if front.inner.config.templates.contains_key(&alias) {
        return Ok(Json(json!({ "templateID": alias, "public": true })).into_response());
    }
    let id = template_id(&front, &principal, &alias).map_err(refuse)?;
    Ok(Json(json!({ "templateID": id, "public": false })).into_response())
}

#[derive(Debug, Default, Deserialize)]
struct AssignTags {
    target: String,
    tags: Vec<String>,
}

/// `POST /templates/tags`: `tags` point at the build `target` (`alias:tag`) names.
pub async fn assign_tags(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let req: AssignTags = body(&bytes).map_err(refuse)?;
    let (alias, tag) = split_name("target", &req.target).map_err(refuse)?;
    if req.tags.is_empty() {
        return Err(refuse(Status::invalid_argument("tags: name at least one tag")));
    }
    let tags =
        req.tags.iter().map(|t| tag_of("tags", &alias, t)).collect::<Result<Vec<_>, _>>().map_err(refuse)?;
    let mut entries = front.inner.templates.entries();
    let id = entries
        .find(&principal, &alias)
        .ok_or_else(|| refuse(Status::not_found(format!("template {alias:?} not found"))))?;
    let tag = tag.unwrap_or_else(|| DEFAULT_TAG.into());
    let template = entries.templates.get_mut(&id).expect("found");
    let (build_id, _) = template
        .tags
        .get(&tag)
        .cloned()
        .ok_or_else(|| refuse(Status::not_found(format!("template {alias:?} has no tag {tag:?}"))))?;
    let at = now_ms();
    for t in &tags {
        template.tags.insert(t.clone(), (build_id.clone(), at));
    }
    Ok((StatusCode::CREATED, Json(json!({ "buildID": build_id, "tags": tags }))).into_response())
}

#[derive(Debug, Default, Deserialize)]
struct RemoveTags {
    name: String,
    tags: Vec<String>,
}

/// `DELETE /templates/tags`: the tags no longer name a build of template `name`.
pub async fn remove_tags(
    State(front): State<E2bFront>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let req: RemoveTags = body(&bytes).map_err(refuse)?;
    let (alias, _) = split_name("name", &req.name).map_err(refuse)?;
    let tags =
        req.tags.iter().map(|t| tag_of("tags", &alias, t)).collect::<Result<Vec<_>, _>>().map_err(refuse)?;
    let mut entries = front.inner.templates.entries();
    let id = entries
        .find(&principal, &alias)
        .ok_or_else(|| refuse(Status::not_found(format!("template {alias:?} not found"))))?;
    let template = entries.templates.get_mut(&id).expect("found");
    for t in &tags {
        if template.tags.remove(t).is_none() {
            return Err(refuse(Status::not_found(format!("template {alias:?} has no tag {t:?}"))));
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /templates/{id}/tags`.
pub async fn list_tags(State(front): State<E2bFront>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let principal = front.api_identity(&headers).map_err(refuse)?;
    let id = template_id(&front, &principal, &id).map_err(refuse)?;
    let entries = front.inner.templates.entries();
    let template = entries.templates.get(&id).expect("found");
    let out: Vec<Value> = template
        .tags
        .iter()
        .map(|(tag, (build, at))| json!({ "tag": tag, "buildID": build, "createdAt": rfc3339(*at) }))
        .collect();
    Ok(Json(out).into_response())
}

/// The routes of this module, merged into the front-end's router.
pub fn routes() -> axum::Router<E2bFront> {
    use axum::routing::{get, post, put};
    axum::Router::new()
        .route("/v3/templates", post(request_build))
        .route("/templates/{id}/files/{hash}", get(file_upload_link))
        .route(
            "/_sandboxd/template-files/{id}/{hash}",
            put(upload_file).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/v2/templates/{id}/builds/{build}", post(start_build))
        .route("/templates/{id}/builds/{build}/status", get(build_status))
        .route("/templates/aliases/{alias}", get(alias))
        .route("/templates/tags", post(assign_tags).delete(remove_tags))
        .route("/templates/{id}/tags", get(list_tags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tags_are_checked() {
        assert_eq!(split_name("name", "e2b-test:v1-ab").unwrap(), ("e2b-test".into(), Some("v1-ab".into())));
        assert_eq!(split_name("name", "my_tpl").unwrap(), ("my_tpl".into(), None));
        assert!(split_name("name", "Bad Name").unwrap_err().message().contains("name:"));
        assert!(split_name("name", "x:").is_err());
        assert!(tag_of("tags", "a", ":invalid").is_err());
        assert!(tag_of("tags", "a", "a:").is_err());
        assert!(tag_of("tags", "a", "b:v1").unwrap_err().message().contains("not \"a\""));
        assert_eq!(tag_of("tags", "a", "a:v1").unwrap(), "v1");
        assert_eq!(tag_of("tags", "a", "stable").unwrap(), "stable");
    }

    #[test]
    fn e2b_steps_become_the_engines_or_are_refused_by_number() {
        let step = |kind: &str, args: &[&str], hash: Option<&str>| StepJson {
            kind: kind.into(),
            args: Some(args.iter().map(|a| a.to_string()).collect()),
            files_hash: hash.map(String::from),
            force: Some(false),
            force_upload: None,
        };
        let (steps, force) = steps_of(vec![
            step("RUN", &["ls -l", "root"], None),
            step("COPY", &["folder/*", "folder", "", ""], Some("ab")),
            step("ENV", &["A", "1", "B", "2"], None),
            step("WORKDIR", &["/app"], None),
            step("USER", &["user"], None),
        ])
        .unwrap();
        assert!(!force);
        assert_eq!(steps[0], Step::Run { command: "ls -l".into(), user: Some("root".into()) });
        assert!(matches!(&steps[1], Step::Copy { owner: None, mode: None, .. }));
        assert_eq!(steps[2], Step::Env { vars: vec![("A".into(), "1".into()), ("B".into(), "2".into())] });
        let e = steps_of(vec![step("RUN", &["x"], None), step("ADD", &["a"], None)]).unwrap_err();
        assert!(e.message().contains("step 2"), "{}", e.message());
        let e = steps_of(vec![step("COPY", &["a", "b"], None)]).unwrap_err();
        assert!(e.message().contains("filesHash"), "{}", e.message());
    }
}
