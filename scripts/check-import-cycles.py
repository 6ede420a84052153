#!/usr/bin/env python3
"""Reports import cycles between the modules of a Rust crate.

Usage: scripts/check-import-cycles.py CRATE_SRC_DIR [CRATE_SRC_DIR ...] [--never DIR:FROM->TO ...]
       (e.g. `scripts/check-import-cycles.py server/src client/src`)

A module is one file (`a/b.rs` or `a/b/mod.rs` is `a::b`; `lib.rs` is the crate root). An edge
A -> B is a path in A's code that names an item defined in B: `use crate::…`, `use super::…`,
`use self::…` (with `{…}` groups) and inline paths such as `crate::x::y(…)` or `super::Z`. A path
is resolved to the longest module prefix it names; an item a module only re-exports (`pub use
child::Item`, or a whole module's names by `pub(…) use super::*;`, a folder's facade over its
parent) is followed to the module that defines it, and a re-export line is no edge of its own (a
facade is not a dependency). Inline `mod name { … }` blocks (tests) belong to their
file's module, but their `super` is resolved from the inline module.

Exit status 1 when any two modules reach each other (a strongly connected component of more
than one module), with the edges that make each cycle and the line each edge comes from, or when
an edge breaks a "never" rule: `FROM -> TO` says no module at or below `FROM` may name an item of
a module at or below `TO` (the layers of the design: the seam never names a backend). The rules
of each crate are in NEVER below (keyed by its src directory); `--never 'DIR:FROM->TO'` adds one.
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"

# The design's direction, per crate (module paths from the crate root). `core` is the seam and
# the neutral rules; `backends/docker` and `backends/swarm` implement it (Swarm may use Docker's
# pieces, never the reverse); `service` serves any backend it is given; `agent_client` reaches
# sandboxes only through its `host::AgentHost` trait (a backend implements it), so a new
# runtime or backend reuses it unchanged; `wiring` (the composition root) is the one place
# above `backends` that names one.
NEVER = {
    "server/src": [
        ("core", "backends"),
        ("core", "service"),
        ("core", "wiring"),
        ("core", "agent_client"),
        ("backends::docker", "backends::swarm"),
        ("backends", "wiring"),
        ("service", "backends"),
        ("service", "wiring"),
        ("service", "agent_client"),
        ("agent_client", "backends"),
    ],
    # The agent: `processes` (the one process table and its `Program` trait) names no kind of
    # program; the exec runner and the sessions name neither each other nor the dispatcher
    # (`serve`) that routes requests to them.
    "agent/src": [
        ("processes", "exec"),
        ("processes", "sessions"),
        ("processes", "serve"),
        ("exec", "sessions"),
        ("exec", "serve"),
        ("sessions", "exec"),
        ("sessions", "serve"),
    ],
}


def strip_comments_and_strings(src):
    """Blanks comments, string and char literals (keeping newlines) so braces and paths in
    them are not read as code."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", src[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", src[i : j + 1]))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(root, path):
    rel = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def expand_use_tree(text):
    """`a::{b, c::{d, e as f}, self}` -> [[a,b], [a,c,d], [a,c,e], [a]] (aliases dropped)."""
    text = re.sub(r"\s+as\s+" + IDENT, "", text)
    text = re.sub(r"\s+", "", text)

    def parse(s, prefix):
        paths, depth, start = [], 0, 0
        parts = []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for part in parts:
            if not part:
                continue
            if "{" in part:
                head, inner = part.split("{", 1)
                inner = inner[: inner.rfind("}")]
                head = [h for h in head.split("::") if h]
                paths += parse(inner, prefix + head)
            else:
                segs = [p for p in part.split("::") if p]
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                paths.append(prefix + segs)
        return paths

    return parse(text, [])


class Crate:
    def __init__(self, root):
        self.root = root
        self.modules = {}  # module path -> file
        for dirpath, _, files in os.walk(root):
            for f in files:
                if f.endswith(".rs"):
                    p = os.path.join(dirpath, f)
                    self.modules[module_of(root, p)] = p
        self.reexports = {}  # (module, name) -> absolute target path
        self.globs = {}  # module -> absolute path of the module it re-exports whole (`pub(…) use super::*;`)
        self.uses = []  # (from module, absolute path, line)
        for mod, path in self.modules.items():
            self.read(mod, path)

    def absolute(self, segs, scope):
        """Turns `crate::…`/`super::…`/`self::…` into a path from the crate root."""
        if not segs:
            return None
        if segs[0] == "crate":
            return list(segs[1:])
        base = list(scope)
        if segs[0] in ("super", "self"):
            k = 0
            while k < len(segs) and segs[k] in ("super", "self"):
                if segs[k] == "super":
                    if not base:
                        return None
                    base.pop()
                k += 1
            return base + list(segs[k:])
        return None

    def read(self, mod, path):
        raw = open(path, encoding="utf-8").read()
        src = strip_comments_and_strings(raw)
        # The module scope at each offset: inline `mod x {` blocks push a level.
        scopes = []  # (start, end, scope)
        stack = [(None, tuple(mod))]
        depth = 0
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{|[{}]", src):
            tok = m.group(0)
            if m.group(1):
                depth += 1
                stack.append((depth, stack[-1][1] + (m.group(1),), m.start()))
            elif tok == "{":
                depth += 1
            else:
                if stack[-1][0] == depth and len(stack) > 1:
                    d, scope, start = stack.pop()
                    scopes.append((start, m.end(), scope))
                depth -= 1

        def scope_at(off):
            best = tuple(mod)
            width = None
            for s, e, sc in scopes:
                if s <= off < e and (width is None or e - s < width):
                    best, width = sc, e - s
            return best

        def line_of(off):
            return src.count("\n", 0, off) + 1

        use_spans = []
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", src):
            use_spans.append((m.start(), m.end()))
            is_pub = bool(m.group(1))
            scope = scope_at(m.start())
            for segs in expand_use_tree(m.group(2)):
                glob = bool(segs) and segs[-1] == "*"
                if glob:
                    segs = segs[:-1]
                if not segs or segs[0] not in ("crate", "super", "self"):
                    # `use child::Item` inside a module is relative to it (2018 edition).
                    if segs and tuple(scope) + (segs[0],) in self.modules:
                        segs = ["self"] + segs
                    else:
                        continue
                target = self.absolute(segs, scope)
                if target is None:
                    continue
                if is_pub and glob and segs == ["super"] and scope == tuple(mod):
                    # A folder's facade over its parent (`pub(in …) use super::*;`): a name its
                    # files reach through it is the parent's, followed there; no edge of its own.
                    self.globs[tuple(mod)] = target
                elif is_pub and scope == tuple(mod):
                    self.reexports[(tuple(mod), segs[-1] if segs[-1] not in ("crate", "super", "self") else "")] = target
                else:
                    self.uses.append((tuple(mod), target, line_of(m.start())))
        for m in re.finditer(r"\b(crate|super|self)((?:::" + IDENT + r")+)", src):
            if any(s <= m.start() < e for s, e in use_spans):
                continue
            segs = [m.group(1)] + [s for s in m.group(2).split("::") if s]
            target = self.absolute(segs, scope_at(m.start()))
            if target is not None:
                self.uses.append((tuple(mod), target, line_of(m.start())))

    def resolve(self, target, seen=None):
        """The module that defines the item `target` names."""
        seen = seen or set()
        k = len(target)
        while k > 0 and tuple(target[:k]) not in self.modules:
            k -= 1
        mod = tuple(target[:k])
        if k < len(target):
            key = (mod, target[k])
            if key in self.reexports and key not in seen:
                seen.add(key)
                re_target = self.reexports[key] + list(target[k + 1 :])
                return self.resolve(re_target, seen)
            if mod in self.globs and (mod, "*") not in seen:
                seen.add((mod, "*"))
                return self.resolve(self.globs[mod] + list(target[k:]), seen)
        return mod

    def graph(self):
        edges = {}
        for frm, target, line in self.uses:
            to = self.resolve(target)
            if to == frm:
                continue
            edges.setdefault(frm, {}).setdefault(to, line)
        return edges


def sccs(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "crate::" + "::".join(mod) if mod else "crate"


def under(mod, prefix):
    return tuple(mod[: len(prefix)]) == prefix


def rule_breaks(crate, edges, rules):
    """The edges that break a never rule, as printable lines."""
    out = []
    for frm_prefix, to_prefix in rules:
        frm_p, to_p = tuple(frm_prefix.split("::")), tuple(to_prefix.split("::"))
        for frm in sorted(edges):
            if not under(frm, frm_p):
                continue
            for to, line in sorted(edges[frm].items()):
                if under(to, to_p) and not under(frm, to_p):
                    out.append(
                        f"  never {frm_prefix} -> {to_prefix}: {name(frm)} -> {name(to)}   "
                        f"({os.path.relpath(crate.modules[frm])}:{line})"
                    )
    return out


def main(args):
    extra = {}
    roots = []
    i = 0
    while i < len(args):
        if args[i] == "--never":
            if i + 1 >= len(args) or ":" not in args[i + 1] or "->" not in args[i + 1]:
                print("--never takes DIR:FROM->TO (e.g. server/src:core->backends)", file=sys.stderr)
                return 2
            root, rule = args[i + 1].split(":", 1)
            frm, to = (part.strip() for part in rule.split("->", 1))
            extra.setdefault(os.path.normpath(root), []).append((frm, to))
            i += 2
        else:
            roots.append(args[i])
            i += 1
    bad = 0
    for root in roots:
        crate = Crate(root)
        edges = crate.graph()
        rules = NEVER.get(os.path.normpath(root), []) + extra.get(os.path.normpath(root), [])
        for prefix in {p for rule in rules for p in rule}:
            if not any(under(m, tuple(prefix.split("::"))) for m in crate.modules):
                print(f"{root}: a never rule names {prefix}, which is no module here")
                bad += 1
        breaks = rule_breaks(crate, edges, rules)
        if breaks:
            bad += 1
            print(f"{root}: {len(breaks)} import(s) against the design's direction:")
            print("\n".join(breaks))
        for comp in sccs(sorted(crate.modules), edges):
            if len(comp) < 2:
                continue
            bad += 1
            members = set(comp)
            print(f"{root}: import cycle between {len(comp)} modules:")
            for frm in sorted(comp):
                for to, line in sorted(edges.get(frm, {}).items()):
                    if to in members:
                        print(f"  {name(frm)} -> {name(to)}   ({os.path.relpath(crate.modules[frm])}:{line})")
        if not bad:
            print(f"{root}: no import cycles ({len(crate.modules)} modules, {len(rules)} never rules kept)")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
