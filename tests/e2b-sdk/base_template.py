"""E2B's `base` template as its tests expect it, built from what this machine has (no
registry, no download): the test suite's bash image, plus this host's own Debian Python
(`/usr/bin/python3.11` with its standard library and C extensions), `tput` with its terminfo
entries, `curl` with the host's CA bundle (E2B's network tests curl; a run against stand-in
public hosts adds the CA it made, `extra_ca`), and the shared libraries each of them loads
(found by `ldd`), copied to the same paths;
a user `user` (uid 1000) whose home is the working directory; Debian's `sudo` (the host's, or
its package fetched once by apt and unpacked) with the host's PAM stack, `user` allowed
everything without a password. E2B's sandboxes are VMs whose root is whole: the suite's server
lets setuid work (`no_new_privileges: false`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from support import docker

TAG = "sandboxd-test/e2b-base:2"
# Bumped whenever what goes into the image changes.
RECIPE = "7"

DOCKERFILE = """FROM {bash}
COPY rootfs/ /
RUN mkdir -p /home/user && chown 1000:1000 /home/user && chmod 755 /home/user \\
 && ln -sf python3.11 /usr/bin/python3 && ln -sf python3.11 /usr/bin/python \\
 && mkdir -p /tmp && chmod 1777 /tmp \\
 && if [ -e /usr/bin/sudo ]; then chmod 4755 /usr/bin/sudo; fi
ENV TERM=xterm-256color
USER user
WORKDIR /home/user
LABEL sandboxd.test-image={version}
"""

PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    "user:x:1000:1000:user:/home/user:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
GROUP = "root:x:0:\nsudo:x:27:user\nuser:x:1000:\nnogroup:x:65534:\n"

PYTHON = Path("/usr/bin/python3.11")
PYTHON_LIB = Path("/usr/lib/python3.11")
# Parts of the standard library no test imports (and that would only make the image larger).
PYTHON_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "__pycache__"}
TPUT = Path("/usr/bin/tput")
TERMINFO = [Path("/usr/share/terminfo"), Path("/lib/terminfo"), Path("/etc/terminfo")]
SUDO = Path("/usr/bin/sudo")
CURL = Path("/usr/bin/curl")
# Where Debian's curl (OpenSSL) looks for the CAs it trusts.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# `docker.create` of the suite's server: setuid works (sudo); the default dropped caps stay
# (without AUDIT_WRITE sudo warns on stderr and goes on).
SERVER_CREATE = {"no_new_privileges": False}


def _libraries(binary: Path) -> set[Path]:
    """The shared objects `binary` loads, by `ldd` (nothing for a static one)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    found: set[Path] = set()
    for line in out.splitlines():
        parts = line.split()
        for part in parts:
            if part.startswith("/") and Path(part).exists():
                found.add(Path(part))
    return found


def _copy(path: Path, rootfs: Path) -> None:
    """`path` (following links to its file, keeping the link's own name) under `rootfs`."""
    target = rootfs / path.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        shutil.copytree(path, target, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(path.resolve(), target)


def _python(rootfs: Path) -> set[Path]:
    libs = _libraries(PYTHON)
    _copy(PYTHON, rootfs)

    def ignore(_dir: str, names: list[str]) -> list[str]:
        return [n for n in names if n in PYTHON_SKIP or n in {"site-packages", "dist-packages"}]

    shutil.copytree(PYTHON_LIB, rootfs / PYTHON_LIB.relative_to("/"), symlinks=True, ignore=ignore)
    for extension in (PYTHON_LIB / "lib-dynload").glob("*.so"):
        libs |= _libraries(extension)
    return libs


def _tput(rootfs: Path) -> set[Path]:
    _copy(TPUT, rootfs)
    for directory in TERMINFO:
        for name in ("x/xterm", "x/xterm-256color", "d/dumb", "v/vt100", "l/linux"):
            entry = directory / name
            if entry.exists():
                _copy(entry, rootfs)
    return _libraries(TPUT)


def _curl(rootfs: Path, extra_ca: Path | None) -> set[Path]:
    """The host's curl and its CA bundle, plus `extra_ca` (PEM) appended to the bundle."""
    if not CURL.exists():
        return set()
    _copy(CURL, rootfs)
    bundle = rootfs / CA_BUNDLE.relative_to("/")
    bundle.parent.mkdir(parents=True, exist_ok=True)
    text = CA_BUNDLE.read_text() if CA_BUNDLE.exists() else ""
    if extra_ca is not None:
        text += extra_ca.read_text()
    bundle.write_text(text)
    return _libraries(CURL)


def _sudo_package() -> Path | None:
    """Debian's `sudo` unpacked: the host's own when installed (`/`), else its package fetched
    once by apt (`apt-get download`, the machine's own Debian mirror) and unpacked with `dpkg -x`
    into a cache; `None` when neither works."""
    if SUDO.exists():
        return Path("/")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sandboxd-tests" / "sudo"
    unpacked = cache / "root"
    if (unpacked / "usr/bin/sudo").exists():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)
    fetched = subprocess.run(["apt-get", "download", "sudo"], cwd=cache, capture_output=True, check=False)
    debs = sorted(cache.glob("sudo_*.deb"))
    if fetched.returncode != 0 or not debs:
        return None
    staging = cache / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(["dpkg", "-x", str(debs[-1]), str(staging)], check=True, capture_output=True)
    staging.rename(unpacked)
    return unpacked


def _sudo(rootfs: Path) -> set[Path]:
    """Debian's sudo (the package's binary, plugins and PAM file) with the host's PAM modules and
    configuration it loads, and a sudoers that lets `user` run anything without a password (as
    E2B's `base`)."""
    package = _sudo_package()
    if package is None:
        return set()
    binary = package / "usr/bin/sudo"
    target = rootfs / "usr/bin/sudo"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    libs = _libraries(binary)
    for relative in ("usr/lib/sudo", "usr/libexec/sudo"):
        directory = package / relative
        if directory.exists():
            shutil.copytree(directory, rootfs / relative, symlinks=True, dirs_exist_ok=True)
            for so in directory.glob("*.so*"):
                libs |= _libraries(so)
    for security in (Path("/lib/x86_64-linux-gnu/security"), Path("/usr/lib/x86_64-linux-gnu/security")):
        if security.exists():
            _copy(security, rootfs)
            for so in security.glob("*.so"):
                libs |= _libraries(so)
    if Path("/etc/pam.d").exists():
        _copy(Path("/etc/pam.d"), rootfs)
    if Path("/etc/security").exists():  # pam_limits' and pam_env's configuration
        _copy(Path("/etc/security"), rootfs)
    if (package / "etc/pam.d/sudo").exists():
        shutil.copy2(package / "etc/pam.d/sudo", rootfs / "etc/pam.d/sudo")
    sudoers = rootfs / "etc" / "sudoers"
    sudoers.write_text("Defaults env_reset\nroot ALL=(ALL:ALL) ALL\nuser ALL=(ALL:ALL) NOPASSWD: ALL\n")
    os.chmod(sudoers, 0o440)
    os.chmod(target, 0o4755)
    return libs


def has_sudo() -> bool:
    return _sudo_package() is not None


def build(bash: str, version: str, workdir: Path, extra_ca: Path | None = None) -> str:
    """The template's image (built when missing or made by another recipe); `extra_ca` (PEM)
    is trusted by its curl beside the host's CAs."""
    ca = hashlib.sha256(extra_ca.read_bytes()).hexdigest()[:12] if extra_ca is not None else "host"
    label = f"{version}.{RECIPE}.{int(has_sudo())}.{ca}"
    current = docker(
        "image", "inspect", "--format", '{{index .Config.Labels "sandboxd.test-image"}}', TAG, check=False
    )
    if current.returncode == 0 and current.stdout.strip() == label:
        return TAG
    context = workdir / "e2b-base"
    rootfs = context / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "passwd").write_text(PASSWD)
    (rootfs / "etc" / "group").write_text(GROUP)
    # pam_unix's account check (sudo) reads the shadow entries: no password, never expiring.
    shadow = rootfs / "etc" / "shadow"
    shadow.write_text("".join(f"{line.split(':')[0]}:*:19000:0:99999:7:::\n" for line in PASSWD.splitlines()))
    os.chmod(shadow, 0o600)
    libs = _python(rootfs) | _tput(rootfs) | _sudo(rootfs) | _curl(rootfs, extra_ca)
    for lib in libs:
        _copy(lib, rootfs)
    (context / "Dockerfile").write_text(DOCKERFILE.format(bash=bash, version=label))
    subprocess.run(
        ["docker", "build", "-q", "-t", TAG, str(context)],
        check=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        timeout=600,
    )
    return TAG
