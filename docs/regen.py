"""Rerun the commands that docs quote and rewrite the output under each: `python docs/regen.py
[DOC.md ...]` from the repository root (default: README.md and docs/*.md). A quoted command is
a line `$ <command>` at the top of a ``` block, its output the lines up to the next `$ ` line or
the block's end; it runs in a shell from the repository root with PYTHONPATH=docs/examples (as
docs/ops.md says). The tests compare these blocks on what every CPU prints the same
(tests/test_docs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```\n(\$ .*?)^```$", re.DOTALL | re.MULTILINE)


def quoted(text: str) -> list[tuple[str, str]]:
    """The (command, output) pairs that `text` quotes, in order."""
    return [(c, o.rstrip("\n")) for block in BLOCK.findall(text)
            for c, o in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block, re.MULTILINE)]


def output(command: str) -> str:
    """What `command` prints (stdout, then stderr) from the repository root."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["docs/examples", str(REPO)])}
    done = subprocess.run(command, shell=True, cwd=REPO, env=env, capture_output=True,
                          text=True)
    return (done.stdout + done.stderr).rstrip("\n")


def regenerated(text: str) -> str:
    """`text` with each quoted command's output as it prints now."""
    def block(match: re.Match) -> str:
        lines = [f"$ {c}\n{output(c)}\n" for c, _ in quoted(match[0])]
        return "```\n" + "".join(lines) + "```"
    return BLOCK.sub(block, text)


if __name__ == "__main__":
    for doc in sys.argv[1:] or ["README.md", *sorted(map(str, (REPO / "docs").glob("*.md")))]:
        path = REPO / doc
        path.write_text(regenerated(path.read_text()))
        print(f"rewrote {path.relative_to(REPO)}: {len(quoted(path.read_text()))} commands")
