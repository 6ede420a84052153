use super::*;

#[test]
fn a_streamed_exit_carries_the_reason_only_of_a_failure() {
    let failed = ExecResult::failed(ExecErrorType::Sandbox, "cwd \"/nope\" does not exist in the sandbox\n");
    let exit = ExecExit::from(failed);
    assert_eq!(
        (exit.return_code, exit.message.as_str()),
        (125, "cwd \"/nope\" does not exist in the sandbox")
    );
    let wire = crate::v1::ExecExit::from(exit.clone());
    assert_eq!((wire.error_type.as_str(), wire.message.as_str()), ("sandbox", exit.message.as_str()));
    assert_eq!(ExecExit::from(wire), exit);
    // A command's own stderr is its output, never the exit's message.
    let ran = ExecResult { return_code: 3, stderr: b"oops".to_vec(), ..Default::default() };
    assert_eq!(ExecExit::from(ran).message, "");
}

#[test]
fn signals_parse_in_every_spelling() {
    for s in Signal::ALL {
        assert_eq!(Signal::try_from(s.as_str()), Ok(s));
        assert_eq!(Signal::try_from(s.short_name()), Ok(s));
        assert_eq!(Signal::try_from(s.as_str().to_lowercase().as_str()), Ok(s));
    }
    let err = Signal::try_from("SIGUSR1").unwrap_err().to_string();
    assert!(err.contains("SIGUSR1") && err.contains("SIGHUP"), "{err}");
    assert_eq!(Signal::supported(), "SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP");
}

#[test]
fn descriptors_parse_and_refuse_bad_shapes() {
    let d = SandboxDescriptor::from_json_value(
        &serde_json::json!({"sandbox_id": "s", "ports": [80], "workdir": "/w"}),
    )
    .unwrap();
    assert_eq!(d.ports, Some(vec![80]));
    assert_eq!(SandboxDescriptor::from_json_value(&d.to_json_value()).unwrap(), d);
    for bad in [
        serde_json::json!("s"),
        serde_json::json!({}),
        serde_json::json!({"sandbox_id": ""}),
        serde_json::json!({"sandbox_id": "x", "ports": [0]}),
        serde_json::json!({"sandbox_id": "x", "ports": [70000]}),
        serde_json::json!({"sandbox_id": "x", "ports": [true]}),
        serde_json::json!({"sandbox_id": "x", "workdir": 3}),
    ] {
        assert!(SandboxDescriptor::from_json_value(&bad).is_err(), "{bad}");
    }
}

#[test]
fn wire_values_round_trip() {
    for e in [ExecErrorType::Timeout, ExecErrorType::Sandbox, ExecErrorType::Pty] {
        assert_eq!(ExecErrorType::from_wire(e.as_str()), Some(e));
    }
    assert_eq!(ExecErrorType::from_wire(""), None);
    assert_eq!(ExecErrorType::to_wire(None), "");
    for m in [TerminalMode::Pty, TerminalMode::Pipe] {
        assert_eq!(TerminalMode::from_wire(m.as_str()), Some(m));
    }
}
