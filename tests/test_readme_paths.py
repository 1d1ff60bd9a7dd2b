"""The README's walk through the code (the path of one request, how to extend) names files that exist:
a moved or renamed module fails here instead of leaving the guide stale."""

from __future__ import annotations

import re

from sim.paths import project_root

ROOT = project_root()
SECTIONS = ("## The path of one request through the code", "## How to extend")


def _section(text: str, head: str) -> str:
    start = text.index(head)
    return text[start : text.index("\n## ", start + 1)]


def test_every_file_the_code_walk_names_exists():
    text = (ROOT / "README.md").read_text()
    named = {
        path
        for head in SECTIONS
        for path in re.findall(
            r"`((?:sim|hwprofiles|scenarios|kernels_bench)/[^`<>\s]+)`", _section(text, head)
        )
    }
    assert len(named) >= 20
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
