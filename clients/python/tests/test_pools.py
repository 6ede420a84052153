"""Warm pools through the typed client against the real server: create_pool, list_pools, a
claim with its per-call env/files/metadata, delete_pool, and the errors."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sandboxd import Client, InvalidArgument, NotFound, PoolInfo, SandboxSpec

from support import Images


async def pool_info(client: Client, name: str) -> PoolInfo:
    return next(p for p in await client.list_pools() if p.name == name)


async def wait_ready(client: Client, name: str, ready: int) -> None:
    for _ in range(600):
        if (await pool_info(client, name)).ready == ready:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"pool {name} never had {ready} ready")


async def test_a_claim_gets_a_ready_sandbox_with_the_calls_env_files_and_metadata(
    client: Client, images: Images
) -> None:
    name = f"py-{uuid.uuid4().hex[:8]}"
    created = await client.create_pool(name, images.busybox, target=1, max=2, template={"workdir": "/tmp"})
    assert (created.name, created.image, created.target, created.max) == (name, images.busybox, 1, 2)
    try:
        await wait_ready(client, name, 1)
        spec = SandboxSpec(
            pool=name, env={"GREETING": "hi"}, files={"/tmp/seed.txt": "seeded"}, metadata={"case": name}
        )
        async with await client.create(spec) as sandbox:
            out = await sandbox.exec('echo "$GREETING"; cat /tmp/seed.txt; pwd')
            assert out.stdout_text == "hi\nseeded/tmp\n"
            assert sandbox.ref.metadata == {"case": name}
            listed = [info async for info in client.list_all(labels={"case": name})]
            assert [info.ref.sandbox_id for info in listed] == [sandbox.sandbox_id]
            assert (await pool_info(client, name)).claimed == 1
    finally:
        await wait_ready(client, name, 1)
        assert await client.delete_pool(name) == 1
    assert all(p.name != name for p in await client.list_pools())


async def test_bad_pools_and_unknown_pools_are_refused(client: Client, images: Images) -> None:
    with pytest.raises(InvalidArgument, match=r"pool\.target"):
        await client.create_pool("bad", images.busybox, target=3, max=2)
    with pytest.raises(NotFound):
        await client.create(SandboxSpec(pool=f"nope-{uuid.uuid4().hex[:8]}"))
    with pytest.raises(NotFound):
        await client.delete_pool(f"nope-{uuid.uuid4().hex[:8]}")


async def test_a_schedule_sets_pools_by_image_and_images_are_prefetched(client: Client, images: Images) -> None:
    pool = f"sched-{uuid.uuid4().hex[:8]}"
    set_ = await client.set_pool_targets([(images.busybox, 1, pool)])
    assert set_ == [
        {"pool": pool, "image": images.busybox, "target": 1, "max": 1, "created": True, "ready_by_node": {"local": 0}}
    ]
    try:
        await wait_ready(client, pool, 1)
        again = await client.set_pool_targets([(images.busybox, 2, pool)])
        assert (again[0]["target"], again[0]["max"], again[0]["created"]) == (2, 2, False)
        assert again[0]["ready_by_node"]["local"] >= 1
        with pytest.raises(InvalidArgument, match=r"targets\[0\]\.count"):
            await client.set_pool_targets({images.busybox: 5000})
    finally:
        await client.delete_pool(pool)

    absent = f"sandboxd-test/absent-{uuid.uuid4().hex[:8]}:1"
    steps = [s async for s in client.prefetch_images([images.busybox, absent])]
    by_image = {s["image"]: s for s in steps}
    assert by_image[images.busybox]["state"] == "present" and by_image[images.busybox]["node"] == "local"
    assert by_image[absent]["state"] == "failed" and absent in by_image[absent]["error"]
    with pytest.raises(InvalidArgument, match="nodes"):
        [s async for s in client.prefetch_images([images.busybox], nodes=["elsewhere"])]
