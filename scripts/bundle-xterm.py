#!/usr/bin/env python3
"""Regenerates the console's vendored xterm.js (server/src/console/assets/xterm/) from Debian's
packages: the CommonJS modules of `node-xterm` (/usr/share/nodejs/xterm/lib) wrapped into one
browser file with a small `require`, plus `libjs-xterm`'s xterm.css and the copyright file.

Why a bundle of our own: bookworm's `libjs-xterm` 3.8.1 ships /usr/share/javascript/xterm/xterm.js
as a 288-byte stub that `require`s "./public/Terminal", which the package does not contain, so it
cannot be loaded by a browser as is. The modules themselves are complete in `node-xterm` (same
source package and version) and need nothing outside themselves.

Usage: scripts/bundle-xterm.py [--check]   (install the packages with scripts/install-deps.sh)
--check exits 1 when the committed files differ from what the installed packages give.
"""

import json
import pathlib
import sys

LIB = pathlib.Path("/usr/share/nodejs/xterm/lib")
CSS = pathlib.Path("/usr/share/javascript/xterm/xterm.css")
COPYRIGHT = pathlib.Path("/usr/share/doc/node-xterm/copyright")
PACKAGE = pathlib.Path("/usr/share/nodejs/xterm/package.json")
OUT = pathlib.Path(__file__).resolve().parent.parent / "server/src/console/assets/xterm"

PRELUDE = """\
// xterm.js %(version)s from Debian's node-xterm (MIT; see copyright beside this file), its
// CommonJS modules wrapped for the browser by scripts/bundle-xterm.py. Do not edit: regenerate.
(function () {
  "use strict";
  var defs = {}, cache = {};
  function norm(path) {
    var out = [];
    path.split("/").forEach(function (part) {
      if (part === "..") out.pop(); else if (part !== "." && part !== "") out.push(part);
    });
    return out.join("/");
  }
  function load(name) {
    if (cache[name]) return cache[name].exports;
    var module = { exports: {} };
    cache[name] = module;
    var dir = name.split("/").slice(0, -1).join("/");
    defs[name].call(module.exports, module, module.exports, function (dep) {
      var full = norm((dir ? dir + "/" : "") + dep);
      if (!defs[full]) throw new Error("xterm bundle: no module " + full + " (from " + name + ")");
      return load(full);
    });
    return module.exports;
  }
"""

POSTLUDE = """\
  window.Terminal = load("public/Terminal").Terminal;
})();
"""


def bundle() -> dict[str, bytes]:
    version = json.loads(PACKAGE.read_text())["version"]
    parts = [PRELUDE % {"version": version}]
    for path in sorted(LIB.rglob("*.js")):
        if path.name.endswith(".test.js"):
            continue
        name = path.relative_to(LIB).with_suffix("").as_posix()
        source = path.read_text()
        source = "\n".join(
            line for line in source.splitlines() if not line.startswith("//# sourceMappingURL=")
        )
        parts.append(
            "  defs[%s] = function (module, exports, require) {\n%s\n  };\n" % (json.dumps(name), source)
        )
    parts.append(POSTLUDE)
    return {
        "xterm.js": "".join(parts).encode(),
        "xterm.css": CSS.read_bytes(),
        "copyright": COPYRIGHT.read_bytes(),
    }


def main() -> int:
    for need in (LIB, CSS, COPYRIGHT):
        if not need.exists():
            print(f"bundle-xterm: {need} is missing: apt-get install node-xterm libjs-xterm", file=sys.stderr)
            return 2
    files = bundle()
    if "--check" in sys.argv[1:]:
        stale = [n for n, data in files.items() if not (OUT / n).exists() or (OUT / n).read_bytes() != data]
        if stale:
            print(f"bundle-xterm: {', '.join(stale)} differ from the installed packages", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        print(f"wrote {OUT / name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
