//! `sandboxctl fs ls|stat|rm|mv|mkdir` (issue 19), the real binary against the service
//! in-process: a name with a space, a newline and a byte that is not UTF-8 given on the command
//! line and printed back as its bytes, errors as `CODE: message` naming the path, `--user`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::process::{Output, Stdio};

use testkit::ctl::text;
use testkit::images::BUSYBOX;
use testkit::service::TestService;
use testkit::TestLabel;

const SANDBOXCTL: &str = env!("CARGO_BIN_EXE_sandboxctl");

/// `sandboxctl --addr ADDR ARGS…` with arguments of any bytes.
fn ctl(addr: &str, args: &[&OsStr]) -> Output {
    testkit::ctl::command(SANDBOXCTL, addr).args(args).stdin(Stdio::null()).output().expect("sandboxctl")
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn fs_commands_round_trip_odd_names_and_say_why_they_fail() {
    if testkit::engine_name() != "agent" {
        return; // the docker engine has no file calls (server/tests/files_api.rs checks that)
    }
    let label = TestLabel::new();
    let server = TestService::start(&label, None);
    let addr = server.addr();
    let out = ctl(&addr, &[os("create"), os(BUSYBOX)]);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let id = OsString::from(id);

    let odd = OsString::from_vec(b"/w/odd \n\xff dir".to_vec());
    let ok = |args: &[&OsStr]| {
        let out = ctl(&addr, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        out.stdout
    };
    ok(&[os("fs"), os("mkdir"), &id, &odd, os("-p"), os("-m"), os("750")]);
    let stat = ok(&[os("fs"), os("stat"), &id, &odd]);
    assert!(stat.starts_with(b"drwxr-x--- 0:0 "), "{}", text(&stat));
    assert!(stat.ends_with(b" /w/odd \n\xff dir\n"), "the path as its bytes: {:?}", text(&stat));

    let moved = OsString::from_vec(b"/w/moved \xfe".to_vec());
    ok(&[os("fs"), os("mv"), &id, &odd, &moved]);
    ok(&[os("fs"), os("mkdir"), &id, os("/w/sub/deeper"), os("-p")]);
    let listing = ok(&[os("fs"), os("ls"), &id, os("/w"), os("-0")]);
    let lines: Vec<&[u8]> = listing.split(|b| *b == 0).filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 2, "{}", text(&listing));
    assert!(lines[0].ends_with(b" /w/moved \xfe"), "{}", text(lines[0]));
    assert!(lines[1].ends_with(b" /w/sub"));
    let deep = ok(&[os("fs"), os("ls"), &id, os("/w"), os("-d"), os("2")]);
    assert!(text(&deep).contains("/w/sub/deeper\n"), "{}", text(&deep));

    // Failures: one line, the code, the path.
    for (args, code, names) in [
        (vec![os("fs"), os("rm"), &id, os("/w/sub")], "FAILED_PRECONDITION", "/w/sub"),
        (vec![os("fs"), os("stat"), &id, os("/w/none")], "NOT_FOUND", "/w/none"),
        (vec![os("fs"), os("mkdir"), &id, os("/w/sub")], "ALREADY_EXISTS", "/w/sub"),
        (vec![os("fs"), os("ls"), &id, os("w")], "INVALID_ARGUMENT", "w"),
        (vec![os("fs"), os("mkdir"), &id, os("/w/x"), os("-u"), os("nobody")], "PERMISSION_DENIED", "/w/x"),
    ] {
        let out = ctl(&addr, &args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(code) && err.contains(names), "{args:?}: {err}");
    }
    ok(&[os("fs"), os("rm"), &id, os("/w"), os("-r")]);
    let out = ctl(&addr, &[os("fs"), os("stat"), &id, os("/w")]);
    assert!(text(&out.stderr).contains("NOT_FOUND"), "{}", text(&out.stderr));
    let out = ctl(&addr, &[os("rm"), &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
    assert!(label.containers().is_empty());
}
