"""The Azure store's settings, version tokens, redaction and the blob names
it refuses, without a server.

A connection string is read by aioflux itself (the SDK's parser is
private); it must give the account and endpoint azure-storage-blob's
public ``BlobServiceClient.from_connection_string`` gives, string for string.
"""

from __future__ import annotations

import pytest

from aioflux import InvalidArgument, InvalidURL, NotFound, StorageError
from aioflux._core.records.urls import validate_object_name
from aioflux.azure import AzureStore
from aioflux.azure._auth import KeySas, StaticSas, redact
from aioflux.azure._config import AZURITE_KEY, resolve
from aioflux.azure._xml import etag_of, generation_of, reversible

KEY = AZURITE_KEY
STRINGS = [
    f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
    f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
    "EndpointSuffix=core.windows.net",
    f"AccountName=acct;AccountKey={KEY}",
    f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
    "EndpointSuffix=core.chinacloudapi.cn",
    "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2020&sig=abc%3D",
    "UseDevelopmentStorage=true",
]


@pytest.mark.parametrize("text", STRINGS)
def test_connection_strings_read_as_the_sdk_reads_them(text: str) -> None:
    from azure.storage.blob import BlobServiceClient

    sdk = BlobServiceClient.from_connection_string(text)
    ours = resolve(None, None, text, None, None)
    assert ours.account == sdk.account_name
    assert ours.endpoint == sdk.primary_endpoint.split("?")[0].rstrip("/")
    if "AccountKey" in text or "UseDevelopmentStorage" in text:
        assert ours.account_key == KEY and ours.sas_token is None
    else:
        assert (ours.account_key, ours.sas_token) == (None, "sv=2020&sig=abc%3D")


def test_the_environment_the_azure_way(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidArgument, match="AZURE_STORAGE_ACCOUNT_NAME"):
        resolve(None, None, None, None, None)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x")
    got = resolve(None, None, None, None, None)
    assert (got.account, got.endpoint, got.sas_token) == (
        "acct", "https://acct.blob.core.windows.net", "sv=1&sig=x")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    got = resolve(None, None, None, None, None)
    assert (got.account_key, got.sas_token) == (KEY, None)  # a key first, as adlfs
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", STRINGS[0])
    assert resolve(None, None, None, None, None).endpoint == \
        "http://127.0.0.1:10000/devstoreaccount1"
    # The account of an emulator's endpoint is its first path segment.
    assert resolve(None, "http://127.0.0.1:9/devstoreaccount1", None, KEY, None).account == \
        "devstoreaccount1"


def test_another_accounts_credentials_in_the_environment_are_never_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A SAS signed for acctA would go to acctb's origin.
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", f"AccountName=acctA;AccountKey={KEY}")
    theirs = "https://acctb.blob.core.windows.net"
    for account, endpoint in ((None, theirs), ("acctb", None), ("acctb", theirs)):
        got = resolve(account, endpoint, None, None, None)
        assert (got.account, got.endpoint, got.account_key) == ("acctb", theirs, None)
    # The string's own account, named either way (any case), keeps its key.
    for account, endpoint in ((None, "https://accta.blob.core.windows.net"), ("accta", None)):
        assert resolve(account, endpoint, None, None, None).account_key == KEY
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "accta")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    for account, endpoint in (("acctb", None), (None, theirs)):
        got = resolve(account, endpoint, None, None, None)
        assert (got.account, got.account_key, got.sas_token) == ("acctb", None, None)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "sv=1&sig=x")
    assert resolve("acctb", None, None, None, None).sas_token is None
    assert resolve("accta", None, None, None, None).sas_token == "sv=1&sig=x"


def test_a_bad_connection_string_is_named_by_its_field_never_its_values() -> None:
    for text, named in ((f"AccountName=a;AccountKey={KEY};Nonsense", "(no '=')"),
                        (f"AccountKey={KEY};Bogus=1", "'Bogus'"),
                        (f"AccountKey={KEY}", "neither AccountName nor BlobEndpoint")):
        with pytest.raises(InvalidArgument) as bad:
            resolve(None, None, text, None, None)
        assert named in str(bad.value) and KEY not in str(bad.value)
    with pytest.raises(InvalidArgument, match="not both"):
        resolve("a", None, None, KEY, "sv=1")


def test_azure_etags_are_exact_generations_and_others_are_hashed() -> None:
    generation = generation_of('"0x8DCB1C5A2F3E4B7"')
    assert generation == 0x8DCB1C5A2F3E4B7 and reversible(generation)
    assert etag_of(generation) == '"0x8DCB1C5A2F3E4B7"'
    assert generation_of("0x8DCB1C5A2F3E4B7") == generation  # a listing's, unquoted
    odd = generation_of('"not-azure"')
    assert odd > 2**64 and not reversible(odd) and etag_of(odd) is None
    assert generation_of('"not-azure"') == odd and generation_of("") == 0
    assert not reversible(generation_of('"0x0"'))  # 0 means "must not exist"


def test_redact_cuts_credentials_and_their_shapes() -> None:
    sas = StaticSas("?sv=2023&sig=Q%2BSECRET%3D")
    error = NotFound("read az://c/o failed: HTTP 403: url ...?sv=2023&sig=Q%2BSECRET%3D, "
                     "sig Q+SECRET=, Authorization: Bearer eyJ0eXAi.abc.def")
    message = str(redact(error, sas))
    assert "SECRET" not in message and "eyJ0eXAi" not in message
    assert message.startswith("read az://c/o failed: HTTP 403")
    assert isinstance(error, NotFound) and error.name == ""
    key = KeySas("acct", KEY)
    assert KEY in key.secrets() and "<redacted>" in repr(key) and KEY not in repr(key)
    assert str(redact(StorageError(f"bad {KEY}"), key)) == "bad <redacted>"


def test_the_key_signs_an_account_sas_kept_until_near_its_end() -> None:
    key = KeySas("acct", KEY)
    first = key.query()
    assert "sig=" in first and "ss=b" in first and "srt=sco" in first
    assert key.query() is first  # kept, not signed again
    source = key.source_sas("ctr", "a/b")
    assert "sr=b" in source and "sp=r" in source  # one blob, read only


def test_the_sas_is_renewed_by_the_wall_clock_against_its_own_expiry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from urllib.parse import parse_qs

    key = KeySas("acct", KEY)
    first = key.query()
    # A suspend (or a paused VM): the wall clock moved 55 minutes on, the
    # monotonic clock did not; the first SAS now ends in 5 minutes.
    woke = time.time() + 3300
    monkeypatch.setattr(time, "time", lambda: woke)
    monkeypatch.setattr(time, "monotonic", lambda: 0.0)
    second = key.query()
    assert second != first

    def expiry(sas: str) -> str:
        return parse_qs(sas)["se"][0]

    assert expiry(second) > expiry(first)
    assert key.query() is second


def test_tokens_never_go_over_plain_http() -> None:
    class Credential:
        def get_token(self, *scopes: str) -> object:
            raise AssertionError("never asked")

    with pytest.raises(InvalidArgument, match="HTTPS only"):
        AzureStore(endpoint="http://127.0.0.1:10000/devstoreaccount1", credential=Credential())
    assert AzureStore(endpoint="https://acct.blob.core.windows.net",
                      credential=Credential()).account == "acct"


def test_two_ways_to_sign_in_given_at_once_are_refused() -> None:
    class Credential:
        def get_token(self, *scopes: str) -> object:
            raise AssertionError("never asked")

    endpoint = "https://acct.blob.core.windows.net"
    for kwargs in ({"account_key": KEY, "credential": Credential()},
                   {"sas_token": "sv=2020&sig=abc", "credential": Credential()},
                   {"sas_token": "sv=2020&sig=abc", "account_key": KEY},
                   {"anonymous": True, "sas_token": "sv=2020&sig=abc"}):
        with pytest.raises(InvalidArgument, match="give one") as refused:
            AzureStore(endpoint=endpoint, **kwargs)  # type: ignore[arg-type]
        assert KEY not in str(refused.value) and "sig=abc" not in str(refused.value)
    # A key from a connection string gives way to a credential given as an argument.
    store = AzureStore(connection_string=f"AccountName=acct;AccountKey={KEY}",
                       credential=Credential())
    assert store.account == "acct" and not isinstance(store._auth, KeySas)


@pytest.mark.parametrize("name", ["bad\ufffe", "a/\uffff/b"], ids=["U+FFFE", "U+FFFF"])
async def test_names_xml_cannot_carry_are_refused_before_any_request(name: str) -> None:
    # Written, then every listing of the container failed (Azurite: HTTP 500).
    with pytest.raises(InvalidURL, match="U\\+FFFE or U\\+FFFF"):
        validate_object_name(name, scheme="az")
    validate_object_name(name)  # GCS keeps them
    # Nothing listens on port 9: a request would be a TransportError.
    async with AzureStore(endpoint="http://127.0.0.1:9/devstoreaccount1",
                          account_key=KEY) as store:
        for call in (store.write("ctr", name, b"x"), store.read("ctr", name),
                     store.copy("ctr", "ok", "ctr", name)):
            with pytest.raises(InvalidURL):
                await call
    assert validate_object_name("ok\ufffd", scheme="az") == "ok\ufffd"
