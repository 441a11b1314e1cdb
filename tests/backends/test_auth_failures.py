"""A request whose credentials fail names its operation, bucket and object.

The credential code (a google-auth refresh, botocore's chain or a refresh
of its credentials) serves every request and knows none of them: its error
once reached the caller as "authenticate failed: ..." or "s3: AWS
credentials ...", with no operation, bucket or object. The transport now
puts the request first; the class (PermissionDenied), the reason and the
advice on what to fix stay, and no credential is in the message.
"""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import google.oauth2.credentials
import pytest
from aiohttp import web
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import CredentialRetrievalError

from aioflux import AsyncClient, ClientConfig, PermissionDenied, RetryPolicy, S3Store
from aioflux._api import stores
from aioflux.s3._auth import SigV4
from aioflux.testing import Emulator
from tests.conftest import unique_bucket
from tests.servers.web_server import Served, Server

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002))

Call = Callable[[Any, str, str], Awaitable[object]]
CALLS: dict[str, Call] = {
    "stat": lambda store, bucket, name: store.stat(bucket, name),
    "read": lambda store, bucket, name: store.read(bucket, name),
    "write": lambda store, bucket, name: store.write(bucket, name, b"data"),
    "delete": lambda store, bucket, name: store.delete(bucket, name),
}


def _check(exc: PermissionDenied, scheme: str, bucket: str, name: str, cause: str, *,
           operation: str | None = None) -> None:
    if operation is None:  # a request's own: not the credential code's
        assert exc.operation not in ("", "authenticate", "sign"), exc.operation
    else:
        assert exc.operation == operation
    assert (exc.bucket, exc.name) == (bucket, name)
    assert str(exc).startswith(f"{exc.operation} {scheme}://{bucket}/{name}: "), str(exc)
    assert cause in str(exc)  # what to fix about the credentials is still said
    assert SECRET not in str(exc) and SECRET not in repr(exc)
    again = pickle.loads(pickle.dumps(exc))  # DataLoader workers send it across
    assert type(again) is PermissionDenied and str(again) == str(exc)
    assert (again.operation, again.bucket, again.name) == (exc.operation, bucket, name)


async def _refuse_refresh(request: web.Request, served: Served) -> web.StreamResponse:
    return web.json_response({"error": "invalid_grant",
                              "error_description": "Token has been expired or revoked."},
                             status=400)


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_a_gcs_refresh_that_fails_names_the_request(emulator: Emulator, bucket: str,
                                                          call: str) -> None:
    async with Server(_refuse_refresh) as (token_endpoint, served):
        creds = google.oauth2.credentials.Credentials(
            token=None, refresh_token=SECRET, client_id="id", client_secret=SECRET,
            token_uri=f"{token_endpoint}/token")
        async with AsyncClient(CONFIG, endpoint=emulator.endpoint, credentials=creds) as client:
            with pytest.raises(PermissionDenied) as info:
                await CALLS[call](client, bucket, "run/model.pt")
    _check(info.value, "gs", bucket, "run/model.pt", "invalid_grant")
    assert str(info.value).startswith(f"{call} gs://{bucket}/run/model.pt: authenticate "
                                      "failed: RefreshError")
    assert served.paths  # the token endpoint was asked, and refused


@pytest.fixture
def failing_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An AWS configuration whose default profile's credential_process fails."""
    config = tmp_path / "config"
    config.write_text("[default]\ncredential_process = sh -c 'echo expired >&2; exit 3'\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_an_aws_chain_that_fails_names_the_request(emulator: Emulator, failing_chain: None,
                                                         call: str) -> None:
    store = S3Store(CONFIG, endpoint=emulator.s3_endpoint, region="us-east-1",
                    addressing="path", defer_credentials=True)
    bucket = unique_bucket("auth")
    async with store:
        with pytest.raises(PermissionDenied) as info:
            await CALLS[call](store, bucket, "run/model.pt")
    _check(info.value, "s3", bucket, "run/model.pt", "profile 'default'")
    assert info.value.reason == "CredentialRetrievalError"


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_aws_credentials_whose_refresh_fails_name_the_request(
        emulator: Emulator, call: str) -> None:
    def refresh() -> dict[str, str]:
        raise CredentialRetrievalError(provider="sso", error_msg="token expired")

    expired = (datetime.datetime.now(datetime.timezone.utc)
               - datetime.timedelta(hours=1)).isoformat()
    credentials = RefreshableCredentials.create_from_metadata(
        {"access_key": "AKIAEXAMPLE", "secret_key": SECRET, "token": SECRET,
         "expiry_time": expired}, refresh, "sso")
    signer = SigV4(lambda _url: "us-east-1", credentials=credentials, profile="p")
    bucket = unique_bucket("auth")
    async with S3Store(CONFIG, endpoint=emulator.s3_endpoint, region="us-east-1",
                       addressing="path", auth=signer) as store:
        with pytest.raises(PermissionDenied) as info:
            await CALLS[call](store, bucket, "run/model.pt")
    _check(info.value, "s3", bucket, "run/model.pt", "token expired")


def test_the_default_s3_store_built_off_a_loop_names_the_url(
        emulator: Emulator, failing_chain: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", emulator.s3_endpoint)
    monkeypatch.setattr(stores, "_defaults", {})
    bucket = unique_bucket("auth")
    url = f"s3://{bucket}/run/model.pt"
    # Off an event loop (a CheckpointManager, a Checkpoint being made) the
    # chain is resolved as the store is built, before any request: once
    # "s3: AWS credentials ..." with no URL.
    with pytest.raises(PermissionDenied) as info:
        stores.store_for_url(url)
    _check(info.value, "s3", bucket, "run/model.pt", "profile 'default'",
           operation="authenticate")
