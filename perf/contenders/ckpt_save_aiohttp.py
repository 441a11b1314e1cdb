"""ckpt_save contender: a bare aiohttp XML multipart upload, the ceiling.

The state's tensors are sent as they lie in memory, one part per
``part`` bytes, ``in_flight`` parts at a time on one session: initiate,
PUT every part, complete. No ``torch.save``, no copies, no checksums, no
retries. It is what the emulator lets any client reach on this machine,
so aioflux's save divided by it is the share of that ceiling aioflux
gets (the writer adds ``torch.save``, the copy into part buffers and
crc32c on top).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import re
from urllib.parse import quote

import aiohttp
from _contender import Stopwatch, load, report, run
from ckpt_common import add_state_args, build_state, state_bytes

_UPLOAD_ID = re.compile(rb"<UploadId>([^<]+)</UploadId>")


def tensor_views(state: dict[str, object]) -> list[memoryview]:
    """Each tensor's bytes as a view of its memory (no copy, no numpy needed)."""
    views = []
    for value in state.values():
        if hasattr(value, "data_ptr"):
            nbytes = value.numel() * value.element_size()  # type: ignore[attr-defined]
            raw = (ctypes.c_char * nbytes).from_address(value.data_ptr())  # type: ignore[attr-defined]
            views.append(memoryview(raw).cast("B"))
    return views


def split_parts(views: list[memoryview], part: int) -> list[memoryview]:
    """Cut the views into pieces of at most ``part`` bytes (tensor boundaries kept)."""
    return [view[start:start + part] for view in views for start in range(0, len(view), part)]


async def main(endpoint: str, bucket: str, parts: list[memoryview],
               in_flight: int) -> Stopwatch:
    url = f"{endpoint}/{bucket}/{quote('ckpt_save/aiohttp-bare.bin')}"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sem = asyncio.Semaphore(in_flight)

        async def put(number: int, body: memoryview, upload_id: str) -> str:
            async with sem, session.put(url, params={"partNumber": str(number),
                                                     "uploadId": upload_id},
                                        data=body) as resp:
                resp.raise_for_status()
                return resp.headers["ETag"]

        with Stopwatch() as watch:
            async with session.post(url, params={"uploads": ""}) as resp:
                resp.raise_for_status()
                found = _UPLOAD_ID.search(await resp.read())
                assert found is not None, "no UploadId in the initiate response"
                upload_id = found.group(1).decode()
            etags = await asyncio.gather(*(put(n, body, upload_id)
                                           for n, body in enumerate(parts, 1)))
            listing = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
                              for n, etag in enumerate(etags, 1))
            body = f"<CompleteMultipartUpload>{listing}</CompleteMultipartUpload>"
            async with session.post(url, params={"uploadId": upload_id}, data=body) as resp:
                resp.raise_for_status()
                await resp.read()
    return watch


if __name__ == "__main__":
    import warnings

    manifest, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--part-mib", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=8)
    args = parser.parse_args(rest)
    state = build_state(args)
    parts = split_parts(tensor_views(state), args.part_mib * 2**20)
    # aiohttp warns about bodies over 1 MiB given as bytes-like objects.
    warnings.simplefilter("ignore", ResourceWarning)
    watch, loop = run(main(manifest.endpoint, manifest.bucket, parts, args.in_flight))
    report(watch, nbytes=state_bytes(state), items=1, loop=loop, parts=len(parts),
           part_mib=args.part_mib, in_flight=args.in_flight)
