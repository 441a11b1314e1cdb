"""What the emulator's own methods raise to a test says which bucket or
object it is about (GCS's answers on the wire keep GCS's words)."""

from __future__ import annotations

import pytest

from aioflux.testing import Emulator
from aioflux.testing._errors import ApiError


def test_the_store_methods_name_the_bucket() -> None:
    emu = Emulator()  # not started: the store is used directly
    emu.create_bucket("kept-data")
    with pytest.raises(ApiError, match=r"^409 conflict: .*\(kept-data\)$"):
        emu.create_bucket("kept-data")
    with pytest.raises(ApiError, match=r"^404 notFound: .*\(no-such-bkt\)$"):
        emu.store.bucket("no-such-bkt")
    emu.store.put("kept-data", "a", b"x")
    with pytest.raises(ApiError, match=r"^409 conflict: .*not empty\. \(kept-data\)$"):
        emu.store.delete_bucket("kept-data")
    # A message that names it already is left alone.
    with pytest.raises(ApiError) as info:
        emu.store.get("kept-data", "missing")
    assert str(info.value) == "404 notFound: No such object: kept-data/missing"


def test_the_wire_keeps_gcs_words() -> None:
    with pytest.raises(ApiError) as info:
        Emulator().store.bucket("no-such-bkt")
    assert info.value.message == "The specified bucket does not exist."
    body = info.value.json_response().body
    assert isinstance(body, bytes) and b"no-such-bkt" not in body
