"""README.md and the site's pages run in reading order against ONE emulator.

Getting started tells a user to start the bundled emulator once, seed
``my-bucket/train/`` and then run the examples; a user reads the README
first and then the site in the order of its navigation (mkdocs.yml's
``nav``). tests/examples/test_readme.py gives each block a fresh emulator,
so it cannot see two pages that write the same checkpoint run, a page that
reads what another left, or a bucket the documented emulator command does
not create. This test does what the user does:

- it runs Getting started's set-up block line by line (the emulator command
  as written but on free ports, its ``export`` lines pointed at them, the
  ``python -c`` seeding and ``aioflux cp``), and checks the README's set-up
  is the same, so both pages start the same emulator;
- it then runs every ``python`` block of README.md and of the nav's pages
  in that order, each as a script (``__main__``) in this one interpreter,
  against that one emulator, and reports every block that failed;
- it runs them all a second time, as a user runs an example again: an
  example that resumes, saves a step or writes a dataset must find what its
  first run (and the examples after it) left and still pass;
- a folder or brace pattern of ``my-bucket`` that a block reads (a URL
  ending in ``/``, or one with a ``{a..b}`` range) holds no object another
  block wrote: each example writes under its own prefix, as Getting
  started says;
- the Hub's pages read ``hf://`` repos from a fake Hub (``HF_ENDPOINT``
  pointed at it) that holds the repos and Parquet files they name.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux import Client
from aioflux._api import stores
from aioflux._core.concurrency.portal import call
from aioflux._engines.shards import expand_braces
from aioflux.cli import main as cli_main
from aioflux.testing import FakeHub
from aioflux.testing._serve import S3_READY_PREFIX
from tests.examples.test_readme import Block, python_blocks

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = ROOT / "mkdocs.yml"
START = ROOT / "docs" / "getting-started.md"
SETUP_SECTION = "## Run the emulator"
# How long the emulator gets to print its two endpoints.
START_WAIT = 60.0


def reading_order(mkdocs_yml: str) -> list[str]:
    """README.md, then every page of the nav in its order (docs/-relative
    paths made repository-relative)."""
    nav = mkdocs_yml.split("\nnav:", 1)[1]
    pages = re.findall(r"(?m)^\s*-\s+(?:[^\n]*?:\s+)?([\w./-]+\.md)\s*$", nav)
    return ["README.md", *(f"docs/{page}" for page in pages)]


def setup_lines(text: str, section: str) -> list[str]:
    """The commands of the first code block after ``section``: comments and
    a trailing ``&`` cut off, blank lines left out."""
    after = text.split(f"\n{section}\n", 1)[1]
    block = after.split("```", 2)[1]
    lines = []
    for line in block.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line.endswith("&"):
            line = line[:-1].strip()
        if line:
            lines.append(line)
    return lines


def test_reading_order_follows_the_nav() -> None:
    order = reading_order("site_name: x\nnav:\n  - Home: index.md\n  - Guides:\n"
                          "      - A: guides/a.md\n      - \"b: c\": guides/b.md\n"
                          "  - API reference:\n      - reference/index.md\n")
    assert order == ["README.md", "docs/index.md", "docs/guides/a.md", "docs/guides/b.md",
                     "docs/reference/index.md"]


def test_every_page_with_python_is_in_the_order() -> None:
    order = reading_order(MKDOCS.read_text())
    assert len(order) == len(set(order))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")
             if "_hooks" not in p.parts and "```python" in p.read_text()}
    assert pages and pages <= set(order), sorted(pages - set(order))


def test_the_readme_starts_the_emulator_getting_started_does() -> None:
    # One emulator on port 9023 serves both pages only if both start it the
    # same way: a user who followed the README keeps it running.
    readme = setup_lines((ROOT / "README.md").read_text(), "## Quick start")
    assert readme == setup_lines(START.read_text(), SETUP_SECTION)


class DocumentedEmulator:
    """Getting started's set-up, run as written, on free ports."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.proc: subprocess.Popen[str] | None = None
        self.endpoints: dict[str, str] = {}  # documented port -> the running endpoint

    def start(self) -> None:
        """Run the emulator line (the only one that stays running)."""
        [line] = [line for line in self.lines if line.startswith("aioflux emulator")]
        argv = shlex.split(line)[2:]
        ports = {}
        for flag in ("--port", "--s3-port"):
            if flag in argv:
                i = argv.index(flag) + 1
                ports[flag], argv[i] = argv[i], "0"
        self.proc = subprocess.Popen([sys.executable, "-m", "aioflux", "emulator", *argv],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        gcs = self.proc.stdout.readline()
        assert "listening on" in gcs, f"the documented emulator did not start: {gcs!r}"
        self.endpoints[ports["--port"]] = gcs.split()[-1]
        if "--s3-port" in ports:
            s3 = self.proc.stdout.readline()
            assert s3.startswith(S3_READY_PREFIX), s3
            self.endpoints[ports["--s3-port"]] = s3.split()[-1]

    def run_the_rest(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The ``export``, ``python -c`` and ``aioflux`` lines, in order."""
        for line in self.lines:
            if line.startswith("aioflux emulator"):
                continue
            if line.startswith("export "):
                name, value = line.removeprefix("export ").split("=", 1)
                for port, endpoint in self.endpoints.items():
                    value = value.replace(f"http://127.0.0.1:{port}", endpoint)
                assert "127.0.0.1:90" not in value, f"{line!r}: no emulator on that port"
                monkeypatch.setenv(name, value)
            elif line.startswith("python "):
                subprocess.run([sys.executable, *shlex.split(line)[1:]], check=True)
            elif line.startswith("aioflux "):
                assert cli_main(shlex.split(line)[1:]) == 0, line
            else:
                raise AssertionError(f"the set-up has a line this test cannot run: {line!r}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)
            assert self.proc.stdout is not None
            self.proc.stdout.close()


@pytest.fixture
def documented_emulator(tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> Iterator[DocumentedEmulator]:
    """The emulator of Getting started, seeded as it says, the working
    directory a fresh folder (the set-up writes ``train/`` there)."""
    monkeypatch.chdir(tmp_path)
    # Hugging Face datasets' caches (docs/guides/fsspec.md), not the home folder's.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # No default store yet, as in the user's new interpreter: one an earlier
    # test of this process built without STORAGE_EMULATOR_HOST sent the DCP
    # block to GCS itself (seen once, in a full run).
    monkeypatch.setattr(stores, "_defaults", {})
    emulator = DocumentedEmulator(setup_lines(START.read_text(), SETUP_SECTION))
    try:
        emulator.start()
        emulator.run_the_rest(monkeypatch)
        yield emulator
    finally:
        for pid, store in stores._defaults.values():
            if pid == os.getpid():
                call(store.aclose())
        emulator.stop()


# The Hub repos and files the pages' blocks read (docs/guides/hub.md).
HUB_FILES = {"HuggingFaceFW/fineweb-edu": ["sample/10BT/000_00000.parquet",
                                           "sample/10BT/001_00000.parquet"],
             "org/name": ["data/train-00000.parquet"]}


def parquet_file(rows: int) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": list(range(rows)), "text": [f"row {i}" for i in range(rows)]}),
                   sink)
    return bytes(sink.getvalue().to_pybytes())


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A fake Hub holding ``HUB_FILES`` (Parquet, large enough to be LFS
    files on its CDN), ``HF_ENDPOINT`` pointed at it, no token."""
    with FakeHub() as hub:
        for repo_id, paths in HUB_FILES.items():
            hub.create_repo(repo_id)
            hub.push(repo_id, {path: parquet_file(1000 + i) for i, path in enumerate(paths)})
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield hub


def ordered_blocks() -> list[Block]:
    return [block for page in reading_order(MKDOCS.read_text())
            for block in python_blocks((ROOT / page).read_text(), page)
            if not block.partial]


# The warning filters of `python script.py` (no -W, no -X dev): a script's
# user sees a library's FutureWarning printed, not raised.
SCRIPT_FILTERS = (("default", DeprecationWarning, "__main__"),
                  ("ignore", DeprecationWarning, ""), ("ignore", PendingDeprecationWarning, ""),
                  ("ignore", ImportWarning, ""), ("ignore", ResourceWarning, ""))
AIOFLUX = str(ROOT / "aioflux")


def run_block(block: Block, folder: Path, *, warned_fails: bool = True) -> str | None:
    """Run ``block`` as a script; None, or what went wrong.

    Warnings are a script's (pytest's turn them into errors): what aioflux
    or the block itself warns is reported (unless ``warned_fails`` is
    False), a dependency's is only printed, as the user would see it."""
    # A file, as a user saves it: tracebacks name its lines, and DataLoader
    # workers under spawn could re-import it.
    script = folder / f"{re.sub(r'[^A-Za-z0-9]+', '_', block.id)}.py"
    script.write_text(block.code)
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        for action, category, module in reversed(SCRIPT_FILTERS):
            warnings.filterwarnings(action, category=category, module=module)
        try:
            runpy.run_path(str(script), run_name="__main__")
        except Exception as exc:  # every failure is reported, then the next block runs
            return "".join(traceback.format_exception(exc))
    ours = [w for w in caught if warned_fails
            and w.filename.startswith((AIOFLUX, str(script)))]
    for w in caught:
        if w not in ours:
            print(warnings.formatwarning(w.message, w.category, w.filename, w.lineno),
                  file=sys.stderr)
    if ours:
        return "warned:\n" + "".join(warnings.formatwarning(w.message, w.category, w.filename,
                                                            w.lineno) for w in ours)
    return None


BUCKET = "my-bucket"


def read_prefixes(code: str) -> list[str]:
    """The names of ``my-bucket`` a block reads as a set: the folders it
    names (``gs://my-bucket/text/``) and the names its brace patterns expand
    to (each a prefix too, so a shard's ``.idx`` counts)."""
    out = []
    for url in re.findall(rf"(?:gs|s3)://{BUCKET}/([^\s\"']*)", code):
        if re.search(r"\{[^{}]*(\.\.|,)[^{}]*\}", url):
            out += expand_braces(url)
        elif url.endswith("/"):
            out.append(url)
    return list(dict.fromkeys(out))


def test_read_prefixes_are_folders_and_patterns() -> None:
    code = ('a = "gs://my-bucket/text/"; b = f"gs://my-bucket/x/{n:03d}.tar"\n'
            'c = "s3://my-bucket/s-{0..1}.tar"; d = "gs://my-bucket/one.bin"\n')
    assert read_prefixes(code) == ["text/", "s-0.tar", "s-1.tar"]


def objects(endpoint: str) -> dict[str, int]:
    """``my-bucket``'s objects: name -> generation."""
    with Client(endpoint=endpoint) as client:
        return {o.name: o.generation for o in client.list_objects(BUCKET)}


@pytest.mark.timeout(600)
def test_the_pages_run_in_reading_order_against_one_emulator(
        documented_emulator: DocumentedEmulator, fake_hub: FakeHub, tmp_path: Path) -> None:
    blocks = ordered_blocks()
    assert len(blocks) >= 30
    scripts = tmp_path / "blocks"
    scripts.mkdir()
    endpoint = os.environ["STORAGE_EMULATOR_HOST"]
    failures = []
    writers: dict[str, set[str]] = {}  # object name -> the blocks that wrote it
    for run in ("first", "second"):
        before = objects(endpoint)
        for block in blocks:
            cwd = os.getcwd()
            # The second run's warnings are printed, not failures: a re-save
            # into a DCP checkpoint makes torch warn that it overwrites.
            problem = run_block(block, scripts, warned_fails=run == "first")
            os.chdir(cwd)
            if problem is not None:
                failures.append(f"{block.page} line {block.line} ({block.section}), "
                                f"{run} run:\n{problem}")
            after = objects(endpoint)
            if run == "first":
                for name, generation in after.items():
                    if before.get(name) != generation:
                        writers.setdefault(name, set()).add(block.id)
            before = after
    for block in blocks:
        for prefix in read_prefixes(block.code):
            others = sorted({w for name, ws in writers.items() if name.startswith(prefix)
                             for w in ws} - {block.id})
            if others:
                failures.append(f"{block.page} line {block.line} ({block.section}) reads "
                                f"gs://{BUCKET}/{prefix}, where other blocks write: {others}")
    asked = " ".join(r.path for r in fake_hub.sent("hub"))
    failures += [f"no block read the fake Hub's {repo_id}" for repo_id in HUB_FILES
                 if f"/{repo_id}/" not in asked]
    assert not failures, (f"{len(failures)} failures of {len(blocks)} blocks run twice in "
                          "reading order against one emulator:\n\n" + "\n\n".join(failures))
