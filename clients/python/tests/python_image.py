"""A test image with Python and SWE-ReX inside, built from what this machine has (no registry):
busybox and bash-static for the shell tools, this interpreter's own installation (stdlib without
its tests and GUI parts), the shared libraries `ldd` names for them, and `swe-rex` installed with
pip into its site-packages. Built once per content key (`docker import` of one tarball; the key is
an environment variable of the image), under a host lock so parallel runs build it once; like
testkit's images it stays on the daemon for the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

TAG = "sandboxd-test/swerex:1"
SWEREX_VERSION = "1.4.0"
# Bump when the recipe below changes.
RECIPE = "2026.12-r5"
KEY_VAR = "SANDBOXD_TEST_IMAGE_KEY"
# Parts of the standard library no test reaches: they are most of its size.
SKIPPED_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages"}
LOCK = Path(tempfile.gettempdir()) / "sandboxd-test-swerex-image.lock"


def key() -> str:
    text = f"{RECIPE} {sys.version} {sys.base_prefix} swe-rex=={SWEREX_VERSION}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def current() -> bool:
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Env}}", TAG],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return out.returncode == 0 and f"{KEY_VAR}={key()}" in out.stdout


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_swerex_image() -> str:
    """The image's tag, built first when missing or of another key."""
    if current():
        return TAG
    with _host_lock():
        if not current():
            _build()
    if not current():
        raise RuntimeError(f"{TAG} is still missing after building it")
    return TAG


def _libraries(paths: list[Path]) -> set[Path]:
    """The shared libraries (and the loader) `ldd` names for these binaries."""
    found: set[Path] = set()
    for path in paths:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > parts.index("=>") + 1 and parts[parts.index("=>") + 1].startswith("/"):
                found.add(Path(parts[parts.index("=>") + 1]))
            elif parts and parts[0].startswith("/"):
                found.add(Path(parts[0]))
    return found


def _copy(source: Path, root: Path) -> None:
    target = root / source.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target, follow_symlinks=True)


def _build() -> None:
    prefix = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths(vars={"base": str(prefix), "installed_base": str(prefix)})["stdlib"])
    executable = prefix / "bin" / version
    with tempfile.TemporaryDirectory(prefix="sandboxd-swerex-image-") as tmp:
        root = Path(tmp) / "root"
        for name in ("bin", "usr/bin", "usr/local/bin", "sbin", "usr/sbin", "etc", "root"):
            (root / name).mkdir(parents=True, exist_ok=True)
        tmpdir = root / "tmp"
        tmpdir.mkdir()
        tmpdir.chmod(0o1777)
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        (root / "etc" / "group").write_text("root:x:0:\n")
        # An interactive bash sets its own prompt, as Debian's skeleton .bashrc does in the images
        # SWE-ReX runs on: its sessions count the prompts they set themselves.
        (root / "root" / ".bashrc").write_text("PS1='\\u@\\h:\\w\\$ '\n")
        # Shell tools: busybox's applets, bash-static as /bin/bash, the host's less (a pager).
        shutil.copy2("/bin/busybox", root / "bin" / "busybox")
        applets = subprocess.run(["/bin/busybox", "--list-full"], capture_output=True, text=True, check=True)
        for applet in applets.stdout.split():
            link = root / applet
            if not link.exists() and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to("/bin/busybox")
        (root / "bin" / "bash").unlink(missing_ok=True)
        shutil.copy2("/bin/bash-static", root / "bin" / "bash")
        (root / "usr" / "bin" / "less").unlink(missing_ok=True)
        _copy(Path("/usr/bin/less"), root)
        for terminfo in (Path("/lib/terminfo"), Path("/usr/share/terminfo")):
            if terminfo.is_dir():
                shutil.copytree(terminfo, root / terminfo.relative_to("/"), symlinks=True, dirs_exist_ok=True)
        # The interpreter where it lives on the host, so its prefix is found as it is here.
        _copy(executable, root)
        for lib in (prefix / "lib").glob("libpython*.so*"):
            _copy(lib, root)
        target_stdlib = root / stdlib.relative_to("/")
        shutil.copytree(
            stdlib,
            target_stdlib,
            symlinks=True,
            ignore=lambda d, names: [n for n in names if Path(d) == stdlib and n in SKIPPED_STDLIB],
        )
        site = target_stdlib / "site-packages"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--target",
                str(site),
                f"swe-rex=={SWEREX_VERSION}",
                # FastAPI 0.122 answers a missing API key with 401, SWE-ReX 1.4.0's tests expect
                # the 403 of the FastAPI it was released with.
                "fastapi<0.122",
            ],
            check=True,
            timeout=600,
        )
        # Bytecode for the whole library, so the server starts without compiling anything.
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-j", "0", str(target_stdlib)], check=False, timeout=600
        )
        binaries = [executable, Path("/usr/bin/less"), *target_stdlib.rglob("*.so")]
        binaries = [b for b in binaries if "tkinter" not in b.name]
        for lib in _libraries(binaries):
            if not (root / lib.relative_to("/")).exists():
                _copy(lib, root)
        for name in ("python", "python3", version):
            (root / "usr" / "local" / "bin" / name).symlink_to(executable)
        remote = root / "usr" / "local" / "bin" / "swerex-remote"
        remote.write_text(f'#!/bin/sh\nexec {executable} -m swerex "$@"\n')
        remote.chmod(0o755)
        previous = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", TAG], capture_output=True, text=True, check=False
        ).stdout.strip()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [
                "docker",
                "import",
                "--change",
                "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--change",
                f"ENV {KEY_VAR}={key()}",
                "--change",
                "ENV HOME=/root",
                "--change",
                'CMD ["/bin/sh"]',
                "-",
                TAG,
            ],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0:
            raise RuntimeError(f"docker import {TAG} failed: {imported.stderr.strip()}")
        if previous:
            # The build this one replaces (another key): this builder's own image, untagged now.
            subprocess.run(["docker", "rmi", previous], capture_output=True, check=False)


if __name__ == "__main__":
    print(ensure_swerex_image(), file=sys.stdout)
    os._exit(0)
