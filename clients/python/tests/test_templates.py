"""Templates (docs/templates.md): a definition built once through E2B's `Template.build` is
reused, not built again, by a second build of the same definition, by a warm pool and by a
64-sandbox `CreateBatch` naming its image. That no rebuild happened is read from the daemon:
the template image's id and creation time stay what the first build made (and a forced build,
the contrast, changes them), and every sandbox sees the value the one build wrote."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox as E2bSandbox
from e2b import AsyncTemplate, LogEntry, TemplateClass

from sandboxd import AsyncSandbox, Client, SandboxSpec

from support import ContainerLabel, Images, ServerProcess, docker

API_KEY = "e2b_" + "0" * 40


@pytest.fixture(scope="module")
def template_server(
    images: Images, binary: Path, label: ContainerLabel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = ServerProcess(
        binary,
        label,
        tmp_path_factory.mktemp("templates"),
        server={"e2b": {"listen": "127.0.0.1:0", "images": {"e2bdev/base": images.bash}}},
    )
    assert server.e2b_address is not None
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    url = f"http://{server.e2b_address}"
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=API_KEY)
    yield server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


def template_images(label: ContainerLabel) -> dict[str, tuple[str, str]]:
    """This run's template images, untagged ones included: reference -> (image id, creation
    time)."""
    out = docker(
        "images",
        "--no-trunc",
        "--filter",
        f"label=sandboxd.test.case={label.value}",
        "--filter",
        "label=sandboxd.template.key",
        "--format",
        "{{.ID}} {{.Repository}}:{{.Tag}}",
    )
    found = {}
    for line in sorted(set(out.stdout.splitlines())):
        image_id, ref = line.split(" ", 1)
        inspected = json.loads(docker("image", "inspect", image_id).stdout)[0]
        found[ref] = (inspected["Id"], inspected["Created"])
    return found


async def build(template: TemplateClass, name: str, *, skip_cache: bool = False) -> list[str]:
    logs: list[LogEntry] = []
    await AsyncTemplate.build(template, name, skip_cache=skip_cache, on_build_logs=logs.append)
    return [entry.message for entry in logs]


@pytest.fixture
def build_context() -> Iterator[Path]:
    """A build context of its own (pytest's tmp_path can be pruned by another session's pytest
    on a shared machine while a build reads it)."""
    path = Path(tempfile.mkdtemp(prefix="sandboxd-template-context-"))
    (path / "data.txt").write_text("copied in\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_template_is_built_once_and_reused_by_a_pool_and_a_64_sandbox_batch(
    template_server: ServerProcess, label: ContainerLabel, build_context: Path
) -> None:
    definition = (
        AsyncTemplate(file_context_path=str(build_context))
        .from_base_image()
        .copy("data.txt", "/opt/tpl/data.txt")
        .run_cmd("cat /proc/sys/kernel/random/uuid > /opt/tpl/marker")
        # This run's own definition: a template is shared by every server of the daemon.
        .set_envs({"TPL_ENV": "from-template", "TPL_RUN": label.value})
    )
    first = await build(definition, "reuse-first")
    assert not any("built already" in m for m in first), first
    built = template_images(label)
    assert len(built) == 1, built
    [(image, (image_id, created))] = built.items()
    assert image.startswith("sandboxd-template:")

    # The same definition under another name: found, not built.
    second = await build(definition, "reuse-second")
    assert any(f"reusing {image}" in m for m in second), second
    assert template_images(label) == built

    async with Client(template_server.address) as client:
        probe = await AsyncSandbox.create(SandboxSpec(image=image), address=template_server.address)
        marker = (await probe.exec("cat /opt/tpl/marker")).stdout
        assert len(marker.strip()) == 36, marker
        assert (await probe.exec("cat /opt/tpl/data.txt; echo $TPL_ENV")).stdout == b"copied in\nfrom-template\n"
        await probe.close()

        await client.create_pool("tpl-reuse", image, target=2, max=4)
        try:
            claimed = await AsyncSandbox.create(SandboxSpec(pool="tpl-reuse"), address=template_server.address)
            assert (await claimed.exec("cat /opt/tpl/marker")).stdout == marker
            await claimed.close()
        finally:
            await client.delete_pool("tpl-reuse")

        made = [item async for item in client.create_batch(SandboxSpec(image=image), 64, deadline_s=600)]
        sandboxes = [s for s in made if isinstance(s, AsyncSandbox)]
        assert len(sandboxes) == 64, [m for m in made if not isinstance(m, AsyncSandbox)]
        seen = await asyncio.gather(*(s.exec("cat /opt/tpl/marker") for s in sandboxes))
        assert {r.stdout for r in seen} == {marker}
        await asyncio.gather(*(s.close() for s in sandboxes))

    # E2B's own create of the template's name starts the same image.
    sandbox = await E2bSandbox.create("reuse-second", timeout=120)
    try:
        assert (await sandbox.commands.run("cat /opt/tpl/marker")).stdout.encode() == marker
    finally:
        await sandbox.kill()

    # Nothing was built again: the one image, as the first build made it.
    assert template_images(label) == {image: (image_id, created)}

    # The contrast: a forced build does make the image again, and the probe above sees it.
    forced = await build(definition, "reuse-forced", skip_cache=True)
    assert not any("built already" in m for m in forced), forced
    rebuilt = template_images(label)
    assert list(rebuilt) == [image], f"the replaced image stays behind: {rebuilt}"
    assert rebuilt[image][1] != created


async def test_a_failed_build_names_its_step_and_leaves_nothing(
    template_server: ServerProcess, label: ContainerLabel
) -> None:
    import re

    import httpx
    from e2b.exceptions import BuildException

    before_containers = set(label.containers())
    before_images = template_images(label)
    logs: list[LogEntry] = []
    bad = AsyncTemplate().from_base_image().run_cmd("true").run_cmd("echo half > /half; exit 7")
    with pytest.raises(BuildException, match=r"failed to run command 'echo half > /half; exit 7': exit status 7"):
        await AsyncTemplate.build(bad, "fails-at-two", on_build_logs=logs.append)
    ids = [re.search(r"Template created with ID: ([^,]+), Build ID: (.+)", e.message) for e in logs]
    [(template_id, build_id)] = [m.groups() for m in ids if m]
    async with httpx.AsyncClient(
        base_url=f"http://{template_server.e2b_address}", headers={"X-API-Key": API_KEY}
    ) as http:
        status = (await http.get(f"/templates/{template_id}/builds/{build_id}/status")).json()
    assert status["status"] == "error", status
    # E2B's step numbers: 1-based, the failing `run_cmd` is the second step.
    assert status["reason"]["step"] == "2", status
    # Nothing of the build stays: no template image, no build sandbox.
    assert template_images(label) == before_images
    label.settle(before_containers)
