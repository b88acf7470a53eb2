"""Every relative link of the README and of docs/*.md resolves: the file (or folder) exists,
and a ``#fragment`` into a markdown file names one of its headings (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


def broken(page: Path) -> list[str]:
    """The relative links of ``page`` that do not resolve, each with the reason."""
    problems = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):      # http:, https:, mailto:, ...
            continue
        path, _, fragment = target.partition("#")
        resolved = page if not path else (page.parent / path).resolve()
        if not resolved.exists():
            problems.append(f"{target}: no such file {resolved}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page):
    assert broken(page) == []


def test_the_readme_links_to_every_docs_page():
    targets = {target.partition("#")[0] for target in links(ROOT / "README.md")}
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= targets


def test_the_check_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# A heading, with `code`\n\n## Same\n## Same\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#a-heading-with-code) [ok](#local) "
                    "[ok](there.md#same-1) ![ok](there.md) [web](https://example.org/x)\n"
                    "`[not a link](nowhere.md)`\n```\n[not a link](nowhere.md)\n```\n"
                    "# Local\n[gone](missing.md) [bad anchor](there.md#nope)\n")
    assert broken(page) == [
        f"missing.md: no such file {tmp_path / 'missing.md'}",
        "there.md#nope: no heading #nope in there.md",
    ]


def test_the_readme_pictures_exist_and_are_png():
    readme = (ROOT / "README.md").read_text()
    pictures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme)
    assert pictures
    for picture in pictures:
        assert (ROOT / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", picture
