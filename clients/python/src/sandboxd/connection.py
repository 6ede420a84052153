"""Connection options: TLS, bearer token, default deadline, and retries of idempotent calls."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from .errors import SandboxUnavailable

__all__ = ["DEFAULT_ADDRESS", "TlsConfig", "RetryPolicy", "normalize_address", "open_channel"]

LOGGER = logging.getLogger("sandboxd")
DEFAULT_ADDRESS = "127.0.0.1:50051"
T = TypeVar("T")

# gRPC's own reconnect backoff starts at 1 s; a retried call would keep failing fast for that
# long, so reconnect as often as the retry policy asks.
_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)


@dataclass(frozen=True)
class TlsConfig:
    """TLS to the server. No `root_certificates` means the system's trust store; a client
    certificate (mutual TLS) needs both `private_key` and `certificate_chain` (PEM bytes)."""

    root_certificates: bytes | None = None
    private_key: bytes | None = None
    certificate_chain: bytes | None = None
    server_name_override: str | None = None

    def __post_init__(self) -> None:
        if (self.private_key is None) != (self.certificate_chain is None):
            raise ValueError("TlsConfig: private_key and certificate_chain go together (mutual TLS)")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for transient UNAVAILABLE on idempotent calls (Connect, Status,
    Endpoint, Close, Download, List, ListSnapshots, Diff, SetTimeout, Pause, Resume). Create,
    Exec, Upload, Pty, ExecStream, Snapshot and Fork are never retried: they may have acted."""

    max_attempts: int = 4
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy: backoffs must be >= 0 and multiplier >= 1")

    def backoff_s(self, attempt: int) -> float:
        """Sleep before attempt `attempt + 1` (attempt counts from 1), with full jitter on top half."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt - 1))
        return base / 2 + random.uniform(0, base / 2)

    async def run(self, name: str, attempt_fn: Callable[[], Awaitable[T]]) -> T:
        """`attempt_fn` until it succeeds, raises anything but `SandboxUnavailable`, or the
        attempts run out."""
        attempt = 1
        while True:
            try:
                return await attempt_fn()
            except SandboxUnavailable as exc:
                if attempt >= self.max_attempts:
                    raise
                delay = self.backoff_s(attempt)
                LOGGER.info(
                    "%s: UNAVAILABLE (%s); retry %d of %d in %.2fs",
                    name,
                    exc.details,
                    attempt,
                    self.max_attempts - 1,
                    delay,
                )
                await asyncio.sleep(delay)
                attempt += 1


def normalize_address(address: str, tls: TlsConfig | bool) -> tuple[str, TlsConfig | bool]:
    """`host:port` for gRPC, from `host:port` or a URL: `http://host:port` is plaintext,
    `https://host:port` turns TLS on (system roots) unless `tls` already says how."""
    address = address.strip()
    for scheme, secure in (("http://", False), ("https://", True)):
        if address.lower().startswith(scheme):
            address = address[len(scheme) :].rstrip("/")
            if secure and tls is False:
                tls = True
            break
    if not address or "/" in address:
        raise ValueError(f"address must be host:port (or http[s]://host:port), got {address!r}")
    return address, tls


def open_channel(
    address: str, tls: TlsConfig | bool, extra_options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """An asyncio channel to `address` (plaintext unless `tls`)."""
    options = list(_CHANNEL_OPTIONS) + list(extra_options)
    if tls is False:
        return grpc.aio.insecure_channel(address, options=options)
    config = tls if isinstance(tls, TlsConfig) else TlsConfig()
    if config.server_name_override:
        options.append(("grpc.ssl_target_name_override", config.server_name_override))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=config.root_certificates,
        private_key=config.private_key,
        certificate_chain=config.certificate_chain,
    )
    return grpc.aio.secure_channel(address, credentials, options=options)
