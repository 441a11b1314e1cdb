"""A connection string's blob endpoint is checked as ``endpoint=`` is.

Requests carry the SAS its account key signs, appended to that endpoint:
one with a query, a ``user:password@``, a scheme other than http(s) or a
bad port once passed unchecked, showed its query or password in the
store's repr and, with a typo'd scheme, failed in aiohttp with the whole
request URL, the signature included, as its text.
"""

from __future__ import annotations

import pytest

from aioflux import InvalidURL
from aioflux.azure import AzureStore
from aioflux.azure._config import AZURITE_KEY, resolve

SECRET = "CSsecret0sig"
BAD = {
    "query": f"http://127.0.0.1:1/acct?sv=2020&sig={SECRET}",
    "userinfo": f"http://user:{SECRET}@127.0.0.1:1/acct",
    "scheme": "htps://127.0.0.1:1/acct",
    "ftp": "ftp://127.0.0.1:1/acct",
    "port": "http://127.0.0.1:99999/acct",
    "scheme-and-query": f"ftp://127.0.0.1:1/acct?sig={SECRET}",
}


@pytest.mark.parametrize("endpoint", BAD.values(), ids=list(BAD))
def test_a_bad_blob_endpoint_is_refused_without_its_secret(
        endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = f"AccountName=acct;AccountKey={AZURITE_KEY};BlobEndpoint={endpoint}"
    with pytest.raises(InvalidURL, match="connection string's blob endpoint") as info:
        AzureStore(connection_string=text)
    assert SECRET not in str(info.value) and AZURITE_KEY not in str(info.value)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", text)
    with pytest.raises(InvalidURL) as info:
        AzureStore()
    assert SECRET not in str(info.value)


def test_a_bad_default_endpoints_protocol_is_refused() -> None:
    with pytest.raises(InvalidURL, match=r"'htps://acct\.blob\.core\.windows\.net'"):
        resolve(None, None, f"DefaultEndpointsProtocol=htps;AccountName=acct;"
                f"AccountKey={AZURITE_KEY}", None, None)


def test_a_blob_endpoint_in_either_form_endpoint_takes() -> None:
    got = resolve(None, None, "BlobEndpoint=127.0.0.1:10000/acct/;SharedAccessSignature=sv=1",
                  None, None)
    assert (got.account, got.endpoint) == ("acct", "http://127.0.0.1:10000/acct")
