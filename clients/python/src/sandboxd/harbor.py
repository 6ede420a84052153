"""A Harbor environment on sandboxd (`pip install './clients/python[harbor]'`, Python >= 3.12).

Harbor loads it by import path::

    harbor trials start -p TASK -a oracle -e sandboxd.harbor:SandboxdEnvironment \\
        --environment-kwarg address=HOST:PORT [--environment-kwarg token_file=PATH] \\
        [--environment-kwarg image=IMAGE]

Each trial's environment is one sandbox, made through sandboxd's gRPC API. The image is the
`image` kwarg, else the task's `environment/Dockerfile` when it is only a `FROM` (with an
optional `WORKDIR`): sandboxd runs images the daemon has, it builds none, so a Dockerfile with
build steps must be built beforehand and named with `image`.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult

from .sandbox import AsyncSandbox


def image_of_dockerfile(dockerfile: Path) -> tuple[str, str | None]:
    """The (image, workdir) of a Dockerfile that only names a base image; ValueError naming the
    first other instruction otherwise."""
    image: str | None = None
    workdir: str | None = None
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM" and image is None:
            image = rest.split()[0]
        elif word.upper() == "WORKDIR":
            workdir = rest.strip()
        else:
            raise ValueError(
                f"{dockerfile}: {line!r}: sandboxd builds no images; build it and pass --environment-kwarg image=<tag>"
            )
    if image is None:
        raise ValueError(f"{dockerfile}: no FROM line")
    return image, workdir


class SandboxdEnvironment(BaseEnvironment):  # type: ignore[misc]  # harbor is untyped here
    """Harbor's `BaseEnvironment` over one sandboxd sandbox."""

    def __init__(
        self,
        *args: Any,
        address: str | None = None,
        token_file: str | None = None,
        image: str | None = None,
        ttl_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        # Before the base class's __init__: it validates the definition, which reads them.
        self._address = address or os.environ.get("SANDBOXD_ADDR", "127.0.0.1:50051")
        self._token = Path(token_file).read_text().strip() if token_file else os.environ.get("SANDBOXD_TOKEN")
        self._image = image
        self._ttl_s = ttl_s
        self._sandbox: AsyncSandbox | None = None
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "sandboxd"

    def _validate_definition(self) -> None:
        if self._image is None:
            dockerfile = Path(self.environment_dir) / "Dockerfile"
            if not dockerfile.is_file():
                raise FileNotFoundError(f"{dockerfile} not found and no image kwarg given")
            image_of_dockerfile(dockerfile)

    @property
    def sandbox(self) -> AsyncSandbox:
        if self._sandbox is None:
            raise RuntimeError("the environment is not started")
        return self._sandbox

    async def start(self, force_build: bool) -> None:
        workdir: str | None = None
        image = self._image
        if image is None:
            image, workdir = image_of_dockerfile(Path(self.environment_dir) / "Dockerfile")
        spec: dict[str, Any] = {
            "image": image,
            "env": dict(getattr(self.task_env_config, "env", None) or {}),
            "metadata": {"harbor.session": _label_value(self.session_id)},
        }
        if workdir:
            spec["workdir"] = workdir
        if self._ttl_s is not None:
            spec["ttl_s"] = self._ttl_s
        self._sandbox = await AsyncSandbox.create(spec, address=self._address, token=self._token)
        # Harbor's log directories, as its Docker environment mounts them.
        await self.exec("mkdir -p /logs/agent /logs/verifier /logs/artifacts", user="root")

    async def stop(self, delete: bool) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()
            self._sandbox = None

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        who = user if user is not None else self.default_user
        result = await self.sandbox.exec(
            command,
            cwd=cwd,
            env=env,
            timeout_s=float(timeout_sec) if timeout_sec else None,
            user=who,
        )
        return ExecResult(
            stdout=result.stdout.decode(errors="replace"),
            stderr=result.stderr.decode(errors="replace"),
            return_code=result.return_code,
        )

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        parent = os.path.dirname(target_path) or "/"
        await self.exec(f"mkdir -p {shlex.quote(parent)}", user="root")
        await self.sandbox.upload_file(target_path, Path(source_path), mode=Path(source_path).stat().st_mode & 0o7777)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """One tar of the directory, unpacked in the sandbox."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(source_dir), arcname=".")
        archive = f"/tmp/.harbor-upload-{os.getpid()}-{id(buffer)}.tar"
        await self.sandbox.upload_file(archive, buffer.getvalue())
        target = shlex.quote(target_dir)
        result = await self.exec(f"mkdir -p {target} && tar -xf {archive} -C {target} && rm -f {archive}", user="root")
        if result.return_code != 0:
            raise RuntimeError(f"unpacking into {target_dir} failed: {result.stderr}")

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        await self.sandbox.download_file(source_path, str(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """One tar of the directory, unpacked here (members that would leave `target_dir` are
        refused: what comes out of a sandbox is untrusted)."""
        archive = f"/tmp/.harbor-download-{os.getpid()}.tar"
        result = await self.exec(f"tar -cf {archive} -C {shlex.quote(source_dir)} .", user="root")
        if result.return_code != 0:
            raise RuntimeError(f"packing {source_dir} failed: {result.stderr}")
        data = await self.sandbox.download_file(archive)
        await self.exec(f"rm -f {archive}", user="root")
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as spool:
            spool.write(data)
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as tar:
                tar.extractall(target, filter="data")


def _label_value(text: str) -> str:
    """A metadata value: printable, at most 1024 bytes."""
    return "".join(c for c in text if c.isprintable())[:1024]
