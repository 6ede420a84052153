//! A sandbox's runtime requirements against the real daemon (issue 22, NeMo Gym's
//! `SupportsSandboxRuntimeRequirements`, `SupportsSandboxSharedStorage`; the network of
//! `SupportsSandboxNetwork` is `named_network.rs`): `cap_add` only from the operator's allow-list,
//! `/dev/shm` sized, named volumes shared read-write, read-only and through a subpath,
//! `ListVolumes`/`DeleteVolume`, and bad input refused with nothing made.

mod requirements;

use sandboxd_client::proto;
use testkit::raw::{busybox, create_id};
use testkit::service::TestService;
use testkit::TestLabel;

use requirements::{close, docker_lines, exec, unique};

fn volume(name: &str, target: &str, read_only: bool, subpath: Option<&str>) -> proto::VolumeMount {
    proto::VolumeMount {
        name: name.into(),
        target: target.into(),
        read_only,
        subpath: subpath.map(String::from),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_come_only_from_the_operators_allow_list() {
    let label = TestLabel::new();
    let strict = TestService::start(&label, None);
    let mut raw = strict.raw().await;
    let ptrace = proto::SandboxSpec { cap_add: vec!["SYS_PTRACE".into()], ..busybox() };
    let err = raw.create(proto::CreateRequest { spec: Some(ptrace.clone()) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("SYS_PTRACE") && err.message().contains("allowed_cap_add"), "{err:?}");
    assert!(label.containers().is_empty(), "a refused create left a container");
    drop(strict);

    let allowing = TestService::start_with(&label, None, |c| {
        c.docker.create.allowed_cap_add = vec!["CAP_SYS_PTRACE".into()];
    });
    let mut raw = allowing.raw().await;
    let id = create_id(&mut raw, ptrace).await;
    // CAP_SYS_PTRACE is bit 19 of the effective set.
    let (rc, out, _) = exec(&mut raw, &id, "grep CapEff /proc/1/status").await;
    let hex = out.split_whitespace().last().expect("CapEff");
    let eff = u64::from_str_radix(hex, 16).expect("hex");
    assert_eq!((rc, eff >> 19 & 1), (0, 1), "{out}");
    let admin = proto::SandboxSpec { cap_add: vec!["NET_ADMIN".into()], ..busybox() };
    let err = raw.create(proto::CreateRequest { spec: Some(admin) }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    close(&mut raw, &id).await;

    // An operator cannot allow what undoes the isolation.
    let mut config = sandboxd::config::FileConfig::default();
    config.docker.create.allowed_cap_add = vec!["NET_ADMIN".into()];
    let err = config.docker.validate().unwrap_err().to_string();
    assert!(err.contains("create.allowed_cap_add") && err.contains("NET_ADMIN"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shm_size_sizes_dev_shm() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    let id = create_id(&mut raw, proto::SandboxSpec { shm_size_bytes: Some(128 << 20), ..busybox() }).await;
    let (rc, out, _) = exec(&mut raw, &id, "df -k /dev/shm | tail -1").await;
    assert_eq!(rc, 0);
    assert_eq!(out.split_whitespace().nth(1), Some("131072"), "{out}");
    close(&mut raw, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_volumes_are_shared_read_only_and_through_a_subpath() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    let name = unique("shared");
    let writer = create_id(
        &mut raw,
        proto::SandboxSpec { volumes: vec![volume(&name, "/data", false, None)], ..busybox() },
    )
    .await;
    let (rc, _, err) = exec(&mut raw, &writer, "echo one > /data/file && mkdir -p /data/tasks/1").await;
    assert_eq!(rc, 0, "{err}");

    let reader = create_id(
        &mut raw,
        proto::SandboxSpec {
            volumes: vec![volume(&name, "/ro", true, None), volume(&name, "/task", false, Some("tasks/1"))],
            ..busybox()
        },
    )
    .await;
    let (_, out, _) = exec(&mut raw, &reader, "cat /ro/file").await;
    assert_eq!(out.trim(), "one");
    let (rc, _, _) = exec(&mut raw, &reader, "echo two > /ro/file").await;
    assert_ne!(rc, 0, "a read-only volume was written, even by root");
    let (rc, _, err) = exec(&mut raw, &reader, "echo from-task > /task/out && ls /task").await;
    assert_eq!(rc, 0, "{err}");
    let (_, out, _) = exec(&mut raw, &writer, "cat /data/tasks/1/out").await;
    assert_eq!(out.trim(), "from-task", "the subpath is that directory of the volume");

    let listed = raw.list_volumes(proto::ListVolumesRequest {}).await.expect("list").into_inner().volumes;
    assert!(listed.iter().any(|v| v.name == name), "{listed:?}");
    let err = raw.delete_volume(proto::DeleteVolumeRequest { name: name.clone() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    close(&mut raw, &reader).await;
    close(&mut raw, &writer).await;
    // The data outlives its sandboxes.
    let again = create_id(
        &mut raw,
        proto::SandboxSpec { volumes: vec![volume(&name, "/data", true, None)], ..busybox() },
    )
    .await;
    let (_, out, _) = exec(&mut raw, &again, "cat /data/file").await;
    assert_eq!(out.trim(), "one");
    close(&mut raw, &again).await;
    raw.delete_volume(proto::DeleteVolumeRequest { name: name.clone() }).await.expect("delete");
    raw.delete_volume(proto::DeleteVolumeRequest { name: name.clone() })
        .await
        .expect("deleting a gone volume");
    let listed = raw.list_volumes(proto::ListVolumesRequest {}).await.expect("list").into_inner().volumes;
    assert!(!listed.iter().any(|v| v.name == name), "{listed:?}");
    assert!(
        docker_lines(&["volume", "ls", "-q", "--filter", &format!("name=sandboxd-vol-{name}")]).is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requirements_are_refused_naming_the_field_and_make_nothing() {
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let mut raw = server.raw().await;
    for (spec, field) in [
        (proto::SandboxSpec { network: Some("../host".into()), ..busybox() }, "spec.network"),
        (
            proto::SandboxSpec {
                network: Some("bridge".into()),
                cap_add: vec!["--privileged".into()],
                ..busybox()
            },
            "spec.cap_add",
        ),
        (proto::SandboxSpec { shm_size_bytes: Some(10), ..busybox() }, "spec.shm_size_bytes"),
        (
            proto::SandboxSpec { volumes: vec![volume("v", "/a,readonly=false", false, None)], ..busybox() },
            "spec.volumes[0].target",
        ),
        (
            proto::SandboxSpec { volumes: vec![volume("/var/run", "/a", false, None)], ..busybox() },
            "spec.volumes[0].name",
        ),
        (
            proto::SandboxSpec { volumes: vec![volume("v", "/a", false, Some("../../etc"))], ..busybox() },
            "spec.volumes[0].subpath",
        ),
    ] {
        let err = raw.create(proto::CreateRequest { spec: Some(spec) }).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().contains(field), "{field}: {err:?}");
    }
    assert!(label.containers().is_empty());
    let case = format!("label=sandboxd.test.case={}", label.value);
    assert!(docker_lines(&["network", "ls", "-q", "--filter", &case]).is_empty());
    assert!(docker_lines(&["volume", "ls", "-q", "--filter", &case]).is_empty());

    // Under a network `none` policy no sandbox may pick a network of its own.
    let closed = TestService::start_with(&label, None, |c| c.docker.create.network = Some("none".into()));
    let mut raw = closed.raw().await;
    let err = raw
        .create(proto::CreateRequest {
            spec: Some(proto::SandboxSpec { network: Some("lab".into()), ..busybox() }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("spec.network"), "{err:?}");
}
