"""Connection options against the real server: bearer token, TLS, retries with backoff."""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sandboxd
from sandboxd import Client, RetryPolicy, TlsConfig

from support import ContainerLabel, ServerProcess, free_port

# An id the service never issues: NOT_FOUND once past auth (a gone id of its shape is STOPPED).
UNKNOWN_ID = "sandboxd-not-an-id"


async def test_bearer_token_is_sent_and_required(auth_server: ServerProcess, token: str) -> None:
    async with Client(auth_server.address) as anonymous:
        with pytest.raises(sandboxd.Unauthenticated):
            await anonymous.status(UNKNOWN_ID)
    async with Client(auth_server.address, token="wrong") as wrong:
        with pytest.raises(sandboxd.Unauthenticated, match="token"):
            await wrong.status(UNKNOWN_ID)
    async with Client(auth_server.address, token=token) as right:
        with pytest.raises(sandboxd.SandboxNotFound):  # authenticated: the server looked it up
            await right.status(UNKNOWN_ID)


def retries(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sandboxd" and "retry" in r.getMessage()]


async def test_idempotent_calls_retry_unavailable_and_others_do_not(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandboxd")
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.05, max_backoff_s=0.1)
    async with Client(f"127.0.0.1:{free_port()}", retry=policy) as client:
        with pytest.raises(sandboxd.SandboxUnavailable):
            await client.status(UNKNOWN_ID)
        assert len(retries(caplog)) == 2  # three attempts
        caplog.clear()
        with pytest.raises(sandboxd.SandboxUnavailable):
            await client.exec(UNKNOWN_ID, "true")
        with pytest.raises(sandboxd.SandboxUnavailable):
            await client.create("img")
        assert retries(caplog) == []  # Exec and Create may have acted: never retried


async def test_retry_reaches_a_server_that_comes_up(
    binary: Path, label: ContainerLabel, tmp_path: Path, images: object
) -> None:
    port = free_port()
    started: list[ServerProcess] = []

    class StartServerOnFirstRetry(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if not started and "retry" in record.getMessage():
                started.append(ServerProcess(binary, label, tmp_path, port=port))

    handler = StartServerOnFirstRetry()
    logger = logging.getLogger("sandboxd")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        policy = RetryPolicy(max_attempts=8, initial_backoff_s=0.2, max_backoff_s=1.0)
        async with Client(f"127.0.0.1:{port}", retry=policy) as client:
            with pytest.raises(sandboxd.SandboxNotFound):  # an answer from the server, not UNAVAILABLE
                await client.status(UNKNOWN_ID)
        assert len(started) == 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        for process in started:
            process.stop()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=sandboxd-test",
            "-addext",
            "subjectAltName=DNS:sandboxd-test",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
async def tls_front(server: ServerProcess, certificate: tuple[Path, Path]) -> AsyncIterator[str]:
    """A TLS terminator (HTTP/2 by ALPN) in front of the plaintext test server."""
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    host, _, port = server.address.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    front = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    address = front.sockets[0].getsockname()
    try:
        yield f"127.0.0.1:{address[1]}"
    finally:
        front.close()


async def test_tls_with_a_private_root(tls_front: str, certificate: tuple[Path, Path]) -> None:
    cert, _ = certificate
    tls = TlsConfig(root_certificates=cert.read_bytes(), server_name_override="sandboxd-test")
    async with Client(tls_front, tls=tls, deadline_s=30) as client:
        with pytest.raises(sandboxd.SandboxNotFound):  # the call went through TLS to the server
            await client.status(UNKNOWN_ID)
    untrusted = RetryPolicy(max_attempts=1)
    async with Client(tls_front, tls=True, retry=untrusted, deadline_s=10) as client:
        with pytest.raises(sandboxd.SandboxUnavailable):  # the system roots do not trust it
            await client.status(UNKNOWN_ID)


async def test_address_may_be_a_url(server: ServerProcess) -> None:
    async with Client(f"http://{server.address}/") as client:
        assert client.address == server.address
        with pytest.raises(sandboxd.SandboxNotFound):
            await client.status(UNKNOWN_ID)
    assert sandboxd.connection.normalize_address("https://h:1", False) == ("h:1", True)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="host:port"):
        Client("http://h:1/path")
    with pytest.raises(ValueError, match="private_key"):
        TlsConfig(private_key=b"k")
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="deadline_s"):
        Client("127.0.0.1:1", deadline_s=0)
