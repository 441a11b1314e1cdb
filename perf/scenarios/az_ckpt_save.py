"""az_ckpt_save: ``torch.save`` of a 1 GiB state dict to one ``az://`` blob on Azurite.

ckpt_save's shape (64 fp32 tensors of 16 MiB, built untimed inside each
contender): aioflux's ``Checkpoint(store).save`` (torch.save into the
streaming block writer) against torch.save into memory then
azure-storage-blob's aio ``upload_blob(max_concurrency=8)`` (and at
aioflux's 16 blocks in flight), and
``torch.save`` into an adlfs file. Parameters: ``count`` (64; 8 with
--quick), ``tensor_mib`` (16), ``kind``.
"""

from __future__ import annotations

from perf.harness import Contender, Options, Plan, Target
from perf.scenarios.az_read import AZURITE, ready
from perf.scenarios.ckpt_save import _IN_FLIGHT, _PART_MIB

__all__ = ["plan"]


def plan(options: Options) -> Plan:
    count = options.get("count", 8 if options.quick else 64)
    tensor_mib = options.get("tensor_mib", 16)
    kind = options.params.get("kind", "random")
    state = ("--task", "save", "--count", str(count), "--tensor-mib", str(tensor_mib),
             "--kind", kind)
    return Plan(
        name="az_ckpt_save",
        description=f"torch.save of a {count * tensor_mib} MiB state dict ({count} fp32 "
                    f"tensors x {tensor_mib} MiB, {kind}) to one az:// blob on Azurite",
        bucket="perf-az-ckpt-save",
        objects=[],
        contenders=[
            Contender("aioflux-az", "az_aioflux.py", None,
                      (*state, "--part-mib", str(_PART_MIB), "--in-flight", str(_IN_FLIGHT)),
                      note=f"Checkpoint(AzureStore()).save(state, 'az://...'): blocks of "
                           f"{_PART_MIB} MiB, {_IN_FLIGHT} in flight, each with its Content-MD5, "
                           "committed with the crc32c in metadata and the length checked",
                      available=ready),
            Contender("azure-blob-aio", "az_sdk.py", "azblob", state,
                      note="torch.save into BytesIO, then aio upload_blob(max_concurrency=8) "
                           "(its block upload, no MD5s)"),
            Contender(f"azure-blob-aio-c{_IN_FLIGHT}", "az_sdk.py", "azblob",
                      (*state, "--max-concurrency", str(_IN_FLIGHT)),
                      note=f"the same with max_concurrency={_IN_FLIGHT}: aioflux's blocks in "
                           "flight"),
            Contender("adlfs", "az_adlfs.py", "adlfs", state,
                      note="torch.save(state, fs.open(path, 'wb')) at adlfs's defaults"),
        ],
        baseline="aioflux-az",
        targets=[Target("azure-blob-aio", 1.5), Target("adlfs", 1.5)],
        notes=[AZURITE, "state built inside each contender before the timed region"],
        timeout_s=900.0,
        expect_items=1,
        warm_read=False,
        warm_rounds=1,
        azurite=True,
    )
