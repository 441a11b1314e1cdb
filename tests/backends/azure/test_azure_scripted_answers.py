"""Azure store defects found in review, each pinned by a scripted server or
the settings alone: an account key that cannot sign is the failing call's
error (named by its operation, container and blob), a listing page with a
size that is no number is a ProtocolError, and an account's secondary or
IPv6 endpoint names the account the key signs for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from aioflux import PermissionDenied, ProtocolError
from aioflux.azure._config import resolve
from tests.backends.azure.test_azure_bad_servers import Script, _page, http, store_at
from tests.servers.azurite import KEY


async def test_a_key_that_cannot_sign_is_the_failing_calls_error() -> None:
    # The SAS is signed outside the auth's headers: its failure named no
    # call ("az: the account key of 'acct' cannot sign a SAS"), where every
    # other credential failure names the request it stopped.
    server = Script(lambda m, t, h: http("500 Internal Server Error"))
    async with server as base, store_at(base, sas_token=None, account="acct",
                                        account_key="not base64!") as store:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "read az://ctr/o": lambda: store.read("ctr", "o"),
            "stat az://ctr/o": lambda: store.stat("ctr", "o"),
            "write az://ctr/w": lambda: store.write("ctr", "w", b"x"),
            "list az://ctr/pre/": lambda: store.list("ctr", "pre/").__anext__()}
        for named, call in calls.items():
            with pytest.raises(PermissionDenied, match="not base64") as denied:
                await call()
            failed = denied.value
            operation, url = named.split(" ")
            assert (failed.operation, failed.bucket, failed.name) == (
                operation, "ctr", url.removeprefix("az://ctr/")), named
            assert str(failed).startswith(named), str(failed)
            assert "not base64!" not in str(failed)
    assert server.requests == []  # nothing unsigned went out


@pytest.mark.parametrize("size", ["\u00b2", "\u0661\u0662", "9" * 5000, "-1", " 1"],
                         ids=["superscript", "arabic-indic", "5000-digits", "negative", "space"])
async def test_a_listed_size_that_is_no_decimal_number_is_a_protocol_error(size: str) -> None:
    # "²".isdigit() is True, and int("²") a ValueError, as is int() of 5,000
    # digits; "١٢" (Arabic-Indic digits) is int 12: none is a Content-Length
    # Azure writes. Each raised a bare ValueError out of the listing.
    page = _page("a").replace(b"<Content-Length>1<", f"<Content-Length>{size}<".encode())
    server = Script(lambda m, t, h: http("200 OK", page))
    async with server as base, store_at(base) as store:
        with pytest.raises(ProtocolError, match="Content-Length") as refused:
            [o async for o in store.list_objects("ctr")]
    assert refused.value.bucket == "ctr"


@pytest.mark.parametrize("host", ["acct-secondary", "acct-ipv6", "acct-dualstack",
                                  "acct-secondary-ipv6"])
def test_a_secondary_or_ipv6_endpoint_names_its_account(host: str) -> None:
    # Account names are letters and digits: "-secondary" (read-access
    # geo-redundant storage) and "-ipv6" / "-dualstack" name endpoints of
    # the account before the '-'. Taken whole, the account key signed every
    # SAS for an account that does not exist (403 on every request), and
    # the account's own key in the environment was not used.
    from azure.storage.blob import BlobServiceClient

    endpoint = f"https://{host}.blob.core.windows.net"
    assert BlobServiceClient(endpoint).account_name == "acct"  # the SDK's reading
    assert resolve(None, endpoint, None, KEY, None).account == "acct"
    text = f"BlobEndpoint={endpoint}/;SharedAccessSignature=sv=2020&sig=abc%3D"
    assert resolve(None, None, text, None, None).account == "acct"
    assert BlobServiceClient.from_connection_string(text).account_name == "acct"


def test_the_environments_key_serves_its_accounts_secondary_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    got = resolve(None, "https://acct-secondary.blob.core.windows.net", None, None, None)
    assert (got.account, got.account_key) == ("acct", KEY)
    # Another account's endpoint still gets none of it.
    other = resolve(None, "https://other-secondary.blob.core.windows.net", None, None, None)
    assert (other.account, other.account_key) == ("other", None)


def test_a_connection_string_naming_secondary_endpoints_is_read() -> None:
    # BlobSecondaryEndpoint and its queue, table and file twins are Azure's
    # (every SDK reads them since 2017): refused as "not one Azure
    # defines", a read-access geo-redundant account's string could not be used.
    from azure.storage.blob import BlobServiceClient

    text = (f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
            "BlobEndpoint=https://acct.blob.core.windows.net/;"
            "BlobSecondaryEndpoint=https://acct-secondary.blob.core.windows.net/;"
            "QueueEndpoint=https://acct.queue.core.windows.net/;"
            "QueueSecondaryEndpoint=https://acct-secondary.queue.core.windows.net/;"
            "TableSecondaryEndpoint=https://acct-secondary.table.core.windows.net/;"
            "FileSecondaryEndpoint=https://acct-secondary.file.core.windows.net/")
    sdk = BlobServiceClient.from_connection_string(text)
    ours = resolve(None, None, text, None, None)
    assert (ours.account, ours.endpoint, ours.account_key) == (
        sdk.account_name, sdk.primary_endpoint.rstrip("/"), KEY)


async def test_a_head_without_a_length_is_no_empty_blob() -> None:
    # A HEAD has no body to count: a missing Content-Length read as 0 made
    # a stat call a blob empty, and a reader of it read nothing. (A
    # malformed one the HTTP parser refuses itself.)
    def answer(method: str, target: str, head: bytes) -> tuple[bytes, str]:
        lines = ["HTTP/1.1 200 OK", 'ETag: "0x8DC0000000000A1"', "x-ms-blob-type: BlockBlob"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode(), "close"

    async with Script(answer) as base, store_at(base) as store:
        with pytest.raises(ProtocolError, match=r"^stat az://ctr/o failed: .*Content-Length"):
            await store.stat("ctr", "o")
