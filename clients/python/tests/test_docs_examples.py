"""docs/examples.md runs as written, block after block in one shell as its first section says
(the token server in a terminal of its own), and docs/access.md's two teams on one server.

As for the README: the starter image is read as this run's tag, the server addresses as ports of
this run's own, and the release binaries (`$PWD/target/release`) as the debug ones this suite
built.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from markdown import DOCS, example, example_env, run_shell, with_address, with_image
from support import LISTENING, ContainerLabel, ServerProcess, free_port

EXAMPLES = DOCS / "examples.md"
ACCESS = DOCS / "access.md"
TOKEN_ADDRESS = "127.0.0.1:50052"


# What docs/examples.md's blocks write outside the test's own directories, as a reader's would.
EXAMPLE_TMP_PATHS = (Path("/tmp/sandboxd.token"), Path("/tmp/sandboxd-py"))


@pytest.fixture(autouse=True, scope="module")
def remove_what_the_examples_write() -> Iterator[None]:
    """The examples' files in /tmp are removed after this module (those that were there before
    are someone else's and stay)."""
    existed = {path for path in EXAMPLE_TMP_PATHS if path.exists()}
    yield
    for path in EXAMPLE_TMP_PATHS:
        if path in existed:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def with_binaries(text: str, binaries: Path) -> str:
    return text.replace("$PWD/target/release", str(binaries))


def test_examples_md_runs_block_after_block(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    address = example_server.address
    quickstart = tmp_path / "quickstart.py"
    quickstart.write_text(with_image(example("examples-quickstart", EXAMPLES), starter))
    errors = tmp_path / "errors.py"
    errors.write_text(with_address(example("examples-error-python", EXAMPLES), address))
    script = "\n".join(
        [
            with_binaries(with_address(example("examples-env", EXAMPLES), address), binaries),
            example("examples-discover", EXAMPLES),
            with_image(example("examples-lifecycle", EXAMPLES), starter),
            example("examples-files", EXAMPLES),
            "set +e  # the next block's calls fail on purpose",
            example("examples-errors", EXAMPLES),
            "set -e",
            example("examples-stubs", EXAMPLES),
            f"python {quickstart} $ADDR",
            f"python {errors}",
        ]
    )
    out = run_shell(script, example_env(binaries, address), timeout=600).stdout
    assert "sandbox.v1.SandboxService" in out and "rpc Exec" in out and '"status": "SERVING"' in out
    assert "hello-grpcurl" in out and "SANDBOX_STATUS_RUNNING" in out
    assert base64.b64encode(b"uploaded by grpcurl\n").decode() in out
    assert '"bytesWritten": "20"' in out
    assert "terminal exit code: 3" in out and "closed sandboxd-" in out
    assert 'StatusCode.NOT_FOUND sandbox "sandboxd-not-an-id" not found' in out
    example_label.settle(before)


@pytest.fixture
def token_server(binaries: Path) -> Iterator[str]:
    """docs/examples.md's second server, started by its block as written (in the foreground of a
    terminal of its own: here a process group of its own), on a port of this run's own."""
    address = f"127.0.0.1:{free_port()}"
    block = with_address(example("examples-token-server", EXAMPLES), address, TOKEN_ADDRESS)
    process = subprocess.Popen(
        ["bash", "-c", block],
        env=example_env(binaries, address),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    listening = threading.Event()

    def scan() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(LISTENING):
                listening.set()
        listening.set()

    threading.Thread(target=scan, daemon=True).start()
    try:
        assert listening.wait(60) and process.poll() is None, "the token server did not start"
        yield address
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_examples_md_token_calls_run(token_server: str, binaries: Path) -> None:
    block = with_address(example("examples-token-calls", EXAMPLES), token_server, TOKEN_ADDRESS)
    out = run_shell(block, example_env(binaries, token_server), strict=False)
    output = out.stdout + out.stderr
    assert output.count("Code: NotFound") == 3, output  # auth passed, three times
    assert '"status": "SERVING"' in output
    assert "Unauthenticated" not in output


def test_two_teams_example_runs(starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path) -> None:
    before = set(example_label.containers())
    address = f"127.0.0.1:{free_port()}"
    block = with_image(with_address(example("two-teams", ACCESS), address), starter)
    # What this run's sandboxes carry, so the sweep of the test run finds them.
    config = "cat > config.yaml <<EOT\n"
    assert block.count(config) == 1
    labelled = json.dumps({"create": {"extra_run_args": example_label.run_args()}})
    block = block.replace(config, f"{config}docker: {labelled}\n")
    out = run_shell(block, example_env(binaries, address), cwd=tmp_path, timeout=300)
    stdout, stderr = out.stdout, out.stderr
    assert stdout.count("refused: 1") == 3, stdout
    assert "graded" in stdout
    for code in ("NOT_FOUND", "PERMISSION_DENIED", "UNAUTHENTICATED"):
        assert f"sandboxctl: {code}: " in stderr, stderr
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert {line["tenant"] for line in audit} >= {"red", "blue"}
    assert any(line["method"] == "Revoke" and line["outcome"] == "OK" for line in audit), audit
    example_label.settle(before)
