"""The layers are physical: imports point down, and no module is in a cycle.

Every ``import`` in the package is read from the source (lazy imports inside
functions and ``TYPE_CHECKING`` blocks included), so a shortcut taken at
run time shows up here too. ARCHITECTURE.md explains the layers.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import aioflux

PACKAGE = Path(aioflux.__file__).parent

# Lowest first. A module may import from its own layer group's package and
# from lower layers; packages sharing a row are siblings that must not
# import each other (a backend never reaches into another backend).
LAYERS: list[tuple[str, ...]] = [
    ("aioflux._version",),
    ("aioflux._core",),  # its top modules: errors, secrets, auth, metrics, deprecation
    ("aioflux._core.integrity", "aioflux._core.concurrency"),
    ("aioflux._core.records",),
    ("aioflux._core.checks", "aioflux._core.memory"),
    ("aioflux._core.settings",),
    ("aioflux._core.storage",),
    ("aioflux._core.rate",),
    ("aioflux._net",),
    ("aioflux._engines",),
    ("aioflux.gcs", "aioflux.local", "aioflux.s3", "aioflux.azure", "aioflux.http", "aioflux.hf"),
    ("aioflux._api", "aioflux.otel"),
    ("aioflux.torch.data", "aioflux.torch.checkpoint"),
    ("aioflux.torch", "aioflux.fsspec"),
    ("aioflux.testing",),
    ("aioflux.cli",),
    ("aioflux", "aioflux.__main__"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[ast.AST]:
    """Import nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                inside.update(ast.walk(child))
    return inside


def _imports(path: Path, *, annotations: bool = True) -> set[str]:
    """Every aioflux module ``path`` imports, resolved to absolute names;
    ``annotations=False`` leaves out ``if TYPE_CHECKING:`` imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if annotations else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "aioflux")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "aioflux":
                continue
            for alias in node.names:  # "from pkg import module" names a module
                if (PACKAGE.parent / (module + "." + alias.name).replace(".", "/")).with_suffix(
                        ".py").exists() or (PACKAGE.parent / (module + "." + alias.name).replace(
                        ".", "/") / "__init__.py").exists():
                    found.add(f"{module}.{alias.name}")
                else:
                    found.add(module)
    found.discard(name)
    return found


def _graph(*, annotations: bool = True) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, annotations=annotations)
            for p in sorted(PACKAGE.rglob("*.py"))}


def _group(module: str) -> tuple[int, str]:
    """(layer index, owning package) of a module: the longest match wins."""
    best: tuple[int, str] | None = None
    for index, row in enumerate(LAYERS):
        for package in row:
            if module == package or module.startswith(package + "."):
                if best is None or len(package) > len(best[1]):
                    best = (index, package)
    assert best is not None, f"{module} has no layer: add it to LAYERS"
    return best


def test_every_import_points_down_or_stays_in_its_package() -> None:
    wrong = []
    for module, deps in _graph().items():
        layer, home = _group(module)
        for dep in deps:
            dep_layer, dep_home = _group(dep)
            if dep_layer > layer or (dep_layer == layer and dep_home != home):
                wrong.append(f"{module} -> {dep}")
    assert not wrong, "imports that run up or across the layers:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles() -> None:
    # Among the imports that run: a module and the one that type-annotates
    # its parameters with it (``if TYPE_CHECKING:``) import nothing of each
    # other at run time. Such imports still must point down (test above).
    graph = _graph(annotations=False)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_walk_sees_lazy_and_type_checking_imports() -> None:
    # The guard is only as good as its parser: a function-level import and a
    # TYPE_CHECKING import are both edges.
    source = PACKAGE / "_engines" / "reader_blocks.py"
    assert "aioflux._core.concurrency.portal" in _imports(source)
    graph = _graph()
    assert any("aioflux._engines.zstd" in deps for deps in graph.values())


BACKENDS = next(row for row in LAYERS if "aioflux.gcs" in row)


def _store_class(path: str) -> bool:
    """Whether the dotted ``path`` (``aioflux.s3._store.S3Store``) names a store's class."""
    from aioflux._core.storage.base import StoreBase

    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(found, type) and issubclass(found, StoreBase)


def _backend_type_checks(source: str, module: str) -> list[str]:
    """The ``isinstance``/``issubclass`` calls of ``source`` (the module
    ``module``) that ask for a store class of a backend."""
    package = module.rpartition(".")[0]
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the backend's class or module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] \
                if node.level else []
            where = ".".join(base + ([node.module] if node.module else []))
            names = [(where + "." + a.name, a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            names = [(a.name, a.asname) if a.asname else (a.name.split(".")[0],) * 2
                     for a in node.names]
        else:
            continue
        bound.update((local, full) for full, local in names if full.split(".")[0] == "aioflux")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            for named in ast.walk(node.args[1]):
                if not isinstance(named, ast.Name | ast.Attribute):
                    continue
                first, _, rest = ast.unparse(named).partition(".")
                if first in bound and any(
                        (bound[first] + "." + rest).startswith(b + ".") for b in BACKENDS) \
                        and _store_class(f"{bound[first]}.{rest}".rstrip(".")):
                    found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
                    break
    return found


def test_nothing_above_the_stores_asks_a_stores_class() -> None:
    # What a store can do is its word (StoreFeatures, or a protocol such as
    # ReadsHere): a store of another package, or one wrapping aioflux's,
    # gets what it offers, and one declaring less is taken at its word.
    above = len(LAYERS) - LAYERS[::-1].index(BACKENDS)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if _group(module)[0] >= above:
            found += _backend_type_checks(path.read_text(), module)
    assert not found, "type checks on a backend's class:\n" + "\n".join(found)


def test_the_type_check_walk_sees_each_way_of_naming_a_backend() -> None:
    source = ("from ..local import LocalStore\n"
              "from aioflux.s3._store import S3Store as S3\n"
              "import aioflux.azure\n"
              "from .._core.storage.protocol import ReadsHere\n"
              "from ..local._reader import FileReader\n"
              "isinstance(a, LocalStore); isinstance(b, (int, S3))\n"
              "issubclass(c, aioflux.azure.AzureStore); isinstance(d, ReadsHere)\n"
              "isinstance(e, FileReader)\n")  # a backend's file, not its store
    found = _backend_type_checks(source, "aioflux.torch.dcp")
    assert [f.split(":")[1] for f in found] == ["6", "6", "7"]


@pytest.mark.parametrize("code", [
    "import aioflux",
    "import aioflux, aioflux.testing, aioflux.local",
    # zstd compression needs zstandard, not torch.
    "import io, aioflux\n"
    "from aioflux.testing import running_emulator\n"
    "with running_emulator() as emulator:\n"
    "    c = aioflux.Client(endpoint=emulator.endpoint)\n"
    "    c.create_bucket('bkt')\n"
    "    with aioflux.open('gs://bkt/x.zst', 'wb', client=c, compression='zstd') as f:\n"
    "        f.write(b'abc' * 1000)\n"
    "    with aioflux.open('gs://bkt/x.zst', 'rb', client=c, compression='zstd') as f:\n"
    "        assert f.read() == b'abc' * 1000\n",
])
def test_torch_is_never_imported_without_being_asked_for(code: str) -> None:
    pytest.importorskip("zstandard")
    check = code + "\nimport sys\nassert 'torch' not in sys.modules, 'torch was imported'\n"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
