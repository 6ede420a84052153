"""The caller's OpenTelemetry context travels with every call as W3C `traceparent` metadata,
on unary and streaming calls alike, and nothing is added outside a span. The server here is an
in-process gRPC server that records what each call carries (what sandboxd does with it is
tested in server/tests/traces.rs)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from sandboxd import Client
from sandboxd._pb import sandbox_pb2 as pb


class Recorder(grpc.GenericRpcHandler):
    """Answers List (unary) and Download (server stream) with empty messages; keeps each
    call's method and metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        method = str(details.method)
        self.calls.append((method, {k: str(v) for k, v in details.invocation_metadata}))
        if method.endswith("/List"):

            async def unary(request: bytes, context: object) -> bytes:
                return pb.ListResponse().SerializeToString()

            return grpc.unary_unary_rpc_method_handler(unary)
        if method.endswith("/Download"):

            async def stream(request: bytes, context: object) -> AsyncIterator[bytes]:
                yield pb.DownloadResponse(chunk=b"x").SerializeToString()

            return grpc.unary_stream_rpc_method_handler(stream)
        return None


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, Recorder]]:
    handler = Recorder()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", handler
    finally:
        await server.stop(None)


async def test_the_current_span_goes_out_as_traceparent(recorder: tuple[str, Recorder]) -> None:
    address, handler = recorder
    tracer = TracerProvider().get_tracer("sandboxd-test")
    async with Client(address, token="t0k") as client:
        await client.list()
        assert "traceparent" not in handler.calls[-1][1], "no span, no traceparent"
        with tracer.start_as_current_span("trainer step") as span:
            context = span.get_span_context()
            await client.list()
            chunks = [chunk async for chunk in client.iter_download("sandboxd-x", "/f")]
        assert chunks == [b"x"]
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-"
    traced = handler.calls[-2:]
    assert [m.rsplit("/", 1)[1] for m, _ in traced] == ["List", "Download"]
    for method, metadata in traced:
        traceparent = metadata.get("traceparent", "")
        assert traceparent.startswith(expected), (method, metadata)
        assert int(traceparent[len(expected) :], 16) & 1, f"sampled: {traceparent}"
        assert metadata.get("authorization") == "Bearer t0k", "the bearer still goes"
