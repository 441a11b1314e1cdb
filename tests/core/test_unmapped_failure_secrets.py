"""An attempt's failure that maps to no typed error and whose text holds a
credential that cannot be cut out is raised as a StorageError naming only
its class.

aiohttp's ``InvalidUrlClientError`` (``NonHttpUrlClientError``: an
endpoint's scheme a typo) shows the whole request URL whatever its
arguments say, a SAS signature included; it was re-raised as it came.
"""

from __future__ import annotations

from typing import cast

import aiohttp
import pytest
import yarl

from aioflux import ClientConfig, RetryPolicy, StorageError
from aioflux._core.auth import AnonymousAuth
from aioflux._net.failures import drain
from aioflux._net.transport import Op, Transport
from tests.core.test_error_secrets import _everything_shown, _Failing

SECRET = "5ecr3t-51gnature"
URL = f"htps://acct.blob.core.windows.net/c/o?sv=2023-11-03&sp=r&sig={SECRET}"


async def test_an_unmappable_failure_showing_a_signature_is_a_typed_error() -> None:
    session = _Failing(lambda: aiohttp.NonHttpUrlClientError(yarl.URL(URL)))
    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0, max_delay=0))
    transport = Transport(config, AnonymousAuth(), endpoint="https://acct.blob.core.windows.net",
                          session_factory=lambda _c: cast(aiohttp.ClientSession, session))
    try:
        with pytest.raises(StorageError) as info:
            await transport.request(Op("read", "c", "o", "az"), "GET", URL, drain)
    finally:
        await transport.aclose()
    failure = info.value
    assert type(failure) is StorageError  # not retried: the URL stays what it is
    assert session.sent == 1
    assert str(failure) == ("read az://c/o failed: NonHttpUrlClientError (its text withheld: "
                            "it may hold a credential)")
    assert (failure.operation, failure.bucket, failure.name) == ("read", "c", "o")
    assert SECRET not in _everything_shown(failure)
