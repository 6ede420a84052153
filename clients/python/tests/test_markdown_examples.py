"""Every example of README.md, clients/python/README.md and docs/*.md is marked (see
markdown.py): run by a named test or script that mentions it, or marked as not runnable with a
reason. No Docker needed: these check the documents themselves."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from markdown import MARKER, STARTER, Block, blocks, covered
from support import REPO_ROOT


def all_blocks() -> list[Block]:
    return [b for path in covered() for b in blocks(path)]


def test_every_example_carries_a_marker() -> None:
    unmarked = [b.where for b in all_blocks() if b.parsed() is None]
    assert unmarked == [], (
        "blocks without `<!-- example NAME: FILE -->` or `<!-- example not run: REASON -->` on the "
        f"line before their fence: {unmarked}"
    )
    # A marker always sits right before a fence: one that does not marks nothing.
    for path in covered():
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if line.startswith("<!-- example"):
                assert MARKER.match(line), f"{path.relative_to(REPO_ROOT)}:{index + 1}: a malformed marker {line!r}"
                following = lines[index + 1] if index + 1 < len(lines) else ""
                assert re.match(r"```\w", following), f"{path.relative_to(REPO_ROOT)}:{index + 1}: marks no block"


def test_each_named_example_is_run_by_the_file_it_names() -> None:
    named = [(b, m) for b in all_blocks() if (m := b.parsed()) is not None and m["name"]]
    assert len(named) >= 30, "the documents lost their examples"
    for path in covered():
        names = Counter(m["name"] for b, m in named if b.path == path)
        assert [n for n, c in names.items() if c > 1] == [], f"{path}: an example name used twice"
    for block, marker in named:
        runner = REPO_ROOT / marker["runner"]
        assert runner.is_file(), f"{block.where}: {marker['runner']} does not exist"
        assert f'"{marker["name"]}"' in runner.read_text() or f"{marker['name']}:" in runner.read_text(), (
            f"{block.where}: {marker['runner']} never names the example {marker['name']!r}"
        )


def test_examples_not_run_say_why() -> None:
    reasons = [m["reason"] for b in all_blocks() if (m := b.parsed()) is not None and m["reason"]]
    assert reasons and all(len(r.split()) >= 3 for r in reasons), reasons


def test_every_example_uses_only_the_starter_image() -> None:
    for path in covered():
        text = path.read_text()
        for image in re.findall(r'image[=:]\s*"([^"$]+)"', text) + re.findall(r'"image":\s*"([^"$]+)"', text):
            assert image in (STARTER, "image", ""), f"{path.name}: example image {image!r}"
        assert "busybox:latest" not in text and "python:3.12-slim" not in text and "sandboxd-test/" not in text
        for block in blocks(path):
            assert "target/debug" not in block.body, f"{block.where} switches to a debug build"
            for command in re.findall(r"sandboxctl (?:--\S+ \S+ )*create ([^\s;)]+)", block.body):
                assert command in (STARTER, "IMAGE", "--label", "--pool"), f"{block.where}: create {command}"


@pytest.mark.parametrize("path", covered(), ids=lambda p: str(Path(p).relative_to(REPO_ROOT)))
def test_local_links_resolve(path: Path) -> None:
    """A link to another document (and its anchor) of the repository leads somewhere."""
    text = path.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{path.name}: a link to {target} that does not exist"
        if anchor and linked.suffix == ".md":
            anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.M)}
            assert anchor in anchors, f"{path.name}: no heading {anchor!r} in {linked.name}"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")
