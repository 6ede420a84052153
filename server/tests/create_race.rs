//! A create whose entrypoint exits at once must fail, every time (issue 26): the agent's probe
//! can pass within a millisecond, before such an entrypoint has exited, and the sandbox was
//! then reported ready and stopped right after. The create now fails with the status Gym's
//! `SandboxCreateVerificationError` comes from (FAILED_PRECONDITION, "readiness verification
//! failed…") and leaves no container; an entrypoint that keeps running still starts.

use sandboxd::core::spec::SandboxSpec;
use sandboxd::ProviderError;
use testkit::images;
use testkit::{provider, TestLabel};

fn with_entrypoint(argv: &[&str]) -> SandboxSpec {
    let mut spec = SandboxSpec::new(images::BUSYBOX);
    spec.entrypoint = Some(argv.iter().map(|a| a.to_string()).collect());
    spec
}

#[tokio::test]
async fn an_entrypoint_that_exits_at_once_fails_the_create_every_time() {
    let label = TestLabel::new();
    let p = provider(&label);
    // `/bin/false` ends within a millisecond; the last one lives 50 ms, long after the probe
    // passed, which made the old create report it ready every time.
    let quick: [&[&str]; 3] = [&["/bin/false"], &["sh", "-c", "exit 3"], &["sh", "-c", "sleep 0.05; exit 1"]];
    for round in 0..3 {
        for argv in quick {
            let err = p.create(&with_entrypoint(argv)).await.expect_err(&format!(
                "round {round}: a sandbox whose entrypoint {argv:?} exits at once was reported ready"
            ));
            assert!(matches!(err, ProviderError::CreateVerification(_)), "{argv:?}: {err:?}");
            let status = tonic::Status::from(err);
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{argv:?}: {status:?}");
            assert!(
                status.message().starts_with("readiness verification failed"),
                "Gym's SandboxCreateVerificationError needs this prefix: {status:?}"
            );
            assert!(label.containers().is_empty(), "{argv:?} left a container behind");
        }
    }
    let h = p.create(&with_entrypoint(&["sh", "-c", "exec sleep 1000"])).await.expect("a lasting entrypoint");
    p.close(&h.id()).await.unwrap();
    label.remove_all();
}
