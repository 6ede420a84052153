"""Capability tokens from Python against the real server: the owner token `create` returns (and
`serialize()` carries), `grant`, a client built with `with_token` that may operate but not end
the sandbox, and `revoke`."""

from __future__ import annotations

import pytest

from sandboxd import Client, PermissionDenied, SandboxSpec, Unauthenticated

from support import Images, ServerProcess


async def test_grant_operate_then_revoke(server: ServerProcess, images: Images) -> None:
    async with Client(server.address) as owner:
        async with await owner.create(SandboxSpec(image=images.busybox)) as sandbox:
            assert sandbox.ref.token.count(".") == 2, "create returns an owner token"
            assert sandbox.serialize()["token"] == sandbox.ref.token
            grant = await sandbox.grant("operate", ttl_s=600)
            assert grant.token and grant.token_id and grant.expires_at_s > 0
            async with owner.with_token(grant.token) as grader:
                assert (await grader.exec(sandbox.sandbox_id, "echo graded")).stdout == b"graded\n"
                with pytest.raises(PermissionDenied):
                    await grader.close_sandbox(sandbox.sandbox_id)
                with pytest.raises(PermissionDenied):
                    await grader.grant(sandbox.sandbox_id, "owner")
                with pytest.raises(ValueError, match="scope must be one of"):
                    await grader.grant(sandbox.sandbox_id, "admin")
                await owner.revoke(grant.token_id)
                with pytest.raises(Unauthenticated):
                    await grader.exec(sandbox.sandbox_id, "true")
