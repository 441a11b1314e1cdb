"""What a plain ``pip install aioflux-storage`` (no extras) brings is enough
for the runtime imports aioflux makes outside its optional extras.

The test extra installs more (requests among it), so a missing base
dependency never shows up as an ImportError in the test suite; these tests
read the installed distribution's metadata instead.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import aioflux.gcs._auth

DIST = "aioflux-storage"


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

