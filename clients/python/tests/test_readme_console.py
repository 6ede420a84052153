"""The README's `sandboxctl` session, typed into a real terminal (tmux, 110x50 as the transcript's
`stty size` shows) and compared with what the README says it shows.

The transcript is read from the README (example `console-session`): each `$ ` or `/ # ` line is
a command typed at that prompt, the lines after it are what it prints. What differs run to run
is normalised on both sides: sandbox ids, the container's host name, the AGE column, BusyBox's
version, runs of spaces (the columns widen with this run's image tag, read back as the starter
image). Each command is waited for (its output, then the next prompt) with a generous deadline,
never a sleep.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from markdown import README, STARTER, example, example_env
from support import ContainerLabel, ServerProcess

ROWS, COLS = 50, 110
PROMPTS = ("$ ", "/ # ")
DEADLINE_S = 90.0


@dataclass(frozen=True)
class Step:
    prompt: str
    command: str
    expected: list[str]


def steps(transcript: str) -> list[Step]:
    found: list[Step] = []
    for line in transcript.splitlines():
        prompt = next((p for p in PROMPTS if line.startswith(p)), None)
        if prompt is not None:
            found.append(Step(prompt, line[len(prompt) :], []))
        else:
            assert found, f"output before the first command: {line!r}"
            found[-1].expected.append(line)
    return found


def normalised(lines: list[str], tag: str) -> list[str]:
    out = []
    for line in lines:
        line = line.replace(tag, STARTER)
        line = re.sub(r"sandboxd-[0-9a-f]{32}", "SANDBOX", line)
        line = re.sub(r"\bfrom [0-9a-f]{12}\b", "from HOST", line)
        line = re.sub(r"\s\d+[smhd]\s", " AGE ", line)
        line = re.sub(r"^BusyBox v\S+ \(.*\) built-in shell", "BusyBox built-in shell", line)
        out.append(re.sub(r"\s+", " ", line).strip())
    # Blank lines around the shell's banner come and go with the terminal's timing.
    return [line for line in out if line]


class Tmux:
    """One tmux server of this test's own (its own socket), one pane of ROWS x COLS."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        # A socket in a directory of its own (short: unix socket paths are limited to 108 bytes),
        # removed with the server: `-L` would leave its socket under /tmp/tmux-UID.
        self.dir = tempfile.mkdtemp(prefix="sandboxd-readme-tmux-")
        self.socket = os.path.join(self.dir, "s")
        # The reader's shell after the quick start, from an rc file of its own (what tmux passes
        # on of its client's environment is tmux's business).
        rc = cwd / ".bashrc-readme"
        rc.write_text("".join(f"export {k}={shlex.quote(env[k])}\n" for k in ("PATH", "SANDBOXD_ADDR")) + "PS1='$ '\n")
        shell = f"bash --rcfile {shlex.quote(str(rc))} --noprofile -i"
        self.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(COLS), "-y", str(ROWS), shell, cwd=cwd)
        self.run("set-option", "-g", "status", "off")
        self.run("resize-window", "-t", "t", "-x", str(COLS), "-y", str(ROWS))

    def run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        out = subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=30, env=env, cwd=cwd
        )
        assert out.returncode == 0, f"tmux {args}: {out.stderr}"
        return out.stdout

    def type(self, text: str) -> None:
        self.run("send-keys", "-t", "t", "-l", text)
        self.run("send-keys", "-t", "t", "Enter")

    def screen(self) -> list[str]:
        """Everything the pane showed, scrollback included, wrapped lines joined."""
        return self.run("capture-pane", "-p", "-J", "-S", "-", "-t", "t").rstrip("\n").split("\n")

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def tmux(binaries: Path, example_server: ServerProcess, tmp_path: Path) -> Iterator[Tmux]:
    assert shutil.which("tmux"), "tmux comes with `bash scripts/install-deps.sh`"
    env = example_env(binaries, example_server.address)
    terminal = Tmux(env, tmp_path)
    try:
        wait_for_prompt(terminal, 0, "$")
        yield terminal
    finally:
        terminal.kill()


def wait_for_prompt(terminal: Tmux, start: int, prompt: str) -> list[str]:
    """The screen once, after line `start`, the last line is the bare `prompt` (nothing typed)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        screen = terminal.screen()
        lines = [line.rstrip() for line in screen]
        while lines and not lines[-1]:
            lines.pop()
        if len(lines) > start and lines[-1] == prompt:
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"no `{prompt}` prompt within {DEADLINE_S} s; the screen:\n" + "\n".join(screen))
        time.sleep(0.1)


def test_the_sandboxctl_session_shows_what_the_readme_shows(
    tmux: Tmux, starter: str, example_label: ContainerLabel
) -> None:
    before = set(example_label.containers())
    session = steps(example("console-session", README).replace(STARTER, starter))
    assert len(session) >= 10 and any(s.prompt == "/ # " for s in session), "the transcript lost its shell"
    done = 0  # lines of the screen already compared
    for index, step in enumerate(session):
        following = session[index + 1].prompt.strip() if index + 1 < len(session) else "$"
        tmux.type(step.command)
        lines = wait_for_prompt(tmux, done + 1, following)
        typed = max(i for i, line in enumerate(lines) if line.endswith(step.command) and i >= done)
        shown = lines[typed + 1 : -1]
        assert normalised(shown, starter) == normalised(step.expected, starter), (
            f"`{step.command}` showed {shown!r}, the README says {step.expected!r}"
        )
        done = len(lines) - 1
    example_label.settle(before)  # the session's `rm --label owner=me` removed its sandbox
