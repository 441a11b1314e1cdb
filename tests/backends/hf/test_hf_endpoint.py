"""HfStore's endpoint, the argument or ``HF_ENDPOINT``, is checked as every
store's ``endpoint=`` is: one with a ``user:password@`` showed the password
in the store's repr, a typo'd scheme or a query reached aiohttp and failed
untyped (or asked another path) at the first request."""

from __future__ import annotations

import pickle

import pytest

from aioflux import InvalidURL
from aioflux.hf import HfStore

SECRET = "pw55SECRET"
BAD = {
    "userinfo": f"http://user:{SECRET}@127.0.0.1:9",
    "scheme": "htp://127.0.0.1:9",
    "query": f"http://127.0.0.1:9/?token={SECRET}",
    "space": "http://127.0.0.1:9 /x",
    "port": "http://127.0.0.1:99999",
}


@pytest.mark.parametrize("endpoint", BAD.values(), ids=list(BAD))
def test_a_bad_endpoint_is_refused_without_its_secret(
        endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidURL, match=r"^HfStore: ") as info:
        HfStore(endpoint=endpoint, token="")
    assert SECRET not in str(info.value)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(InvalidURL, match=r"^HfStore \(HF_ENDPOINT\): ") as info:
        HfStore(token="")
    assert SECRET not in str(info.value)


def test_an_endpoint_in_either_form_every_store_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert HfStore(token="").endpoint == "https://huggingface.co"
    assert HfStore(endpoint="127.0.0.1:9", token="").endpoint == "http://127.0.0.1:9"
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.com/mirror/")
    store = HfStore(token="")
    assert store.endpoint == "https://hub.example.com/mirror"
    assert pickle.loads(pickle.dumps(store)).endpoint == store.endpoint
