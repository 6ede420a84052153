#!/usr/bin/env bash
# Builds a small starter image for sandboxd from Debian's busybox-static, with no registry:
# FROM scratch, /bin/busybox and a symlink per applet (sh, ls, cat, httpd, stty, ...), /tmp
# (mode 1777), /etc/passwd with root and nobody. About 2 MB. Idempotent: Docker's build cache
# makes a second run a no-op.
#
#   bash scripts/starter-image.sh [TAG]        # default TAG: sandboxd-starter:latest
set -euo pipefail

TAG="${1:-sandboxd-starter:latest}"
BUSYBOX=/bin/busybox

die() { printf 'starter-image: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "the docker CLI is required"
if [[ ! -x "$BUSYBOX" ]] || ldd "$BUSYBOX" >/dev/null 2>&1; then
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends busybox-static
  else
    die "a static $BUSYBOX is required: apt-get install busybox-static (as root)"
  fi
fi
ldd "$BUSYBOX" >/dev/null 2>&1 && die "$BUSYBOX is dynamically linked; apt-get install busybox-static"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$BUSYBOX" "$ctx/busybox"
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox --install -s /bin && mkdir -p /tmp /root /etc /usr /home && chmod 1777 /tmp && ln -s /bin /usr/bin && printf 'root:x:0:0:root:/root:/bin/sh\\nnobody:x:65534:65534:nobody:/home:/bin/sh\\n' >/etc/passwd && printf 'root:x:0:\\nnogroup:x:65534:\\n' >/etc/group"]
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL sandboxd.starter=1
CMD ["/bin/sh"]
DOCKERFILE
# The legacy builder: no buildx plugin and no registry are needed.
if ! out="$(DOCKER_BUILDKIT=0 docker build -q -t "$TAG" "$ctx" 2>&1)"; then
  printf '%s\n' "$out" >&2
  die "docker build of $TAG failed"
fi
echo "$TAG"
