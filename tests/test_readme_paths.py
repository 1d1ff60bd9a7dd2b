"""The README is the guide and docs/ the record: the README stays short, its walk through the code (the path
of one request, how to extend) names files that exist, and no file the README or docs/ names in backticks is
missing: a moved or renamed module fails here instead of leaving the guide stale."""

from __future__ import annotations

import re

from sim.paths import project_root

ROOT = project_root()
SECTIONS = ("## The path of one request through the code", "## How to extend")
# a path the guide names: a project folder, then no spaces, globs or placeholders
NAMED_PATH = r"`((?:sim|hwprofiles|scenarios|kernels_bench|tests|traces|docs)/[^`<>\s*{]+)`"


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


def test_the_readme_is_a_guide_of_at_most_300_lines_with_its_record_in_docs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "## The verdict" in text
    records = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert len(records) >= 5
    assert [name for name in records if f"docs/{name}" not in text and name not in text] == []


def test_every_path_the_readme_and_docs_name_exists():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [
        (f.name, p)
        for f in files
        for p in sorted(set(re.findall(NAMED_PATH, f.read_text())))
        if not (ROOT / p).exists()
    ]
    assert missing == []
