"""README.md and the documentation site's pages (docs/**/*.md) run as written.

Every ```python block compiles. Every block runs in reading order against
one emulator, as a user runs them, in tests/examples/test_docs_in_order.py
(one interpreter for all of them). Here the blocks that name ``s3://`` URLs
run once more, each in its own interpreter against moto's S3 server (a
third-party S3, where the reading-order run has our emulator's S3 face):
``AWS_ENDPOINT_URL_S3`` points at moto, the buckets the block names exist,
and ``my-bucket/train/`` holds a few objects for the dataset examples.
Every block in a fresh interpreter and a fresh emulator, as this file once
ran them, cost the suite minutes and proved nothing the reading-order run
does not.

A block that is only a fragment says so with ``<!-- partial -->`` on the
line before it; it is compiled, not run, and there may be only a few.

The commands of the Command line page run too: tests/examples/test_cli_guide.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client
from aioflux.testing import Emulator, running_emulator

ROOT = Path(__file__).resolve().parents[2]
# README.md, then the site's pages (the helpers under docs/_hooks are no pages).
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                     if "_hooks" not in p.parts)]
PARTIAL = "<!-- partial -->"
MAX_PARTIAL = 2
BLOCK_TIMEOUT = 150.0
TRAIN_OBJECTS = 192
TRAIN_SIZE = 1024


@dataclass(frozen=True)
class Block:
    """One fenced ```python block of a page."""

    page: str  # relative to the repository, e.g. docs/guides/datasets.md
    section: str
    index: int  # within its section, from 1
    line: int
    code: str
    partial: bool

    @property
    def id(self) -> str:
        return f"{self.page}:{self.section}-{self.index}"


def python_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every ```python block, with its section and whether it is marked partial."""
    blocks: list[Block] = []
    lines = text.splitlines()
    section = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("# ", "## ")):
            section = line.lstrip("#").strip()
        if line.strip() == "```python":
            start = i
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            before = next((lines[k].strip() for k in range(start - 1, -1, -1)
                           if lines[k].strip()), "")
            index = 1 + sum(b.section == section for b in blocks)
            blocks.append(Block(page, section, index, start + 1,
                                textwrap.dedent("\n".join(lines[start + 1:j])) + "\n",
                                before == PARTIAL))
            i = j
        i += 1
    return blocks


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


BLOCKS = [b for path in PAGES for b in python_blocks(path.read_text(), _relative(path))]


def bucket_names(code: str) -> set[str]:
    """Buckets a block uses: ``gs://NAME`` URLs and the pages' ``my-bucket``."""
    names = set(re.findall(r"gs://([a-z0-9][a-z0-9._-]*)", code))
    if "my-bucket" in code.replace("s3://my-bucket", ""):
        names.add("my-bucket")
    return names


def s3_bucket_names(code: str) -> set[str]:
    """Buckets a block uses on S3: ``s3://NAME`` URLs."""
    return set(re.findall(r"s3://([a-z0-9][a-z0-9.-]*)", code))


def seed_s3(endpoint: str, buckets: set[str]) -> None:
    """Create ``buckets`` on moto; ``my-bucket/train/`` gets the training
    objects the gs blocks read."""
    from aioflux._core.concurrency.portal import call
    from aioflux._core.concurrency.window import gather_bounded
    from aioflux.s3 import S3Store

    async def seed() -> None:
        async with S3Store(endpoint=endpoint) as store:
            for name in buckets:
                await store.create_bucket(name)
            if "my-bucket" in buckets:
                await gather_bounded((store.write("my-bucket", f"train/sample-{i:04d}.bin",
                                                  bytes([i % 256]) * TRAIN_SIZE)
                                      for i in range(TRAIN_OBJECTS)), 32)

    call(seed())


def test_every_python_block_is_found() -> None:
    for path in PAGES:
        fences = sum(line.strip() == "```python" for line in path.read_text().splitlines())
        assert fences == sum(b.page == _relative(path) for b in BLOCKS), path
    assert len({b.page for b in BLOCKS}) >= 15
    assert len(BLOCKS) >= 30


def test_the_parser_reads_sections_fragments_and_indented_blocks() -> None:
    page = "# Title\n\n```python\nx = 1\n```\n\n## Part\n\n<!-- partial -->\n" \
           "```python\ny(\n```\n\n- item\n\n    ```python\n    z = 2\n    ```\n"
    blocks = python_blocks(page, "p.md")
    assert [(b.id, b.line, b.code, b.partial) for b in blocks] == [
        ("p.md:Title-1", 3, "x = 1\n", False), ("p.md:Part-1", 10, "y(\n", True),
        ("p.md:Part-2", 16, "z = 2\n", False)]


def test_partial_blocks_stay_few() -> None:
    # A marker elsewhere than right before a block would silently mark nothing.
    markers = sum(1 for path in PAGES for line in path.read_text().splitlines()
                  if line.strip() == PARTIAL)
    assert markers == sum(b.partial for b in BLOCKS)
    assert sum(b.partial for b in BLOCKS) <= MAX_PARTIAL, [b.id for b in BLOCKS if b.partial]


@pytest.fixture
def readme_emulator() -> Iterator[Emulator]:
    """A fresh emulator per block, for its gs:// parts."""
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture
def _fresh_moto(moto_s3: Any) -> None:
    """Forget every bucket moto holds, so the pages' bucket names can be reused."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_s3.endpoint}/moto-api/reset",
                                                  method="POST"))


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_python_block_compiles(block: Block) -> None:
    compile(block.code, f"{block.page}:{block.line}", "exec")


S3_BLOCKS = [b for b in BLOCKS if s3_bucket_names(b.code) and not b.partial]


def test_some_blocks_use_s3() -> None:
    # The moto runs below must not vanish with a page's rewording.
    assert len(S3_BLOCKS) >= 2


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)
@pytest.mark.parametrize("block", S3_BLOCKS, ids=[b.id for b in S3_BLOCKS])
def test_s3_block_runs_on_moto(block: Block, readme_emulator: Emulator, tmp_path: Path,
                               moto_s3: Any, _fresh_moto: None) -> None:
    for name in bucket_names(block.code):
        readme_emulator.create_bucket(name)
    if "my-bucket" in bucket_names(block.code):
        with Client(endpoint=readme_emulator.endpoint) as client:
            for i in range(TRAIN_OBJECTS):
                client.write("my-bucket", f"train/sample-{i:04d}.bin",
                             bytes([i % 256]) * TRAIN_SIZE)
    seed_s3(moto_s3.endpoint, s3_bucket_names(block.code))
    env = {**os.environ, "STORAGE_EMULATOR_HOST": readme_emulator.endpoint,
           # s3:// URLs: moto's S3 server, as AWS_ENDPOINT_URL_S3 points a job
           # at an S3-compatible store; each block gets fresh buckets.
           "AWS_ENDPOINT_URL_S3": moto_s3.endpoint,
           # Hugging Face datasets' caches, not the home folder's.
           "HF_HOME": str(tmp_path / "hf")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONPATH"] = path
    # Run as a script file, so DataLoader workers under spawn can re-import it.
    script = tmp_path / "doc_block.py"
    script.write_text(block.code)
    proc = subprocess.run([sys.executable, str(script)],
                          cwd=tmp_path, env=env, text=True, capture_output=True,
                          timeout=BLOCK_TIMEOUT, check=False)
    assert proc.returncode == 0, (
        f"{block.page} line {block.line} ({block.section}) failed, exit {proc.returncode}\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr
