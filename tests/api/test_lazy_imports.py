"""``import aioflux`` and the ``aioflux`` command import what they use when
they use it: ``import aioflux`` took ~1.3 s and ``aioflux --version``
1.7-2.2 s on a loaded machine, importing aiohttp, the stores and every
command. Checked by the modules imported, not by a clock."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import aioflux
from aioflux.cli._registry import COMMANDS, HOMES

# What aioflux's names bring, none of which `import aioflux` or a
# command's start-up may import before it is used.
HEAVY = ("aiohttp", "asyncio", "numpy", "google_crc32c", "httptools", "yarl", "multidict", "ssl",
         "concurrent.futures", "botocore", "torch", "zstandard", "importlib.metadata",
         "dataclasses", "typing")


def _imported(code: str) -> list[str]:
    """The modules ``code`` imports, in a fresh interpreter (those of its
    start-up left out)."""
    probe = ("import json, sys\nbefore = set(sys.modules)\n"
             "try:\n" + "".join(f"    {line}\n" for line in code.splitlines()) +
             "except SystemExit:\n    pass\n"
             "print(json.dumps(sorted(set(sys.modules) - before)), file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, check=True)
    return list(json.loads(result.stderr.splitlines()[-1]))


def test_import_aioflux_imports_nothing_else() -> None:
    assert _imported("import aioflux") == ["aioflux"]


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["nosuchcommand"], []])
def test_version_help_and_usage_errors_import_no_command(argv: list[str]) -> None:
    imported = _imported(f"from aioflux.cli import main\nmain({argv!r})")
    assert not [m for m in imported if m.startswith(HEAVY)], imported
    assert {m for m in imported if m.startswith("aioflux")} == {
        "aioflux", "aioflux.cli", "aioflux.cli._main", "aioflux.cli._registry",
        "aioflux.cli._text", *(["aioflux._version"] if argv == ["--version"] else [])}


def test_a_command_imports_its_own_module_only(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"x")
    imported = _imported(f"from aioflux.cli import main\nmain(['ls', {str(tmp_path)!r}])")
    commands = {m for m in imported if m.startswith("aioflux.cli._")} - {
        "aioflux.cli._main", "aioflux.cli._registry", "aioflux.cli._text",
        "aioflux.cli._common", "aioflux.cli._signals"}
    assert commands == {"aioflux.cli._objects"}
    assert "torch" not in imported


def test_every_command_lives_where_the_table_says() -> None:
    from aioflux.cli import build_parser

    build_parser()  # every command's module imported
    assert set(COMMANDS) == set(HOMES)
    for name, home in HOMES.items():
        assert COMMANDS[name].run.__module__ == f"aioflux.cli.{home.module}", name


def test_the_lazy_table_is_what_mypy_reads() -> None:
    # The imports under TYPE_CHECKING are what mypy and IDEs see; _HOMES is
    # what __getattr__ imports. They must name the same objects.
    tree = ast.parse(Path(aioflux.__file__).read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If)
                and ast.unparse(n.test) == "TYPE_CHECKING"]
    read = {alias.name: "." * node.level + (node.module or "")
            for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names
            if alias.name not in {*aioflux._DEPRECATED, *aioflux._ALIASES}}
    assert read == aioflux._HOMES
    assert set(read) == set(aioflux.__all__)


@pytest.mark.parametrize("name", sorted(aioflux.__all__))
def test_each_name_is_its_homes(name: str) -> None:
    home = importlib.import_module(aioflux._HOMES[name], "aioflux")
    assert getattr(aioflux, name) is getattr(home, name)
    assert name in dir(aioflux)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Cilent'"):
        aioflux.Cilent  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(aioflux, "TYPE_CHECKING")


def test_the_stores_classes_import_no_extra() -> None:
    # The s3 and azure extras are imported when a store is built, not when
    # its class is named.
    imported = _imported("import aioflux\nfor name in ('GcsStore', 'S3Store', 'AzureStore', "
                         "'LocalStore', 'HttpStore', 'SyncStore', 'Client'):\n"
                         "    getattr(aioflux, name)")
    assert not [m for m in imported if m.startswith(("botocore", "azure", "torch"))], imported
