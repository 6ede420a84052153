//! Templates on this daemon (`crate::core::templates`): an image's id, and the commit of a
//! build sandbox as a template image. The image inherits the container's labels: every
//! sandbox label the build sandbox carries is blanked (a template never passes for a sandbox,
//! a tenant, a pool or a lease), the operator's own labels are kept (its cleanup by label
//! finds template images too), and the template's labels are set.

use std::collections::BTreeMap;

use super::argv;
use super::failure::{CliError, DockerFailureKind};
use super::provider::DockerProvider;
use crate::core::spec::SandboxId;
use crate::core::templates::TemplateImageConfig;
use crate::error::{ProviderError, Result};

/// The labels a sandbox carries that a template image must not pass on.
fn sandbox_labels() -> [&'static str; 12] {
    use crate::core::lease::{CREATED_LABEL, CREATE_DEADLINE_LABEL, EXPIRES_LABEL};
    [
        argv::SANDBOX_LABEL,
        argv::PORTS_LABEL,
        CREATED_LABEL,
        EXPIRES_LABEL,
        CREATE_DEADLINE_LABEL,
        crate::auth::TENANT_LABEL,
        super::labels::OCI_RUNTIME_LABEL,
        super::labels::POOL_LABEL,
        super::labels::POOL_OWNER_LABEL,
        super::disk::DISK_LABEL,
        argv::AGENT_INNER_LABEL,
        argv::RUNTIME_LABEL,
    ]
}

/// `docker commit` of a build sandbox: `--change` for each env, the workdir, the user, each
/// label (the present sandbox labels blanked first), then the container and the image.
pub fn template_commit_args(
    name: &str,
    image: &str,
    present: &BTreeMap<String, String>,
    config: &TemplateImageConfig,
) -> Vec<String> {
    let mut a = vec!["commit".to_string()];
    let mut change = |c: String| a.extend(["--change".to_string(), c]);
    for (k, v) in &config.env {
        // Double-quoted with `\`, `"` and `$` escaped: docker keeps the value verbatim (no
        // word splitting, no `$` expansion). Values never hold a newline (`core::templates`).
        let quoted = v.replace('\\', "\\\\").replace('"', "\\\"").replace('$', "\\$");
        change(format!("ENV {k}=\"{quoted}\""));
    }
    if let Some(dir) = &config.workdir {
        change(format!("WORKDIR {dir}"));
    }
    if let Some(user) = &config.user {
        change(format!("USER {user}"));
    }
    for label in sandbox_labels() {
        if present.contains_key(label) {
            change(format!("LABEL {label}="));
        }
    }
    for (k, v) in &config.labels {
        change(format!("LABEL {k}={v}"));
    }
    a.extend(["--".to_string(), name.to_string(), image.to_string()]);
    a
}

impl DockerProvider {
    /// The id of `image` on this daemon; `None` when it does not have it.
    pub async fn image_id(&self, image: &str) -> Result<Option<String>> {
        let args = vec![
            "image".to_string(),
            "inspect".to_string(),
            "--format".to_string(),
            "{{.Id}}".to_string(),
            "--".to_string(),
            image.to_string(),
        ];
        match self.control(args).await {
            Ok(out) => Ok(Some(out.stdout_text().trim().to_string()).filter(|id| !id.is_empty())),
            Err(CliError::Failed(f)) if f.stderr.to_ascii_lowercase().contains("no such image") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Commit sandbox `id` as template image `image`; a commit cut off leaves no image.
    pub async fn commit_template(
        &self,
        id: &SandboxId,
        image: &str,
        config: &TemplateImageConfig,
    ) -> Result<()> {
        let name = id.as_str();
        self.owned(name).await?;
        let inspect = vec![
            "inspect".to_string(),
            "--type".to_string(),
            "container".to_string(),
            "--format".to_string(),
            "{{json .Config.Labels}}".to_string(),
            "--".to_string(),
            name.to_string(),
        ];
        let present: BTreeMap<String, String> = match self.control(inspect).await {
            Ok(out) => serde_json::from_str(out.stdout_text().trim()).unwrap_or_default(),
            Err(CliError::Failed(f)) if f.kind == DockerFailureKind::MissingContainer => {
                return Err(ProviderError::SandboxNotFound(name.into()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut config = config.clone();
        if config.user.is_none() {
            // The agent runs as root (`-u 0`) in an image with a user of its own: the image keeps that user.
            config.user = self.agent_started_as(name).await.filter(|u| !u.is_empty());
        }
        let args = template_commit_args(name, image, &present, &config);
        // A build forced over an existing image takes its name: the old one is removed unless
        // a sandbox still runs it (docker refuses that; it goes with the operator's cleanup).
        let replaced = self.image_id(image).await.ok().flatten();
        match self.cli.run(&args, self.config.create.start_timeout, None).await {
            Ok(_) => {
                if let Some(old) = replaced {
                    if self.image_id(image).await.ok().flatten().as_deref() != Some(old.as_str()) {
                        let _ = self.control(argv::rmi_args(&old)).await;
                    }
                }
                Ok(())
            }
            Err(CliError::Failed(f)) if f.kind == DockerFailureKind::MissingContainer => {
                Err(ProviderError::SandboxNotFound(name.into()))
            }
            Err(e) => {
                // A commit cut off at its timeout may still have made the image.
                let _ = self.control(argv::rmi_args(image)).await;
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_blanks_present_sandbox_labels_and_sets_the_templates() {
        let present = BTreeMap::from([
            ("sandboxd.sandbox".to_string(), "1".to_string()),
            ("sandboxd.tenant".to_string(), "a".to_string()),
            ("sandboxd.test".to_string(), "1".to_string()),
        ]);
        let config = TemplateImageConfig {
            env: vec![("A".into(), "x $y \"z\" b\\s".into())],
            workdir: Some("/app".into()),
            user: Some("user".into()),
            labels: BTreeMap::from([("sandboxd.template.key".to_string(), "k".to_string())]),
        };
        let a = template_commit_args("sandboxd-b", "sandboxd-template:k", &present, &config);
        let changes: Vec<&str> =
            a[1..].chunks(2).filter(|c| c[0] == "--change").map(|c| c[1].as_str()).collect();
        assert_eq!(
            changes,
            vec![
                "ENV A=\"x \\$y \\\"z\\\" b\\\\s\"",
                "WORKDIR /app",
                "USER user",
                "LABEL sandboxd.sandbox=",
                "LABEL sandboxd.tenant=",
                "LABEL sandboxd.template.key=k",
            ]
        );
        assert_eq!(a[a.len() - 3..], ["--", "sandboxd-b", "sandboxd-template:k"]);
    }
}
