use super::*;

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|x| x.to_string()).collect()
}

#[test]
fn snapshot_ids_are_checked_by_shape() {
    let id = new_snapshot_id();
    assert!(is_valid_snapshot_id(&id), "{id}");
    assert!(id.starts_with("sandboxd-snapshot:"));
    for bad in [
        "busybox:latest",
        "sandboxd-snapshot:latest",
        "sandboxd-snapshot:0123456789ABCDEF0123456789abcdef",
        "sandboxd-snapshot0123456789abcdef0123456789abcdef",
        "--force",
        "sandboxd-0123456789abcdef0123456789abcdef",
    ] {
        assert!(!is_valid_snapshot_id(bad), "{bad}");
    }
    assert!(!crate::core::spec::SandboxId::has_valid_shape(&id), "a snapshot id is never a sandbox id");
}

#[test]
fn commit_blanks_sandbox_labels_and_marks_the_snapshot() {
    let marks = SnapshotMarks { source: "sandboxd-a", labels: "e30", created_ms: 7, user: None, live: false };
    assert_eq!(
        commit_args("sandboxd-a", "sandboxd-snapshot:b", &marks),
        v(&[
            "commit",
            "--pause=true",
            "--change",
            "LABEL sandboxd.sandbox=",
            "--change",
            "LABEL sandboxd.ports=",
            "--change",
            "LABEL sandboxd.created_ms=",
            "--change",
            "LABEL sandboxd.expires_ms=",
            "--change",
            "LABEL sandboxd.create_deadline_ms=",
            "--change",
            "LABEL sandboxd.snapshot=1",
            "--change",
            "LABEL sandboxd.snapshot.source=sandboxd-a",
            "--change",
            "LABEL sandboxd.snapshot.labels=e30",
            "--change",
            "LABEL sandboxd.snapshot.created_ms=7",
            "sandboxd-a",
            "sandboxd-snapshot:b"
        ])
    );
    // An agent started as root keeps the image's own user in the snapshot.
    let as_user =
        commit_args("sandboxd-a", "sandboxd-snapshot:b", &SnapshotMarks { user: Some("app"), ..marks });
    assert_eq!(as_user[..4], v(&["commit", "--change", "USER app", "--pause=true"]));
}

#[test]
fn snapshot_diff_and_pause_commands() {
    assert_eq!(
        snapshot_list_args(),
        v(&[
            "images",
            "--filter",
            "label=sandboxd.snapshot=1",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "sandboxd-snapshot"
        ])
    );
    assert_eq!(image_inspect_args(&v(&["a", "b"])), v(&["image", "inspect", "a", "b"]));
    assert_eq!(rmi_args("i"), v(&["rmi", "i"]));
    assert_eq!(image_users_args("i"), v(&["ps", "-a", "--filter", "ancestor=i", "--format", "{{.Names}}"]));
    assert_eq!(inspect_full_args("n"), v(&["inspect", "--type", "container", "n"]));
    assert_eq!(diff_args("n"), v(&["diff", "n"]));
    assert_eq!(pause_args("n"), v(&["pause", "n"]));
    assert_eq!(unpause_args("n"), v(&["unpause", "n"]));
}
