"""What ``help()`` shows of the public API: every store's URLs where a
function takes URLs, ``client=`` for every scheme, and no Sphinx role
printed raw (``help(aioflux.open)`` left out ``az://``, said ``client`` was
"for gs:// URLs" and showed ``:class:`io.TextIOWrapper```)."""

from __future__ import annotations

import inspect
import pydoc
import re
from collections.abc import Iterator

import pytest

import aioflux

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`")
URL_FUNCTIONS = ["open", "list_files", "alist_files", "load_files", "aload_files"]


def _help(obj: object) -> str:
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


@pytest.mark.parametrize("name", URL_FUNCTIONS)
def test_url_functions_name_every_store_and_its_client(name: str) -> None:
    text = _help(getattr(aioflux, name))
    assert "gs:// URLs" not in text and "for ``gs://``" not in text, text
    client = text[text.index("client:"):].split("\n\n")[0]
    for store in ("AsyncClient", "S3Store", "AzureStore", "Client"):
        assert store in client, client
    for scheme in ("gs://", "s3://", "az://", "file://"):
        assert scheme in text, (scheme, text)


def _public() -> Iterator[tuple[str, object]]:
    for name in sorted(aioflux.__all__):
        obj = getattr(aioflux, name)
        yield name, obj
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") or member == "__init__":
                    yield f"{name}.{member}", value


def test_no_public_docstring_shows_a_raw_sphinx_role() -> None:
    # The docs site turns the roles into links; help() prints them as typed.
    raw = {name: ROLE.findall(doc) for name, obj in _public()
           if isinstance(doc := getattr(obj, "__doc__", None), str) and ROLE.search(doc)}
    assert raw == {}
    assert not ROLE.search(_help(aioflux.open))
    assert not ROLE.search(_help(aioflux.Client))
