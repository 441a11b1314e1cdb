"""What a background save that failed keeps: its future holds the original
exception (type, message, where it was raised), never the host-memory
snapshot it was saving. The traceback's frames held it: a caller keeping the
failed future (``self.pending = mgr.save_async(...)``, whose next call
raised that failure first) held a whole state beside the next snapshot,
which ``memory_budget`` no longer counted."""

from __future__ import annotations

import gc
import pickle
import traceback
import weakref
from typing import Any

import pytest
import torch

from aioflux import AsyncClient, ServerError
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore
from aioflux.torch import CheckpointManager
from aioflux.torch.checkpoint import _manager as manager_module
from tests.torch.conftest import Where


class _FailingManifests(AsyncClient):
    fail = False

    async def write(self, bucket, name, data, **kwargs):  # type: ignore[no-untyped-def]
        if self.fail and name.endswith("manifest.json"):
            raise ServerError("injected manifest failure", operation="write", bucket=bucket,
                              name=name)
        return await super().write(bucket, name, data, **kwargs)


class _FailingLocalManifests(LocalStore):
    fail = False

    async def write(self, bucket, name, data, **kwargs):  # type: ignore[no-untyped-def]
        if self.fail and name.endswith("manifest.json"):
            raise ServerError("injected manifest failure", operation="write", bucket=bucket,
                              name=name)
        return await super().write(bucket, name, data, **kwargs)


@pytest.mark.parametrize("where", ["gs", "file"], indirect=True)
def test_a_failed_background_save_releases_its_snapshot(
        where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    client: Any = (_FailingLocalManifests() if where.emulator is None
                   else _FailingManifests(endpoint=where.emulator.endpoint))
    copies: list[weakref.ref[torch.Tensor]] = []
    snapshot = manager_module.snapshot  # type: ignore[attr-defined]

    def recorded(state: Any, pool: Any = None) -> Any:
        copied = snapshot(state, pool)
        copies.append(weakref.ref(copied["w"]))
        return copied

    monkeypatch.setattr(manager_module, "snapshot", recorded)
    # reuse_buffers=False: no pool keeps the buffers for the next save on purpose.
    mgr = CheckpointManager(where.url("rel"), client=client, reuse_buffers=False)
    try:
        mgr.save({"w": torch.ones(1)}, 1)  # a complete checkpoint before
        client.fail = True
        future = mgr.save_async({"w": torch.randn(100_000)}, 2)
        # Failed midway: state.pt stored, its manifest refused.
        with pytest.raises(ServerError, match="injected manifest failure"):
            future.result(timeout=60)
        gc.collect()
        assert copies[0]() is None, "the failed future still holds its snapshot"
        # What the failure tells is all there: its type, its message, the
        # lines it went through, and it pickles as it was.
        error = future.exception()
        assert type(error) is ServerError and error.name.endswith("manifest.json")
        assert "_persist" in "".join(traceback.format_exception(error))
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is ServerError and str(again) == str(error)
        assert mgr.latest().step == 1  # type: ignore[union-attr]  # nothing published
        client.fail = False
        assert mgr.save_async({"w": torch.zeros(3)}, 2).result(timeout=60).step == 2
        assert torch.equal(mgr.load()["w"], torch.zeros(3))
    finally:
        mgr.close()
        if where.emulator is not None:
            call(client.aclose())
