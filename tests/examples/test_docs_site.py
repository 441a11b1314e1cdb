"""The documentation site's build settings (mkdocs.yml, pyproject's ``docs`` extra).

mkdocstrings-python prints a signature on lines of ``line_length`` only
through a code formatter it imports (Black or Ruff); without one, every
signature of the API reference was one long line in a sideways scroller.
The ``docs`` extra must bring a formatter the installed mkdocstrings-python
looks for, and mkdocs.yml must ask for separate, wrapped signatures.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def docs_extra() -> set[str]:
    """The distribution names of pyproject.toml's ``docs`` extra."""
    text = (ROOT / "pyproject.toml").read_text()
    (line,) = re.findall(r"(?m)^docs\s*=\s*\[(.*)\]\s*$", text)
    return {re.split(r"[\[<>=!~;\s]", item.strip().strip('"'))[0].lower()
            for item in line.split('",') if item.strip()}


def formatters_mkdocstrings_uses() -> set[str]:
    """The formatter packages the installed mkdocstrings-python imports
    (read from its sources: importing it takes half a second)."""
    spec = importlib.util.find_spec("mkdocstrings_handlers.python")
    if spec is None or spec.origin is None:
        pytest.fail("mkdocstrings-python is not installed: the test extra brings it "
                    '(pip install -e ".[test]")')
    folder = Path(spec.origin).parent
    found = set()
    for source in folder.rglob("*.py"):
        found.update(re.findall(r"(?m)^\s*from (black|ruff)[\s.]", source.read_text()))
    return found


def test_the_docs_extra_is_read() -> None:
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= docs_extra()


def test_the_docs_extra_brings_a_formatter_mkdocstrings_uses() -> None:
    uses = formatters_mkdocstrings_uses()
    assert uses, "mkdocstrings-python no longer imports black or ruff: see how it formats"
    assert docs_extra() & uses, (sorted(docs_extra()), sorted(uses))


def test_signatures_are_separate_and_wrapped() -> None:
    options = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"(?m)^\s+separate_signature: true$", options)
    (width,) = re.findall(r"(?m)^\s+line_length: (\d+)$", options)
    assert 60 <= int(width) <= 100


# A paragraph, or one item of a list, past this many words is a wall of text
# a reader skims over: split it into short paragraphs, a list or a table.
MOST_WORDS = 200
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                     if "_hooks" not in p.parts and "reference" not in p.parts)]


def prose_blocks(text: str) -> list[str]:
    """The page's paragraphs and list items, its code blocks, tables,
    headings and comments left out."""
    prose = "\n".join(text.split("```")[0::2])
    blocks = []
    for paragraph in re.split(r"\n\s*\n", prose):
        for item in re.split(r"(?m)^\s*(?:[-*]|\d+\.)\s+", paragraph):
            if item.strip() and not item.lstrip().startswith(("|", "#", "<!--")):
                blocks.append(item)
    return blocks


def test_prose_blocks_are_paragraphs_and_list_items() -> None:
    page = "# T\n\nOne two.\nThree.\n\n- a b\n- c\n    - d\n\n```\nx y z\n```\n| t | u |\n"
    assert [" ".join(b.split()) for b in prose_blocks(page)] == [
        "One two. Three.", "a b", "c", "d"]


def test_no_page_is_a_wall_of_text() -> None:
    walls = [(page.relative_to(ROOT).as_posix(), len(block.split()), block.split()[:8])
             for page in PAGES for block in prose_blocks(page.read_text())
             if len(block.split()) > MOST_WORDS]
    assert not walls, walls
