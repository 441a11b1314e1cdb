"""Credentials given without scopes get the client's storage scope.

A service account's key loaded the usual way
(``service_account.Credentials.from_service_account_file(path)``) carries
no scopes, and Google's token endpoint refuses a grant that asks for none
(``invalid_scope``): every request failed with PermissionDenied although
the key was good. google-auth's ``with_scopes_if_required`` now gives such
credentials the storage scope, as google-cloud-storage does; credentials
scoped by their owner keep their scopes.
"""

from __future__ import annotations

import base64
import json
import pickle
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import service_account

from aioflux import AsyncClient, ClientConfig, RetryPolicy
from aioflux.gcs._auth import SCOPES, GoogleAuth
from aioflux.testing import Emulator
from tests.servers.web_server import Served, Server

CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.002))
PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def _key_info(token_uri: str) -> dict[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {"type": "service_account", "project_id": "p", "private_key_id": "k1",
            "private_key": pem, "client_email": "trainer@p.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": token_uri}


def _claims(assertion: str) -> dict[str, Any]:
    payload = assertion.split(".")[1]
    padded = payload + "=" * (-len(payload) % 4)
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(padded))
    return claims


class TokenEndpoint:
    """Google's OAuth token endpoint as it treats a JWT grant's scope."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def __call__(self, request: web.Request, served: Served) -> web.StreamResponse:
        form = await request.post()
        scope = str(_claims(str(form["assertion"])).get("scope", ""))
        self.scopes.append(scope)
        if not scope:
            return web.json_response({"error": "invalid_scope", "error_description":
                                      "Invalid OAuth scope or ID token audience provided."},
                                     status=400)
        return web.json_response({"access_token": "ya29.granted", "expires_in": 3600,
                                  "token_type": "Bearer"})


async def test_service_account_credentials_without_scopes_get_the_storage_scope(
        emulator: Emulator, bucket: str) -> None:
    endpoint = TokenEndpoint()
    async with Server(endpoint) as (token_server, served):
        creds = service_account.Credentials.from_service_account_info(
            _key_info(f"{token_server}/token"))
        assert creds.requires_scopes  # as from_service_account_file loads a key
        async with AsyncClient(CONFIG, endpoint=emulator.endpoint, credentials=creds) as client:
            info = await client.write(bucket, "run/model.pt", b"weights")
            assert await client.read(bucket, "run/model.pt") == b"weights"
            assert info.size == 7
    assert endpoint.scopes == [" ".join(SCOPES)]  # one grant, of the storage scope
    assert len(served.paths) == 1


async def test_credentials_scoped_by_their_owner_keep_their_scopes(emulator: Emulator,
                                                                   bucket: str) -> None:
    endpoint = TokenEndpoint()
    async with Server(endpoint) as (token_server, _):
        creds = service_account.Credentials.from_service_account_info(
            _key_info(f"{token_server}/token"), scopes=[PLATFORM])
        async with AsyncClient(CONFIG, endpoint=emulator.endpoint, credentials=creds) as client:
            await client.write(bucket, "scoped", b"x")
    assert endpoint.scopes == [PLATFORM]


def test_scoped_credentials_pickle_with_their_scope() -> None:
    # DataLoader spawn workers rebuild the auth from its pickle.
    creds = service_account.Credentials.from_service_account_info(
        _key_info("http://127.0.0.1:9/token"))
    auth = pickle.loads(pickle.dumps(GoogleAuth(creds)))
    assert not auth._credentials.requires_scopes
    assert list(auth._credentials.scopes) == list(SCOPES)
