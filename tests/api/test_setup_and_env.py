"""Set-up as a new user meets it: settings, environment variables and network.

A misconfiguration (a typo in a setting, ``AWS_REGION``, an endpoint variable
or the profile) is refused when the client or store is made, with an
``InvalidArgument`` / ``InvalidURL`` that names where the value came from:
never a bare ``TypeError`` / ``OverflowError`` / ``ValueError`` at the first
request, nor eight failed DNS lookups. The CLI reports each as one line.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from aioflux import (
    AsyncClient,
    ClientConfig,
    InvalidArgument,
    InvalidURL,
    PermissionDenied,
    RetryPolicy,
    S3Store,
    Timeouts,
    TransportError,
)
from aioflux.cli import main

INF, NAN = math.inf, math.nan


@pytest.mark.parametrize(("make", "field"), [
    (lambda: Timeouts(idle="15"), "idle"),
    (lambda: Timeouts(idle=None), "idle"),
    (lambda: Timeouts(idle=True), "idle"),
    (lambda: Timeouts(idle=INF), "idle"),
    (lambda: Timeouts(connect=INF), "connect"),
    (lambda: Timeouts(read_stall=INF), "read_stall"),
    (lambda: Timeouts(total=INF), "total"),
    (lambda: RetryPolicy(initial_delay=INF, max_delay=INF), "initial_delay"),
    (lambda: RetryPolicy(max_delay=INF), "max_delay"),
    (lambda: RetryPolicy(multiplier=INF), "multiplier"),
    (lambda: RetryPolicy(deadline=INF), "deadline"),
    (lambda: RetryPolicy(deadline=NAN), "deadline"),
    # An int past a float's range: a bare OverflowError from math.isfinite.
    (lambda: Timeouts(connect=10**400), "connect"),
    (lambda: RetryPolicy(max_delay=10**400), "max_delay"),
    (lambda: ClientConfig(request_rate=10**400), "request_rate"),
    (lambda: ClientConfig(user_agent=None), "user_agent"),
    (lambda: ClientConfig(user_agent=5), "user_agent"),
    (lambda: ClientConfig(user_agent="job/\U0001f680"), "user_agent"),
    (lambda: ClientConfig(ca_file=5), "ca_file"),
    (lambda: ClientConfig(ssl_context="strict"), "ssl_context"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_settings_are_refused_when_made_naming_the_field(make: Any, field: str) -> None:
    # Before: a TypeError here, or accepted and then an OverflowError,
    # TypeError or UnicodeEncodeError from asyncio/aiohttp/ssl at the first
    # request (or a retry sleeping forever).
    with pytest.raises(InvalidArgument, match=field):
        make()


def test_settings_that_stay_accepted() -> None:
    assert ClientConfig(user_agent="job/josé").user_agent == "job/josé"  # latin-1 is sent
    assert ClientConfig(ca_file=Path("/etc/ca.pem")).ca_file == Path("/etc/ca.pem")
    assert Timeouts(total=None).total is None and RetryPolicy(deadline=None).deadline is None


@pytest.mark.parametrize("endpoint", [
    "http://[::1",              # urlsplit's own ValueError
    "http://[zz]:9000",
    "http://127.0.0.1:9000/?token=x",  # paths are appended: the query would swallow them
    "http://127.0.0.1:9000/#x",
    "http://storage .example.com",
    "http://127.0.0.1:9000\n",
])
@pytest.mark.parametrize("cls", [AsyncClient, S3Store])
def test_a_broken_endpoint_is_an_invalid_url(cls: Any, endpoint: str) -> None:
    with pytest.raises(InvalidURL, match="endpoint") as info:
        cls(endpoint=endpoint)
    assert "token=x" not in str(info.value)


def test_storage_emulator_host_with_a_broken_host_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://[::1")
    with pytest.raises(InvalidURL, match="STORAGE_EMULATOR_HOST"):
        AsyncClient()


@pytest.mark.parametrize("value", ["http://[::1", "http://127.0.0.1:99999",
                                   "localhost:9000", "http://minio .local:9000"])
def test_aws_endpoint_variables_are_checked_and_named(monkeypatch: pytest.MonkeyPatch,
                                                      value: str) -> None:
    # Before: a bare ValueError for the first two, and for the third a
    # message about "endpoint" that the user never passed.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", value)
    with pytest.raises(InvalidURL, match="AWS_ENDPOINT_URL_S3"):
        S3Store()


@pytest.mark.parametrize("region", ["us-east-1 ", '"us-west-2"', "evil.example#", "us east"])
def test_a_region_that_is_no_region_name_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path, region: str) -> None:
    # A region is part of the host name: before, each of these failed DNS
    # eight times over (or, "evil.example#", sent requests to s3.evil.example).
    with pytest.raises(InvalidArgument, match="region name"):
        S3Store(region=region)
    monkeypatch.setenv("AWS_REGION", region)
    with pytest.raises(InvalidArgument, match="AWS_REGION"):
        S3Store()
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    if region != region.strip():
        return  # a config file's trailing space is dropped by its parser
    config = tmp_path / "config"
    config.write_text(f"[default]\nregion = {region}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    with pytest.raises(InvalidArgument, match="profile's region"):
        S3Store()


def test_regions_of_other_stores_stay_accepted() -> None:
    for region in ("eu-central-1", "auto", "garage", "my_region"):
        assert S3Store(region=region, endpoint="http://127.0.0.1:9").region == region


def test_an_empty_aws_profile_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore looks up a profile named '': the message blamed 'default'.
    monkeypatch.setenv("AWS_PROFILE", "")
    with pytest.raises(PermissionDenied, match=r"profile '' \(from AWS_PROFILE, empty\)"):
        S3Store(endpoint="http://127.0.0.1:9")


def test_the_profile_botocore_uses_is_the_one_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore reads AWS_DEFAULT_PROFILE before AWS_PROFILE.
    monkeypatch.setenv("AWS_DEFAULT_PROFILE", "first")
    monkeypatch.setenv("AWS_PROFILE", "second")
    with pytest.raises(PermissionDenied, match=r"'first' \(from AWS_DEFAULT_PROFILE\)"):
        S3Store(endpoint="http://127.0.0.1:9")


_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
            "NO_PROXY", "no_proxy")


async def _refused(endpoint: str) -> TransportError:
    config = ClientConfig(retry=RetryPolicy(max_attempts=1))
    async with AsyncClient(config, endpoint=endpoint) as client:
        with pytest.raises(TransportError) as info:
            await client.stat("bucket", "object")
    return info.value


async def _closed_port() -> str:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return f"http://127.0.0.1:{port}"


async def test_a_connection_error_names_the_proxy_rule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A plain-http endpoint is reached directly whatever the proxy variables
    # say (README, Configuration): behind a proxy the failure must say so,
    # without the proxy's password.
    for name in _PROXIES:
        monkeypatch.delenv(name, raising=False)
    endpoint = await _closed_port()
    assert "PROXY" not in str(await _refused(endpoint))
    monkeypatch.setenv("HTTPS_PROXY", "http://user:hunter2@127.0.0.1:3128")
    message = str(await _refused(endpoint))
    assert ("HTTPS_PROXY is set: aioflux goes through HTTPS_PROXY (or ALL_PROXY) only to "
            "https:// endpoints outside NO_PROXY") in message
    assert "hunter2" not in message


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_cli_reports_a_broken_environment_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://[::1")
    code, err = _cli(capsys, "ls", "gs://some-bucket")
    assert (code, err.count("\n")) == (1, 1) and "STORAGE_EMULATOR_HOST" in err
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:99999")
    code, err = _cli(capsys, "ls", "s3://some-bucket")
    assert (code, err.count("\n")) == (1, 1) and "AWS_ENDPOINT_URL_S3" in err
    monkeypatch.setenv("AWS_REGION", "us-east-1 ")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    code, err = _cli(capsys, "ls", "s3://some-bucket")
    assert (code, err.count("\n")) == (1, 1) and "AWS_REGION" in err


def test_cli_region_typo_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "ls", "--region", "us east 1", "--s3-endpoint",
                     "http://127.0.0.1:9", "s3://some-bucket")
    assert code == 2 and "--region" in err and err.count("\n") == 1
