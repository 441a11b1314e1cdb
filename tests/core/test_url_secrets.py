"""No refusal of a URL quotes a credential in it, and a web URL's port is
one a socket can have.

A URL with a ``user:password@`` is refused (each store takes credentials
of its own), but the refusal once quoted the URL whole, the password
included, in every form (``https://``, ``hf://``, ``s3://``...), through
``parse_url``, ``aioflux.open``, fsspec and the CLI. A signed web URL's
query values are cut from what a refusal quotes, as from a request's
errors. A port past 65535 passed ``parse_url`` and failed in yarl with a
bare ValueError at the first request.
"""

from __future__ import annotations

import pytest

from aioflux import InvalidURL, parse_url
from aioflux._core.errors import describe
from aioflux._core.records.urls import validate_bucket

PASSWORD = "hunter2PASS"


@pytest.mark.parametrize("url", [
    f"https://alice:{PASSWORD}@data.example.com/train/000.tar",
    f"HTTP://alice:{PASSWORD}@data.example.com",
    f"https://{PASSWORD}@data.example.com/x",
    f"hf://alice:{PASSWORD}@datasets/o/n/x",
    f"s3://alice:{PASSWORD}@bucket/key",
    f"gs://alice:{PASSWORD}@bucket/key",
    f"az://alice:{PASSWORD}@container/blob",
    f"abfs://alice:{PASSWORD}@container@acct.dfs.core.windows.net/blob",
    f"file://alice:{PASSWORD}@/tmp/x",
    f"ftp://alice:{PASSWORD}@host/x",
])
def test_a_refused_url_never_quotes_its_credentials(url: str) -> None:
    with pytest.raises(InvalidURL) as info:
        parse_url(url)
    assert PASSWORD not in str(info.value)
    assert "<redacted>@" in str(info.value)  # which part was refused is said


def test_credentials_are_refused_before_the_url_is_read() -> None:
    with pytest.raises(InvalidURL, match=r"^'s3://<redacted>@bucket/key': credentials in a URL"):
        parse_url(f"s3://alice:{PASSWORD}@bucket/key")
    with pytest.raises(InvalidURL, match="AIOFLUX_HTTP_TOKEN"):
        parse_url(f"https://alice:{PASSWORD}@host/x")
    with pytest.raises(InvalidURL, match="HF_TOKEN"):
        parse_url(f"hf://alice:{PASSWORD}@datasets/o/n/x")


def test_adlfs_container_at_account_is_no_credential() -> None:
    url = parse_url("abfs://cont@acct.dfs.core.windows.net/a/b")
    assert (url.scheme, url.bucket, url.name, url.account) == ("az", "cont", "a/b", "acct")
    assert tuple(parse_url("gs://bucket/a@b:c")) == ("bucket", "a@b:c")
    assert tuple(parse_url("hf://datasets/o/n@main/x")) == ("datasets/o/n@main", "x")


def test_a_refused_web_url_quotes_no_query_value() -> None:
    for url in ("https://host/x?sig=S3CRET#frag", "https://host/x\n?sig=S3CRET",
                f"https://host/x?sig=S3CRET&pad={'a' * 1100}"):
        with pytest.raises(InvalidURL, match=r"\?sig=<redacted>") as info:
            parse_url(url)
        assert "S3CRET" not in str(info.value)


def test_a_web_url_is_described_with_its_query_names_only() -> None:
    name = "a/x.bin?X-Amz-Credential=AKIA%2Fx&X-Amz-Signature=abc&token&&b="
    assert describe("stat", "host:8443", name, "https") == (
        "stat https://host:8443/a/x.bin?X-Amz-Credential=<redacted>"
        "&X-Amz-Signature=<redacted>&<redacted>&&b=<redacted>")
    assert describe("stat", "host", "x?", "http") == "stat http://host/x?"
    # Elsewhere a "?" is part of the object's name.
    assert describe("stat", "bucket", "a?b=1", "gs") == "stat gs://bucket/a?b=1"


@pytest.mark.parametrize("port", ["0", "00000", "65536", "99999"])
def test_a_web_port_out_of_range_is_refused(port: str) -> None:
    with pytest.raises(InvalidURL, match=f"port {port} of 'example.com:{port}' is not one of "
                                         "1-65535"):
        parse_url(f"https://example.com:{port}/data.bin")
    with pytest.raises(InvalidURL, match="not one of 1-65535"):
        validate_bucket(f"[::1]:{port}", scheme="http")


@pytest.mark.parametrize("bucket", ["example.com:1", "example.com:65535", "[::1]:8080", "[::1]",
                                    "example.com"])
def test_a_web_port_in_range_is_kept(bucket: str) -> None:
    assert validate_bucket(bucket, scheme="https") == bucket


@pytest.mark.parametrize("endpoint", [
    "ftp://acct.blob.example.com/?sv=2024&sig=SECRETSIG",
    "http://acct.blob.example.com:99999/?sig=SECRETSIG",
    "http://acct.blob.example.com/ x?sig=SECRETSIG",
    "http://acct.blob.example.com/#sig=SECRETSIG",
])
def test_a_refused_endpoint_quotes_no_query(endpoint: str) -> None:
    # The scheme, port and space checks quoted the endpoint whole, a SAS
    # pasted with it included, before its query was looked at.
    from aioflux._core.checks.arguments import check_endpoint

    with pytest.raises(InvalidURL) as info:
        check_endpoint("AzureStore", endpoint)
    assert "SECRETSIG" not in str(info.value)


@pytest.mark.parametrize("url", [f"https:/alice:{PASSWORD}@host/x", f"gs:/alice:{PASSWORD}@b/x",
                                 f"s3:alice:{PASSWORD}@b/x"])
def test_a_scheme_typo_with_credentials_quotes_none(url: str) -> None:
    # The typo's message quoted the URL and its "did you mean" form whole.
    with pytest.raises(InvalidURL) as info:
        parse_url(url)
    assert PASSWORD not in str(info.value)
