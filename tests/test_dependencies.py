"""What a plain ``pip install aioflux-storage`` (no extras) brings is enough
for the runtime imports aioflux makes outside its optional extras, and
nothing it brings goes unused.

The test extra installs more (requests among it), so a missing base
dependency never shows up as an ImportError in the test suite; these tests
read the installed distribution's metadata instead.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import aioflux
import aioflux.gcs._auth

DIST = "aioflux-storage"

# Base dependencies aioflux never imports, and why each is one all the same.
NOT_IMPORTED = {
    # torch warns "Failed to initialize NumPy" at every import without it
    # (see the test below) and its object collectives need it.
    "numpy": "torch's numpy bridge",
}


def _base_requirements() -> list[Requirement]:
    """The requirements of ``DIST`` that apply without any extra."""
    reqs = [Requirement(line) for line in importlib.metadata.requires(DIST) or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _supplies(req: Requirement, dist: str) -> bool:
    """``req`` installs ``dist``: it is ``dist``, or one of its extras lists it."""
    if canonicalize_name(req.name) == canonicalize_name(dist):
        return True
    for line in importlib.metadata.requires(req.name) or []:
        sub = Requirement(line)
        if canonicalize_name(sub.name) == canonicalize_name(dist) and sub.marker is not None \
                and any(sub.marker.evaluate({"extra": extra}) for extra in req.extras):
            return True
    return False


def _google_auth_transports() -> set[str]:
    """The ``google.auth.transport.<name>`` modules ``aioflux.gcs._auth`` imports."""
    tree = ast.parse(inspect.getsource(aioflux.gcs._auth))
    prefix = "google.auth.transport."
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name[len(prefix):] for a in node.names if a.name.startswith(prefix)}
        elif isinstance(node, ast.ImportFrom) and node.module == "google.auth.transport":
            found |= {a.name for a in node.names}
    return found


def test_gcs_auth_transport_is_a_base_dependency() -> None:
    # google-auth needs, for ``google.auth.transport.X``, the library X, which
    # it leaves to its extra of the same name (requests, aiohttp, urllib3).
    transports = _google_auth_transports()
    assert transports == {"requests"}, transports  # the premise of the check below
    base = _base_requirements()
    for transport in transports:
        assert any(_supplies(req, transport) for req in base), (
            f"aioflux.gcs._auth imports google.auth.transport.{transport}, which needs "
            f"{transport!r}, but no base requirement of {DIST} installs it: "
            f"{[str(r) for r in base]}")



def _import_roots(dist: str) -> set[str]:
    """The modules ``dist`` installs: its top-level packages and modules, or
    for a namespace package (``google``), the packages under it."""
    files = [f for f in importlib.metadata.files(dist) or []
             if f.suffix in {".py", ".so", ".pyd"} and ".." not in f.parts
             and not f.parts[0].endswith((".dist-info", ".data"))]
    packages = {f.parts[0] for f in files if len(f.parts) == 2 and f.name == "__init__.py"}
    roots = set()
    for f in files:
        if len(f.parts) == 1:
            roots.add(f.name.split(".")[0])
        elif f.parts[0] in packages:
            roots.add(f.parts[0])
        else:
            roots.add(f"{f.parts[0]}.{f.parts[1].split('.')[0]}")
    return roots


def _aioflux_imports() -> set[str]:
    """Every absolute module name any module of aioflux imports (lazy ones too)."""
    found = set()
    for path in Path(aioflux.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_every_base_dependency_is_imported() -> None:
    # A dependency nothing imports is weight on every install (gcloud-aio-storage
    # pulled in cryptography, pyjwt, aiofiles, tenacity and chardet for nothing).
    imports = _aioflux_imports()
    base = {canonicalize_name(r.name) for r in _base_requirements()}
    assert set(NOT_IMPORTED) <= base, "a documented exception is no longer a dependency"
    for name in sorted(base - set(NOT_IMPORTED)):
        roots = _import_roots(name)
        assert roots, f"{name} is a base requirement of {DIST} but is not installed"
        used = {m for m in imports for root in roots if m == root or m.startswith(f"{root}.")}
        assert used, (f"{name} is a base requirement of {DIST}, but aioflux imports none of "
                      f"its modules ({sorted(roots)}): drop it, or say why in NOT_IMPORTED")


def test_numpy_is_a_base_dependency_because_torch_warns_without_it() -> None:
    # The premise, checked on the installed torch: without numpy a plain
    # `import torch` warns, in every user script, before aioflux could
    # filter anything. If torch stops warning, numpy may go.
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.partition('.')[0] == 'numpy':\n"
               "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
               "sys.meta_path.insert(0, Block())\n"
               "import torch\n")
    proc = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True,
                          timeout=110, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to initialize NumPy" in proc.stderr, proc.stderr
    assert "numpy" in {canonicalize_name(r.name) for r in _base_requirements()}
