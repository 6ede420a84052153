"""The README's asyncio example (in the root README and the package's) runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support import REPO_ROOT, Images, ServerProcess

READMES = [REPO_ROOT / "README.md", REPO_ROOT / "clients" / "python" / "README.md"]


def examples() -> list[str]:
    blocks = []
    for readme in READMES:
        for block in re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S):
            if "from sandboxd import AsyncSandbox" in block:
                blocks.append(block)
    return blocks


def test_both_readmes_carry_the_same_example() -> None:
    found = examples()
    assert len(found) == 2 and found[0] == found[1]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_readme_example_runs(readme: os.PathLike[str], server: ServerProcess, images: Images) -> None:
    [block] = [
        b
        for b in re.findall(r"```python\n(.*?)```", open(readme).read(), flags=re.S)
        if "from sandboxd import AsyncSandbox" in b
    ]
    out = subprocess.run(
        [sys.executable, "-c", block],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "IMAGE": images.busybox, "SANDBOXD": server.address},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "3 hi\nb'uploaded'\n"
