"""DCP as a user meets it: checkpoints damaged after the save must fail a
load with a typed ``ChecksumMismatch`` naming the data file, not with
torch's zip or unpickling errors, nor load wrong tensors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from aioflux import ChecksumMismatch
from aioflux._core.concurrency.portal import call
from aioflux.torch.dcp import DcpReader, DcpWriter
from tests.torch.conftest import Where

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return {"w": torch.randn(200, 50, generator=g), "b": torch.arange(300)}


def _load(where: Where, root: str) -> None:
    dcp.load({"w": torch.zeros(200, 50), "b": torch.zeros(300, dtype=torch.long)},
             storage_reader=DcpReader(root, client=where.client))


def _damage(where: Where, root: str, change: object) -> str:
    dcp.save(_state(), storage_writer=DcpWriter(root, client=where.client))
    (name,) = [n for n in where.names() if n.endswith(".distcp")]
    body = bytes(call(where.store.read(where.bucket, where.base + name)))
    where.put(name, change(body))  # type: ignore[operator]  # stored anew: its crc32c matches
    return name


def test_a_truncated_data_file_is_a_checksum_mismatch(where: Where) -> None:
    # The last item's range ran past the file's end: the store served the
    # bytes left and torch failed ("failed finding central directory").
    root = where.url("cut")
    name = _damage(where, root, lambda body: body[:-100])
    with pytest.raises(BaseException, match=f"{name}.*truncated") as info:  # DCP wraps it
        _load(where, root)
    assert ChecksumMismatch.__name__ in repr(info.value)


def test_a_data_file_cut_to_less_than_its_first_item_is_a_checksum_mismatch(
        where: Where) -> None:
    # Ranges past the end: an HTTP 416 InvalidRequest, not what happened.
    root = where.url("cut2")
    name = _damage(where, root, lambda body: body[:10])
    with pytest.raises(BaseException, match=f"{name}.*truncated") as info:
        _load(where, root)
    assert ChecksumMismatch.__name__ in repr(info.value)


@pytest.mark.parametrize("where", ["file"], indirect=True)
def test_a_byte_flipped_in_an_item_s_framing_is_a_checksum_mismatch(where: Where) -> None:
    # A flip in an item's zip header fails torch.load before the whole-file
    # crc32c check could run: an untyped RuntimeError ("failed finding
    # central directory" / "file not found") until the file is checked.
    root = where.url("flip")
    dcp.save(_state(), storage_writer=DcpWriter(root))
    (name,) = [n for n in where.names() if n.endswith(".distcp")]
    path = f"/{where.bucket}/{where.base}{name}"
    info = call(where.store.stat(where.bucket, where.base + name))
    if info.crc32c is None:
        pytest.skip("no user xattrs here: files carry no crc32c to check against")
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size - 30)  # the last item's zip end-of-central-directory
        byte = f.read(1)
        f.seek(st.st_size - 30)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the recorded crc32c stays
    with pytest.raises(BaseException, match=f"{name}.*crc32c") as raised:
        _load(where, root)
    assert ChecksumMismatch.__name__ in repr(raised.value)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_partial_load_of_a_damaged_item_is_a_checksum_mismatch(where: Where,
                                                                  compression: str | None) -> None:
    # Loading only "w" (the model without the optimizer) reads ranges that
    # never tile the data file, so the whole-file crc32c was never checked:
    # a byte flipped in "w" after the save loaded as a wrong tensor. Each
    # item's crc32c, recorded as it was written (.metadata.crc32c), now is.
    if compression == "zstd":
        pytest.importorskip("zstandard")
    root = where.url("partial")
    dcp.save(_state(), storage_writer=DcpWriter(root, client=where.client,
                                                        compression=compression))
    assert "partial/.metadata.crc32c" in where.names()

    def load_w() -> torch.Tensor:
        target = {"w": torch.zeros(200, 50)}
        dcp.load(target, storage_reader=DcpReader(root, client=where.client))
        return target["w"]

    assert torch.equal(load_w(), _state()["w"])
    (name,) = [n for n in where.names() if n.endswith(".distcp")]
    body = bytearray(call(where.store.read(where.bucket, where.base + name)))
    body[len(body) // 3] ^= 0x01  # inside "w", the larger item
    where.put(name, bytes(body))  # stored anew: the file's own crc32c matches
    with pytest.raises(BaseException, match=f"{name}.*the item was saved with") as info:
        load_w()
    assert ChecksumMismatch.__name__ in repr(info.value)


def test_a_checkpoint_without_item_crcs_still_loads(where: Where) -> None:
    # Saved by torch's own writer or an older aioflux: no .metadata.crc32c.
    root = where.url("no-item-crcs")
    dcp.save(_state(), storage_writer=DcpWriter(root, client=where.client))
    call(where.store.delete(where.bucket, where.base + "no-item-crcs/.metadata.crc32c"))
    target = {"w": torch.zeros(200, 50)}
    dcp.load(target, storage_reader=DcpReader(root, client=where.client))
    assert torch.equal(target["w"], _state()["w"])


def _untie(path: Path) -> None:
    """Make ``path`` a ``.metadata.crc32c`` as aioflux wrote it before it
    named its save (format 1, no save_id)."""
    doc = json.loads(path.read_bytes())
    path.write_text(json.dumps({"format": 1, "items": doc["items"]}))


@pytest.mark.filterwarnings("ignore:Detected an existing checkpoint:UserWarning")
def test_a_crc32c_file_left_by_an_earlier_save_is_not_held_against_a_later_one(
        tmp_path: Path) -> None:
    # torch's FileSystemWriter(overwrite=True) re-saving into the directory
    # replaces .metadata and the data files but not our .metadata.crc32c:
    # its crc32c, of the earlier save's bytes, failed the valid checkpoint.
    root = tmp_path / "ck"
    crcs = root / ".metadata.crc32c"
    ones = {"w": torch.ones(200, 50), "b": torch.ones(300, dtype=torch.long)}

    def load(w_rows: int = 200) -> dict[str, torch.Tensor]:
        target = {"w": torch.zeros(w_rows, 50), "b": torch.zeros(300, dtype=torch.long)}
        dcp.load(target, storage_reader=DcpReader(str(root)))
        return target

    dcp.save(_state(), storage_writer=DcpWriter(str(root)))
    assert torch.equal(load()["w"], _state()["w"])
    dcp.save(ones, storage_writer=FileSystemWriter(str(root), overwrite=True))
    assert crcs.exists()  # left there, and of the same layout
    got = load()
    assert torch.equal(got["w"], ones["w"]) and torch.equal(got["b"], ones["b"])
    # A crc32c file written before the tie is still used when it lists the
    # metadata's items: a byte flipped in "w" is caught...
    dcp.save(_state(), storage_writer=DcpWriter(str(root)))
    _untie(crcs)
    (data,) = root.glob("*.distcp")
    body = bytearray(data.read_bytes())
    body[len(body) // 3] ^= 0x01
    data.write_bytes(bytes(body))  # a new file: no recorded crc32c of its own
    with pytest.raises(BaseException, match="the item was saved with") as info:
        load()
    assert ChecksumMismatch.__name__ in repr(info.value)
    # ... and ignored when it lists items the metadata has not (another
    # save's, of another layout).
    smaller = {"w": torch.full((100, 50), 2.0), "b": torch.ones(300, dtype=torch.long)}
    dcp.save(smaller, storage_writer=FileSystemWriter(str(root), overwrite=True))
    assert torch.equal(load(100)["w"], smaller["w"])


@pytest.mark.parametrize("rank", [0, 1])
def test_a_partial_load_of_a_rank_local_checkpoint_checks_its_items(
        where: Where, rank: int) -> None:
    # Ranks saving without collectives (use_collectives=False) each write
    # __<rank>.metadata and the items' crc32c beside it
    # (__<rank>.metadata.crc32c). The reader looked only for
    # .metadata.crc32c, so a partial load of such a checkpoint (the model
    # without the optimizer) never tiled the data file either: a byte
    # flipped in "w" loaded as a wrong tensor.
    root = where.url("rank-local")
    writer = DcpWriter(root, client=where.client)
    setup = writer.set_up_storage_writer

    def set_up_as_rank(is_coordinator: bool, *args: object, **kwargs: object) -> None:
        # One process stands for rank ``rank`` of a world saving without collectives.
        setup(is_coordinator, *args, **{**kwargs, "rank": rank})

    writer.set_up_storage_writer = set_up_as_rank  # type: ignore[method-assign]
    dcp.save(_state(), storage_writer=writer, use_collectives=False)
    names = [n.rsplit("/", 1)[1] for n in where.names("rank-local")]
    assert f"__{rank}.metadata.crc32c" in names and ".metadata" not in names

    def load_w() -> torch.Tensor:
        reader = DcpReader(root, client=where.client)
        read_metadata, set_up = reader.read_metadata, reader.set_up_storage_reader

        def read_as_rank(*args: object, **kwargs: object) -> object:
            # DCP asks for the global metadata first, then this rank's.
            return read_metadata(*args, **({**kwargs, "rank": rank} if "rank" in kwargs
                                           else kwargs))

        def set_up_as_rank(*args: object, **kwargs: object) -> None:
            set_up(*args, **{**kwargs, "rank": rank})

        reader.read_metadata = read_as_rank  # type: ignore[method-assign]
        reader.set_up_storage_reader = set_up_as_rank  # type: ignore[method-assign]
        target = {"w": torch.zeros(200, 50)}
        dcp.load(target, storage_reader=reader)
        return target["w"]

    assert torch.equal(load_w(), _state()["w"])
    (name,) = [n for n in where.names() if n.endswith(".distcp")]
    assert name.endswith(f"__{rank}_0.distcp")
    saved = bytes(call(where.store.read(where.bucket, where.base + name)))
    body = bytearray(saved)
    body[len(body) // 3] ^= 0x01  # inside "w"
    where.put(name, bytes(body))  # stored anew: the file's own crc32c matches
    with pytest.raises(BaseException, match=f"{name}.*the item was saved with") as info:
        load_w()
    assert ChecksumMismatch.__name__ in repr(info.value)
    # As older aioflux wrote it (format 1, no save_id), or saved without it
    # (torch's writer, an older aioflux still): it loads as before.
    where.put(name, saved)
    crcs = f"rank-local/__{rank}.metadata.crc32c"
    doc = json.loads(bytes(call(where.store.read(where.bucket, where.base + crcs))))
    where.put(crcs, json.dumps({"format": 1, "items": doc["items"]}).encode())
    assert torch.equal(load_w(), _state()["w"])
    call(where.store.delete(where.bucket, where.base + crcs))
    assert torch.equal(load_w(), _state()["w"])
