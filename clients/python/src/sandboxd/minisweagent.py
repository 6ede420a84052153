"""A mini-swe-agent environment on sandboxd (`pip install './clients/python[minisweagent]'`).

mini-swe-agent loads an environment class by import path, so a config moves from its Docker
environment to sandboxd by naming this class::

    environment:
      environment_class: sandboxd.minisweagent.SandboxdEnvironment
      image: my-image
      address: sandboxd.internal:50051

Each environment is one sandbox; each action one `Exec` (`bash -lc COMMAND`, stderr merged into
stdout as mini-swe-agent's Docker environment does). Results take mini-swe-agent's own form: a
dict with `output`, `returncode` and `exception_info`; a command past its timeout reads as its
local and Docker environments report one (`returncode` -1, `extra.exception_type`
`TimeoutExpired`), and every result sandboxd named a failure kind for carries it in
`extra.failure_kind` (with `is_task_fault` and `is_retry_safe`), so a trainer can mask an
infrastructure failure. A sandbox that cannot be created raises `subprocess.CalledProcessError`
as the Docker environment's `docker run` does, which is also the package's typed error.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from minisweagent.exceptions import Submitted
from minisweagent.utils.serialize import recursive_merge
from pydantic import BaseModel

from .errors import FAILURE_CLASSES, CommandTimedOut, SandboxdError
from .failures import FailureKind
from .loop_thread import LoopThread
from .sandbox import AsyncSandbox
from .types import ExecResult

__all__ = ["SandboxdEnvironment", "SandboxdEnvironmentConfig", "TimeoutExpired"]


class SandboxdEnvironmentConfig(BaseModel):
    image: str
    """An image on the sandboxd server's daemon."""
    cwd: str = "/"
    """Working directory in which to execute commands."""
    env: dict[str, str] = {}
    """Environment variables of every command."""
    forward_env: list[str] = []
    """Variables of this process passed on to every command when set; `env` wins a conflict."""
    timeout: int = 30
    """Timeout for executing commands in the sandbox."""
    interpreter: list[str] = ["bash", "-lc"]
    """What runs the command (the command is appended as its last argument)."""
    container_timeout: str = "2h"
    """The sandbox's lease, in the Docker environment's `sleep` format (`90`, `30m`, `2h`): the
    server removes the sandbox when it ends."""
    address: str | None = None
    """The sandboxd server, `host:port` (default: `$SANDBOXD_ADDR`, else 127.0.0.1:50051)."""
    token_file: str | None = None
    """A file with a bearer key or token (default: `$SANDBOXD_TOKEN` when set)."""
    metadata: dict[str, str] = {}
    """Labels of the sandbox."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float:
    """`sleep`'s duration format in seconds; ValueError naming the field otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"container_timeout: {text!r} is not a duration such as 90, 30s, 30m, 2h or 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


class TimeoutExpired(subprocess.TimeoutExpired, CommandTimedOut):
    """A command past its timeout, as mini-swe-agent's environments report one
    (`subprocess.TimeoutExpired`), and the package's `CommandTimedOut`."""

    def __init__(self, cmd: str, timeout: float, output: str) -> None:
        subprocess.TimeoutExpired.__init__(self, cmd, timeout, output=output)
        self.details = str(self)
        self.code = None


_CREATE_ERRORS: dict[type[SandboxdError], type[SandboxdError]] = {}


def _create_error(error: SandboxdError, image: str) -> SandboxdError:
    """`error` as the `subprocess.CalledProcessError` a failed `docker run` raises."""
    cls = type(error)
    if cls not in _CREATE_ERRORS:
        _CREATE_ERRORS[cls] = type(cls.__name__, (subprocess.CalledProcessError, cls), {"__module__": __name__})
    converted = _CREATE_ERRORS[cls].__new__(_CREATE_ERRORS[cls])
    subprocess.CalledProcessError.__init__(converted, 125, ["sandboxd", "create", image], stderr=error.details)  # type: ignore[arg-type]
    converted.details = error.details
    converted.code = error.code
    converted.retry_after_s = error.retry_after_s
    converted.args = (str(error),)
    return converted


def _failure_extra(kind: FailureKind) -> dict[str, Any]:
    return {"failure_kind": kind.value, "is_task_fault": kind.is_task_fault, "is_retry_safe": kind.is_retry_safe}


class SandboxdEnvironment:
    def __init__(
        self, *, config_class: type = SandboxdEnvironmentConfig, logger: logging.Logger | None = None, **kwargs: Any
    ) -> None:
        """Executes bash commands in a sandboxd sandbox. See `SandboxdEnvironmentConfig` for
        keyword arguments."""
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config = config_class(**kwargs)
        self.sandbox_id: str | None = None
        self._sandbox: AsyncSandbox | None = None
        self._loop: LoopThread | None = LoopThread("sandboxd-minisweagent")
        try:
            self._start_sandbox()
        except BaseException:
            self._loop.stop()
            self._loop = None
            raise

    def _start_sandbox(self) -> None:
        config = self.config
        assert self._loop is not None
        address = config.address or os.environ.get("SANDBOXD_ADDR", "127.0.0.1:50051")
        token = Path(config.token_file).read_text().strip() if config.token_file else os.environ.get("SANDBOXD_TOKEN")
        spec = {
            "image": config.image,
            "workdir": config.cwd or None,
            "ttl_s": duration_s(config.container_timeout),
            "metadata": {"mini-swe-agent": "1", **config.metadata},
        }
        try:
            self._sandbox = self._loop.run(AsyncSandbox.create(spec, address=address, token=token))
        except SandboxdError as exc:
            raise _create_error(exc, config.image) from None
        self.sandbox_id = self._sandbox.sandbox_id
        self.logger.info(f"Started sandbox {self.sandbox_id} of {config.image} on {address}")

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return recursive_merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }

    def _command_env(self) -> dict[str, str]:
        forwarded = {key: value for key in self.config.forward_env if (value := os.getenv(key)) is not None}
        return {**forwarded, **self.config.env}

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Execute a command in the sandbox and return the result as a dict."""
        command = action.get("command", "")
        timeout = timeout or self.config.timeout
        output: dict[str, Any]
        try:
            result = self._exec(command, cwd or self.config.cwd, timeout)
            output = {"output": result.stdout_text, "returncode": result.return_code, "exception_info": ""}
            kind = result.failure_kind
            if kind is FailureKind.TIMEOUT:
                raise TimeoutExpired(command, timeout, output=result.stdout_text)
            if kind is not None and not kind.is_task_fault:
                raise FAILURE_CLASSES[kind](f"the sandbox failed the command: {result.stderr_text.strip()}")
            if kind is not None:
                output["extra"] = _failure_extra(kind)
        except (SandboxdError, subprocess.TimeoutExpired) as e:
            raw_output = getattr(e, "output", None)
            raw_output = (
                raw_output.decode("utf-8", errors="replace") if isinstance(raw_output, bytes) else (raw_output or "")
            )
            output = {
                "output": raw_output,
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {e}",
                "extra": {"exception_type": type(e).__name__, "exception": str(e)},
            }
            failure_kind = getattr(e, "failure_kind", None)
            if failure_kind is not None:
                output["extra"].update(_failure_extra(failure_kind))
        self._check_finished(output)
        return output

    def _exec(self, command: str, cwd: str, timeout: int) -> ExecResult:
        if self._sandbox is None or self._loop is None:
            raise RuntimeError("the environment was cleaned up")
        script = f"{shlex.join([*self.config.interpreter, command])} 2>&1"
        return self._loop.run(
            self._sandbox.exec(script, cwd=cwd or None, env=self._command_env(), timeout_s=float(timeout))
        )

    def _check_finished(self, output: dict[str, Any]) -> None:
        """Raises Submitted if the output indicates task completion."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def cleanup(self) -> None:
        """Remove the sandbox (idempotent)."""
        loop, self._loop = getattr(self, "_loop", None), None
        sandbox, self._sandbox = getattr(self, "_sandbox", None), None
        if loop is None:
            return
        try:
            if sandbox is not None:
                loop.run(sandbox.close(), timeout=60)
        except Exception as exc:
            self.logger.warning(f"closing sandbox {self.sandbox_id} failed: {exc}")
        finally:
            loop.stop()

    def __del__(self) -> None:
        self.cleanup()
