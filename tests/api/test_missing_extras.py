"""Without the s3 extra, an s3:// store names the extra and the package that
is missing, for what it is used, whatever the store is then asked to do (a
read as much as a listing). Each package is made unimportable in-process."""

from __future__ import annotations

import sys

import pytest

from aioflux import InvalidArgument
from aioflux._net import xml_answers
from aioflux.s3 import S3Store

HINT = 'pip install "aioflux-storage[s3]"'


@pytest.mark.parametrize(("modules", "package"), [
    (("lxml", "lxml.etree"), "lxml"),
    (("botocore.session", "botocore.credentials"), "botocore"),
    (("awscrt.auth", "awscrt.http"), "awscrt"),
])
def test_a_missing_package_of_the_s3_extra_is_named(monkeypatch: pytest.MonkeyPatch,
                                                    modules: tuple[str, ...],
                                                    package: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    xml_answers._etree.cache_clear()
    try:
        with pytest.raises(InvalidArgument) as info:
            S3Store(endpoint="http://127.0.0.1:9", region="us-east-1")
    finally:
        xml_answers._etree.cache_clear()
    message = str(info.value)
    assert f"{package}, for " in message and "s3 extra" in message and HINT in message
    # A store is made before any use: it must not claim to be about listings.
    assert "listing" not in message
    for other in {"lxml", "botocore", "awscrt"} - {package}:
        assert f"{other}, for " not in message


@pytest.mark.parametrize(("modules", "package", "settings"), [
    (("lxml", "lxml.etree"), "lxml", {"sas_token": "sv=1&sig=x"}),
    (("azure.storage.blob",), "azure-storage-blob", {"account_key": "a2V5"}),
    (("azure.identity",), "azure-identity", {}),
])
def test_a_missing_package_of_the_azure_extra_is_named(monkeypatch: pytest.MonkeyPatch,
                                                       modules: tuple[str, ...], package: str,
                                                       settings: dict[str, str]) -> None:
    from aioflux.azure import AzureStore

    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    xml_answers._etree.cache_clear()
    try:
        with pytest.raises(InvalidArgument) as info:
            AzureStore(endpoint="https://acct.blob.core.windows.net", **settings)
    finally:
        xml_answers._etree.cache_clear()
    message = str(info.value)
    assert f"{package}, for " in message and "azure extra" in message
    assert 'pip install "aioflux-storage[azure]"' in message
    assert "a2V5" not in message and "sig=x" not in message
