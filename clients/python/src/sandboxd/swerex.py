"""A SWE-ReX deployment on sandboxd (`pip install './clients/python[swerex]'`).

SWE-ReX runs its server (`swerex-remote`) inside the sandbox and talks HTTP to it through a
*deployment*. This one creates a sandbox over sandboxd's gRPC API, starts `swerex-remote` in it as
a background process (`StartProcess`) and reaches its port through `PortForward`: a listener on
the caller's loopback, each accepted connection one forwarded connection made from inside the
sandbox by its agent. So the server needs no published port and no route from the caller to the
container (it works with `network: none`, egress policies, a remote or clustered sandboxd,
tokens and TLS), and every byte passes sandboxd's authorization. The gRPC channel and the
listener live on a loop thread of their own, since SWE-agent and mini-swe-agent run each call in
a fresh `asyncio.run`.

Named in a config as SWE-ReX's own deployments are::

    from swerex.deployment.config import get_deployment
    deployment = get_deployment(SandboxdDeploymentConfig(image="my-image-with-swe-rex"))

The image must have `swerex-remote` on its PATH (or give `remote_command`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import shlex
import time
from pathlib import Path
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict
from swerex.deployment.abstract import AbstractDeployment
from swerex.deployment.hooks.abstract import CombinedDeploymentHook, DeploymentHook
from swerex.exceptions import DeploymentNotStartedError, DeploymentStartupError
from swerex.runtime.abstract import IsAliveResponse, UploadRequest, UploadResponse
from swerex.runtime.remote import RemoteRuntime
from swerex.utils.log import get_logger

from .client import Client
from .errors import FAILURE_CLASSES, SandboxdError
from .failures import FailureKind
from .loop_thread import LoopThread
from .processes import ProcessExited, ProcessOutput
from .sandbox import AsyncSandbox
from .swerex_errors import SandboxdSwerexError, swerex_error
from .types import SandboxStatus

__all__ = ["SandboxdDeployment", "SandboxdDeploymentConfig", "SandboxdRuntime"]


def _not_started() -> DeploymentNotStartedError:
    return DeploymentNotStartedError()  # type: ignore[no-untyped-call]


class SandboxdDeploymentConfig(BaseModel):
    """Configuration for running SWE-ReX in a sandboxd sandbox."""

    image: str
    """An image on the server's daemon with `swerex-remote` (or `remote_command`) inside."""
    address: str | None = None
    """The sandboxd server, `host:port` (default: `$SANDBOXD_ADDR`, else 127.0.0.1:50051)."""
    token_file: str | None = None
    """A file with a bearer key or token (default: `$SANDBOXD_TOKEN` when set)."""
    port: int = 8000
    """The port `swerex-remote` listens on inside the sandbox."""
    auth_token: str | None = None
    """The key the server is started with and the runtime sends (None: a new random one)."""
    remote_command: str = "swerex-remote"
    """How the image starts the server (`--port` and `--auth-token` are appended)."""
    startup_timeout: float = 60.0
    """How long the server may take to answer after the sandbox started."""
    runtime_timeout: float = 60.0
    """The runtime's default timeout for a request."""
    ttl_s: float | None = None
    """The sandbox's lease; the server removes it when the lease ends (None: its default)."""
    env: dict[str, str] = {}
    """Environment of the sandbox (and so of the server and its shells)."""
    workdir: str | None = None
    metadata: dict[str, str] = {}
    """Labels of the sandbox (`List` finds it by them)."""

    type: Literal["sandboxd"] = "sandboxd"
    """Discriminator for (de)serialization, as SWE-ReX's own deployment configs have."""

    model_config = ConfigDict(extra="forbid")

    def get_deployment(self) -> SandboxdDeployment:
        return SandboxdDeployment.from_config(self)


class _Forwarder:
    """The loopback listener: one `PortForward` per accepted connection. The failures forwards
    met are kept with when (the last few), so a runtime call that lost its connection can say
    why."""

    def __init__(self, client: Client, sandbox_id: str, port: int) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._port = port
        self._server: asyncio.Server | None = None
        self._errors: collections.deque[tuple[float, SandboxdError]] = collections.deque(maxlen=16)

    def _record(self, error: SandboxdError) -> None:
        self._errors.append((time.monotonic(), error))

    def last_error(self, since: float) -> SandboxdError | None:
        """The latest failure a forward met at or after `since` (`time.monotonic()`)."""
        for at, error in reversed(self._errors):
            if at >= since:
                return error
        return None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            connection = await self._client.port_forward(self._sandbox_id, self._port)
        except SandboxdError as exc:
            self._record(exc)
            writer.close()
            return
        try:
            await connection.splice(reader, writer)
        except SandboxdError as exc:
            self._record(exc)
        except ConnectionError:
            pass

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None


class SandboxdRuntime(RemoteRuntime):
    """SWE-ReX's `RemoteRuntime` through the deployment's forward. A call whose connection
    failed raises what sandboxd says happened to the sandbox, as SWE-ReX's type (see
    `sandboxd.swerex_errors`), instead of a bare connection error."""

    def __init__(self, deployment: SandboxdDeployment, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._deployment = deployment

    async def _request(self, endpoint: str, payload: BaseModel | None, output_class: Any, num_retries: int = 0) -> Any:
        since = time.monotonic()
        try:
            return await super()._request(endpoint, payload, output_class, num_retries)
        except aiohttp.ClientResponseError:
            raise  # the server answered
        except aiohttp.ClientError as exc:
            failure = await self._deployment.failure(since)
            if failure is not None:
                raise failure from exc
            raise

    async def upload(self, request: UploadRequest) -> UploadResponse:
        since = time.monotonic()
        try:
            return await super().upload(request)
        except aiohttp.ClientResponseError:
            raise
        except aiohttp.ClientError as exc:
            failure = await self._deployment.failure(since)
            if failure is not None:
                raise failure from exc
            raise


class SandboxdDeployment(AbstractDeployment):
    """SWE-ReX's deployment interface over one sandboxd sandbox (see the module's doc)."""

    def __init__(self, *, logger: logging.Logger | None = None, **kwargs: Any) -> None:
        self._config = SandboxdDeploymentConfig(**kwargs)
        self.logger = logger or get_logger("rex-deploy")
        self._hooks = CombinedDeploymentHook()
        self._loop: LoopThread | None = None
        self._sandbox: AsyncSandbox | None = None
        self._forwarder: _Forwarder | None = None
        self._process_id: str | None = None
        self._runtime: SandboxdRuntime | None = None

    @classmethod
    def from_config(cls, config: SandboxdDeploymentConfig) -> SandboxdDeployment:
        return cls(**config.model_dump())

    def add_hook(self, hook: DeploymentHook) -> None:
        self._hooks.add_hook(hook)

    @property
    def sandbox(self) -> AsyncSandbox:
        """The sandbox (its calls must run on the deployment's loop: see `call`)."""
        if self._sandbox is None:
            raise _not_started()
        return self._sandbox

    @property
    def sandbox_id(self) -> str:
        return self.sandbox.sandbox_id

    @property
    def runtime(self) -> SandboxdRuntime:
        if self._runtime is None:
            raise _not_started()
        return self._runtime

    async def call(self, coro: Any) -> Any:
        """Runs a coroutine of the sandbox's client on the deployment's loop."""
        if self._loop is None:
            coro.close()
            raise _not_started()
        return await self._loop.call(coro)

    async def start(self) -> None:
        """Creates the sandbox, starts the server in it and waits until it answers. Any
        failure removes the sandbox again and raises a `DeploymentStartupError` (for a sandboxd
        failure: also its typed class, e.g. `sandboxd.CreateRejected`)."""
        if self._runtime is not None:
            return
        self._loop = LoopThread("sandboxd-swerex")
        token = self._config.auth_token or secrets.token_hex(16)
        try:
            self._hooks.on_custom_step("Starting sandbox")
            port = await self._loop.call(self._start_sandbox(token))
            self._runtime = SandboxdRuntime(
                self, host="http://127.0.0.1", port=port, auth_token=token, timeout=self._config.runtime_timeout
            )
            self._hooks.on_custom_step("Starting runtime")
            t0 = time.monotonic()
            await self._wait_until_alive()
            self.logger.info(f"Runtime started in {time.monotonic() - t0:.2f}s")
        except SandboxdError as exc:
            await self.stop()
            raise swerex_error(exc, starting=True) from None
        except BaseException:
            await self.stop()
            raise

    async def _start_sandbox(self, token: str) -> int:
        config = self._config
        address = config.address or os.environ.get("SANDBOXD_ADDR", "127.0.0.1:50051")
        bearer = Path(config.token_file).read_text().strip() if config.token_file else os.environ.get("SANDBOXD_TOKEN")
        spec: dict[str, Any] = {
            "image": config.image,
            "env": config.env,
            "metadata": {"swe-rex": "1", **config.metadata},
        }
        if config.ttl_s is not None:
            spec["ttl_s"] = config.ttl_s
        if config.workdir is not None:
            spec["workdir"] = config.workdir
        self._sandbox = await AsyncSandbox.create(spec, address=address, token=bearer)
        self.logger.info(f"Started sandbox {self._sandbox.sandbox_id} of {config.image} on {address}")
        command = f"{config.remote_command} --port {int(config.port)} --auth-token {shlex.quote(token)}"
        self._process_id = await self._sandbox.client.start_process(self._sandbox.sandbox_id, command)
        self._forwarder = _Forwarder(self._sandbox.client, self._sandbox.sandbox_id, config.port)
        return await self._forwarder.start()

    async def _wait_until_alive(self) -> None:
        """Polls `is_alive` until the server answers; the server's exit or the deadline fails
        the start with what it printed."""
        deadline = time.monotonic() + self._config.startup_timeout
        last = ""
        while time.monotonic() < deadline:
            response = await self.is_alive(timeout=1.0)
            if response.is_alive:
                return
            last = response.message
            await asyncio.sleep(0.1)
        output = await self.call(self._server_output())
        raise DeploymentStartupError(
            f"swerex-remote did not answer within {self._config.startup_timeout} s: {last}\n{output}"
        )

    async def _server_output(self) -> str:
        """What the server printed so far (and its exit code, once it exited)."""
        if self._sandbox is None or self._process_id is None:
            return ""
        sandbox, process_id = self._sandbox, self._process_id
        chunks: list[str] = []

        async def read() -> None:
            async for event in sandbox.client.attach_process(sandbox.sandbox_id, process_id):
                if isinstance(event, ProcessOutput):
                    chunks.append(event.data.decode(errors="replace"))
                elif isinstance(event, ProcessExited):
                    chunks.append(f"[exit code {event.exit_code}]")

        # A running server's stream stays open: what it printed so far is enough.
        with contextlib.suppress(asyncio.TimeoutError, SandboxdError):
            await asyncio.wait_for(read(), 2)
        return "".join(chunks)

    async def _server_exit(self) -> str | None:
        """The server's output when it has exited, None while it runs."""
        assert self._sandbox is not None and self._process_id is not None
        processes = await self._sandbox.client.list_processes(self._sandbox.sandbox_id)
        for process in processes:
            if process.process_id == self._process_id and not process.running:
                return await self._server_output()
        return None

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        """Whether the server answers. Raises `DeploymentNotStartedError` before `start`, and
        (as SWE-ReX's Docker deployment does) an error when the server has exited: a
        `SandboxdSwerexError`, or the typed failure sandboxd names for a sandbox gone."""
        if self._runtime is None or self._sandbox is None:
            raise _not_started()
        since = time.monotonic()
        try:
            exited = await self.call(self._server_exit())
        except SandboxdError as exc:
            raise (await self.failure(since) or swerex_error(exc)) from None
        if exited is not None:
            raise SandboxdSwerexError(f"swerex-remote terminated in sandbox {self._sandbox.sandbox_id}:\n{exited}")
        return await self._runtime.is_alive(timeout=timeout)

    async def failure(self, since: float) -> Exception | None:
        """Why the sandbox could not answer a call made at `since` (`time.monotonic()`), as
        SWE-ReX's type: the failure a forward met since, or a sandbox that no longer runs; None
        when sandboxd sees nothing wrong."""
        if self._sandbox is None or self._forwarder is None:
            return None
        error = self._forwarder.last_error(since)
        try:
            status = await self.call(self._sandbox.status())
        except SandboxdError as exc:
            return swerex_error(exc)
        if status is not SandboxStatus.RUNNING:
            kind = FailureKind.SANDBOX_PAUSED if status is SandboxStatus.PAUSED else FailureKind.SANDBOX_GONE
            message = f"sandbox {self._sandbox.sandbox_id} is {status.value}"
            if error is not None:
                message += f" ({error.details})"
            return swerex_error(FAILURE_CLASSES[kind](message))
        if error is not None and error.failure_kind is not None:
            return swerex_error(error)
        return None

    async def stop(self) -> None:
        """Closes the runtime and removes the sandbox (idempotent)."""
        if self._runtime is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runtime.close(), 5)
            self._runtime = None
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            await loop.call(self._teardown())
        finally:
            loop.stop()

    async def _teardown(self) -> None:
        if self._forwarder is not None:
            await self._forwarder.stop()
            self._forwarder = None
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            try:
                await sandbox.close()
            except SandboxdError as exc:
                self.logger.warning(f"closing sandbox {sandbox.sandbox_id} failed: {exc}")
