"""``delete_many`` given one key as a str deletes nothing.

A str is a sequence of its characters: ``delete_many(bucket, "abc")``
deleted the keys ``a``, ``b`` and ``c`` (other objects) and left ``abc``.
"""

from __future__ import annotations

import pytest

from aioflux import ClientConfig, InvalidArgument, S3Store
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket


async def test_one_key_as_a_str_is_refused_and_deletes_nothing(moto_s3: MotoS3) -> None:
    async with S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint) as store:
        bucket = unique_bucket("s3")
        await store.create_bucket(bucket)
        for name in ("a", "b", "c", "abc"):
            await store.write(bucket, name, b"x")
        with pytest.raises(InvalidArgument, match=r"delete_many s3://.*sequence of keys"):
            await store.delete_many(bucket, "abc")
        assert [o.name async for o in store.list_objects(bucket)] == ["a", "abc", "b", "c"]
        await store.delete_many(bucket, ["abc"])
        assert [o.name async for o in store.list_objects(bucket)] == ["a", "b", "c"]
