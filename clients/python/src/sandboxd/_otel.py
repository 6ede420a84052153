"""The caller's OpenTelemetry context on every call, when `opentelemetry-api` is installed.

The current context (the active span of the calling task) goes out as W3C `traceparent` /
`tracestate` metadata through the globally configured propagator (OpenTelemetry's default
is W3C trace context), so sandboxd's spans continue the caller's trace. Without the package,
or outside any span, nothing is added. Optional: `pip install 'sandboxd[otel]'`.
"""

from __future__ import annotations

from types import ModuleType

_propagate: ModuleType | None
try:
    from opentelemetry import propagate as _propagate
except ImportError:  # installs without the `otel` extra
    _propagate = None

__all__ = ["trace_metadata"]


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """`(("traceparent", ...), ("tracestate", ...))` for the current context, or `()`."""
    if _propagate is None:
        return ()
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return tuple((key.lower(), value) for key, value in carrier.items())
