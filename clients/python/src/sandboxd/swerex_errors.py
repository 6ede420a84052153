"""sandboxd's failures as SWE-ReX's exceptions (`pip install './clients/python[swerex]'`).

SWE-agent branches on SWE-ReX's types: `CommandTimeoutError` interrupts the session and goes on,
any other `SwerexException` ends the run as an environment error, a `DeploymentStartupError`
is a deployment that never came up. Each exception raised here is both: the SWE-ReX class for
the harness and the package's typed class (`sandboxd.SandboxGone`, `OomKilled`, ... with
`failure_kind`, `is_task_fault`, `is_retry_safe`) for a trainer that masks infra failures.
"""

from __future__ import annotations

from swerex.exceptions import CommandTimeoutError, DeploymentStartupError, SwerexException

from .errors import SandboxdError
from .failures import FailureKind

__all__ = ["SandboxdSwerexError", "swerex_error"]


class SandboxdSwerexError(SwerexException, RuntimeError):
    """A failure of the sandbox under a SWE-ReX runtime that sandboxd named no kind for (the
    in-sandbox server ended, or did not answer)."""


_CLASSES: dict[tuple[type[SwerexException], type[SandboxdError]], type[SandboxdError]] = {}


def _combined(base: type[SwerexException], error: type[SandboxdError]) -> type[SandboxdError]:
    """The class that is both `base` and `error` (made once per pair)."""
    key = (base, error)
    if key not in _CLASSES:
        _CLASSES[key] = type(error.__name__, (base, error), {"__module__": __name__})
    return _CLASSES[key]


def swerex_error(error: SandboxdError, *, starting: bool = False) -> SandboxdError:
    """`error` as SWE-ReX's type: `DeploymentStartupError` while the deployment starts,
    `CommandTimeoutError` for TIMEOUT, `SwerexException` otherwise."""
    if starting:
        base: type[SwerexException] = DeploymentStartupError
    elif error.failure_kind is FailureKind.TIMEOUT:
        base = CommandTimeoutError
    else:
        base = SwerexException
    converted = _combined(base, type(error))(error.details, error.code)
    converted.retry_after_s = error.retry_after_s
    return converted
