"""The install instructions of README.md and the site work as written.

aioflux has no release on the package index yet, so a page that says
``pip install aioflux-storage`` sends a newcomer to an error: every install
of aioflux the pages show is from a checkout (``pip install -e .``,
``pip install ".[s3]"``) with extras pyproject.toml defines. torch's pin
gets the CUDA build from the package index on Linux: the README shows the
CPU wheel index for the pinned version, beside its two set-up commands.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                     if "_hooks" not in p.parts)]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip_commands(text: str) -> list[str]:
    """Every ``pip install ...`` / ``pip download ...`` a page shows: lines of
    its code blocks and inline code spans (line breaks inside a span joined)."""
    commands = []
    fences = text.split("```")
    for i, part in enumerate(fences):
        if i % 2:  # inside a fenced block
            commands += [line.strip() for line in part.splitlines()
                         if re.match(r"\s*(python -m )?pip (install|download)\b", line)]
        else:
            for span in re.findall(r"`([^`]+)`", part):
                span = " ".join(span.split())
                if re.match(r"(python -m )?pip (install|download)\b", span):
                    commands.append(span)
    return commands


def extras() -> set[str]:
    """The names of pyproject.toml's optional dependencies (no tomllib: 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"(?m)^([a-z][a-z0-9-]*)\s*=\s*\[", section))


def test_the_parser_finds_commands_in_blocks_and_spans() -> None:
    page = "Run `pip install\n  -e \".[s3]\"` first.\n\n```\npip install torch  # x\n" \
           "echo pip install no\n```\n`pip` alone\n"
    assert pip_commands(page) == ['pip install -e ".[s3]"', 'pip install torch  # x']


def test_no_page_installs_the_unreleased_distribution_by_name() -> None:
    named = [(page.relative_to(ROOT).as_posix(), command)
             for page in PAGES for command in pip_commands(page.read_text())
             if "aioflux-storage" in command or re.search(r"\binstall\s+\"?aioflux\b",
                                                          command)]
    assert not named, named


def test_the_checkout_installs_name_extras_that_exist() -> None:
    defined = extras()
    assert {"s3", "azure", "zstd", "fsspec", "docs", "test"} <= defined
    used = set()
    for page in PAGES:
        for command in pip_commands(page.read_text()):
            for group in re.findall(r"\.\[([a-z0-9,-]+)\]", command):
                used.update(group.split(","))
    assert used and used <= defined, used - defined


def test_the_install_pages_show_the_checkout_install() -> None:
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        commands = pip_commands(page.read_text())
        assert "pip install -e ." in [c.split("#")[0].strip() for c in commands], page
        assert any(c.startswith("git clone ") for c in page.read_text().splitlines()), page


def test_the_readme_shows_the_cpu_wheel_of_its_torch_pin() -> None:
    readme = (ROOT / "README.md").read_text()
    demo = readme.split("<!-- demo-command -->", 1)[1].split("<!-- /demo-command -->", 1)[0]
    (pin,) = re.findall(r"torch==([\d.]+)", demo)
    cpu = f"pip install torch=={pin} --index-url {CPU_INDEX}"
    assert cpu in pip_commands(readme)
    assert "gets the CPU build" not in readme  # the pin alone gets CUDA's on Linux
    start = (ROOT / "docs" / "getting-started.md").read_text()
    assert any(CPU_INDEX in c for c in pip_commands(start))


README_MAX_LINES = 250


def test_the_readme_stays_short() -> None:
    # The full performance tables are on docs/performance.md, which it names
    # (as a path: the package index shows the README, where a relative link breaks).
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < README_MAX_LINES
    assert "performance page (`docs/performance.md`)" in readme


def test_the_readme_shows_the_clone_and_the_cpu_build_before_the_set_up() -> None:
    # A newcomer runs the set-up commands as they come: they need the
    # checkout first, and the CPU wheel before the pin fetches CUDA's.
    lines = (ROOT / "README.md").read_text().splitlines()
    demo = lines.index("<!-- demo-command -->")
    clone = next(i for i, line in enumerate(lines) if line.startswith("git clone "))
    cpu = next(i for i, line in enumerate(lines) if CPU_INDEX in line)
    cd = next(i for i, line in enumerate(lines) if re.search(r"(^|&& )cd ", line))
    assert clone <= cd and clone < cpu < demo, (clone, cd, cpu, demo)


def test_getting_started_asks_for_no_package_pip_brings() -> None:
    # numpy is a dependency of aioflux: `pip install -e .` brings it.
    assert re.search(r'(?m)^\s*"numpy[<>=]', (ROOT / "pyproject.toml").read_text())
    install = (ROOT / "docs" / "getting-started.md").read_text().split("\n## ", 2)[1]
    assert "numpy" not in install
