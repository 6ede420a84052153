"""Gym's runtime capabilities on sandboxd: `SupportsSandboxNetwork`,
`SupportsSandboxRuntimeRequirements` and `SupportsSandboxSharedStorage`.

- Networking: sandboxes this provider creates join the server network named by the
  provider's `network` config (or a spec's `provider_options["network"]`); without one they sit
  on the daemon's network, where they reach each other by address as well. `network_address`
  asks the server (`NetworkAddress`); `set_hosts` writes a marked block of `/etc/hosts` as root.
- Runtime requirements: `validate_runtime_requirements` checks the names and size and returns
  the create-time metadata that carries them to `create`, which turns them into the spec's
  `cap_add` and `shm_size_bytes` (the server allows capabilities only from its operator's
  `create.allowed_cap_add`); `configure_runtime` checks the running sandbox has them.
- Shared storage: the provider's `shared_volume` config names a server volume (made on first
  use, never a host path); `shared_volume_options(source, target)` returns a descriptor that
  `create` mounts, `source` a directory inside that volume.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping
from typing import Any

from nemo_gym.sandbox.providers.base import SandboxHandle

from . import types as sd
from .client import Client

# Metadata keys `validate_runtime_requirements` returns and `create` reads back (and drops).
CAP_ADD_METADATA = "sandboxd-cap-add"
SHM_SIZE_METADATA = "sandboxd-shm-size"
# The key a shared-volume descriptor carries in `provider_options["volumes"]`.
VOLUME_DESCRIPTOR_KEY = "sandboxd_volume"
# Marks the block of /etc/hosts `set_hosts` owns.
HOSTS_BEGIN = "# >>> sandboxd set_hosts"
HOSTS_END = "# <<< sandboxd set_hosts"

_CAPABILITY = re.compile(r"^(CAP_)?[A-Z][A-Z0-9_]*$")
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_MIN_SHM_SIZE = 1 << 20

# Linux capability numbers (linux/capability.h), to read a process's CapEff.
CAPABILITY_BITS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
    "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
    "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
    "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
    "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
    "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
    "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
    "BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}  # fmt: skip


def capability_name(name: str) -> str:
    """`SYS_PTRACE` from `SYS_PTRACE`, `sys_ptrace` or `CAP_SYS_PTRACE`; ValueError otherwise."""
    upper = str(name).strip().upper()
    if not _CAPABILITY.match(upper) or upper == "CAP_":
        raise ValueError(f"cap_add: {name!r} is not a capability name (for example SYS_PTRACE)")
    bare = upper.removeprefix("CAP_")
    if bare not in CAPABILITY_BITS:
        raise ValueError(f"cap_add: {name!r} is not a Linux capability")
    return bare


def runtime_spec_fields(
    metadata: Mapping[str, str], options: Mapping[str, Any], default_network: str | None
) -> tuple[dict[str, str], dict[str, Any]]:
    """Split a Gym spec's metadata and provider options into what stays metadata and the
    `sandboxd.SandboxSpec` runtime fields (`network`, `cap_add`, `shm_size_bytes`,
    `named_volumes`, the host-bind `volumes` strings, and `runtime`: the OCI runtime from
    `provider_options["runtime"]`, e.g. `"runsc"` for gVisor)."""
    kept = dict(metadata)
    fields: dict[str, Any] = {}
    caps = kept.pop(CAP_ADD_METADATA, "")
    if caps:
        fields["cap_add"] = [c for c in caps.split(",") if c]
    shm = kept.pop(SHM_SIZE_METADATA, "")
    if shm:
        fields["shm_size_bytes"] = int(shm)
    network = options.get("network", default_network)
    if network is not None:
        if not isinstance(network, str):
            raise ValueError(f"provider_options['network'] must be a string, got {type(network).__name__}")
        fields["network"] = network
    runtime = options.get("runtime")
    if runtime is not None:
        if not isinstance(runtime, str):
            raise ValueError(f"provider_options['runtime'] must be a string, got {type(runtime).__name__}")
        fields["runtime"] = runtime
    binds: list[str] = []
    named: list[sd.VolumeMount] = []
    volumes = options.get("volumes") or []
    for volume in [volumes] if isinstance(volumes, (str, Mapping)) else list(volumes):
        if isinstance(volume, Mapping) and VOLUME_DESCRIPTOR_KEY in volume:
            named.append(
                sd.VolumeMount(
                    name=str(volume[VOLUME_DESCRIPTOR_KEY]),
                    target=str(volume["target"]),
                    read_only=bool(volume.get("read_only", False)),
                    subpath=volume.get("subpath"),
                )
            )
        elif isinstance(volume, str):
            binds.append(volume)
        else:
            raise ValueError(f"provider_options['volumes']: {volume!r} is neither a bind string nor a shared volume")
    fields["volumes"] = binds
    fields["named_volumes"] = named
    return kept, fields


class RuntimeCapabilities:
    """The three capabilities, mixed into `SandboxdProvider` (which sets these attributes)."""

    _client: Client
    _network: str | None
    _shared_volume: str | None

    # --- SupportsSandboxNetwork -------------------------------------------------------------

    def validate_networking(self) -> None:
        """Sandboxes reach each other by address: on the configured server network, or on the
        daemon's network. Nothing to refuse up front (a server whose operator gives sandboxes
        no network answers `network_address` with FailedPrecondition)."""
        return None

    async def network_address(self, handle: SandboxHandle) -> str:
        return (await self._client.network_address(handle.sandbox_id)).address

    async def set_hosts(self, handle: SandboxHandle, hosts: Mapping[str, str]) -> None:
        """Make `hosts` (name -> address) resolve in the sandbox: the block of `/etc/hosts`
        this method owns is replaced (so a second call replaces the first)."""
        lines = []
        for name, address in hosts.items():
            if not _HOSTNAME.match(str(name)):
                raise ValueError(f"set_hosts: {name!r} is not a host name")
            try:
                ip = ipaddress.ip_address(str(address))
            except ValueError as exc:
                raise ValueError(f"set_hosts: {address!r} (for {name!r}) is not an IP address") from exc
            lines.append(f"{ip} {name}")
        block = "\n".join([HOSTS_BEGIN, *lines, HOSTS_END])
        # Written in place: Docker bind-mounts /etc/hosts, so it cannot be replaced by a rename.
        script = (
            f"kept=$(sed '/^{HOSTS_BEGIN}$/,/^{HOSTS_END}$/d' /etc/hosts)"
            f" && printf '%s\\n%s\\n' \"$kept\" {shlex.quote(block)} > /etc/hosts"
        )
        result = await self._client.exec(handle.sandbox_id, script, user="root")
        if result.return_code != 0:
            raise RuntimeError(f"set_hosts in {handle.sandbox_id}: {result.stderr.decode(errors='replace').strip()}")

    # --- SupportsSandboxRuntimeRequirements -------------------------------------------------

    def validate_runtime_requirements(self, *, cap_add: tuple[str, ...], shm_size: int | None) -> dict[str, str] | None:
        """Check the names and size; return the create-time metadata carrying them (None when
        nothing is asked). The server grants a capability only from its operator's
        `create.allowed_cap_add`: a create asking for another fails naming it."""
        caps = [capability_name(c) for c in cap_add]
        if shm_size is not None and (isinstance(shm_size, bool) or int(shm_size) < _MIN_SHM_SIZE):
            raise ValueError(f"shm_size: at least {_MIN_SHM_SIZE} bytes (1 MiB), got {shm_size!r}")
        metadata: dict[str, str] = {}
        if caps:
            metadata[CAP_ADD_METADATA] = ",".join(dict.fromkeys(caps))
        if shm_size is not None:
            metadata[SHM_SIZE_METADATA] = str(int(shm_size))
        return metadata or None

    async def configure_runtime(self, handle: SandboxHandle, *, cap_add: tuple[str, ...], shm_size: int | None) -> None:
        """Check the running sandbox has what was asked (it was applied at create)."""
        if cap_add:
            result = await self._client.exec(handle.sandbox_id, "grep CapEff /proc/1/status", user="root")
            effective = int(result.stdout.decode(errors="replace").split()[-1], 16) if result.return_code == 0 else 0
            missing = [c for c in map(capability_name, cap_add) if not effective >> CAPABILITY_BITS[c] & 1]
            if missing:
                raise RuntimeError(
                    f"sandbox {handle.sandbox_id} lacks {', '.join(missing)}: create it with the metadata "
                    "validate_runtime_requirements returned"
                )
        if shm_size is not None:
            result = await self._client.exec(handle.sandbox_id, "df -k /dev/shm | tail -1")
            fields = result.stdout.decode(errors="replace").split()
            size_kib = int(fields[1]) if result.return_code == 0 and len(fields) > 1 else -1
            if size_kib * 1024 < int(shm_size):
                raise RuntimeError(f"sandbox {handle.sandbox_id}: /dev/shm is {size_kib} KiB, {shm_size} bytes asked")

    # --- SupportsSandboxSharedStorage -------------------------------------------------------

    def _require_shared_volume(self) -> str:
        """The configured shared volume; NotImplementedError naming the option without one (as
        Gym's Docker provider says when its `shared_storage.host_path` is missing)."""
        if self._shared_volume is None:
            raise NotImplementedError(
                "sandboxd provider: shared storage needs the provider option `shared_volume` "
                '(the name of a server volume, e.g. {"sandboxd": {"shared_volume": "shared"}})'
            )
        return self._shared_volume

    def shared_volume_options(self, source: str | None, target: str, *, read_only: bool = False) -> dict[str, Any]:
        """Provider options mounting the shared volume (`source=None`: its root) or the
        directory `source` inside it at `target`."""
        volume = self._require_shared_volume()
        if not str(target).startswith("/"):
            raise ValueError(f"shared volume target must be an absolute path, got {target!r}")
        descriptor: dict[str, Any] = {VOLUME_DESCRIPTOR_KEY: volume, "target": str(target)}
        if read_only:
            descriptor["read_only"] = True
        if source is not None:
            sub = str(source).strip("/")
            if not sub or ".." in sub.split("/"):
                raise ValueError(f"shared volume source must be a relative path inside the volume, got {source!r}")
            descriptor["subpath"] = sub
        return {"volumes": [descriptor]}

    def shared_volume_metadata(self) -> dict[str, str]:
        """No placement settings: every sandbox of one server reaches its volumes. Without the
        `shared_volume` option, NotImplementedError (there is no shared storage to place)."""
        self._require_shared_volume()
        return {}
