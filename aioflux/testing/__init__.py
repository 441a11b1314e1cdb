"""A fast, faithful Google Cloud Storage emulator for tests and benchmarks.

JSON API (buckets, list with every paging parameter, metadata, ranged media
download, media / multipart / resumable upload, compose, rewrite, copy,
delete) and XML API (GET / HEAD / PUT / DELETE and multipart upload), with
GCS-shaped error bodies, time to first byte, per-connection bandwidth, a
QPS cap and fault injection (429, 503, mid-body resets and stalls); a
path-style S3 API over the same store, knobs and faults on a second port
(``Emulator.s3_endpoint``: objects, ranges, checksums, conditional writes,
ListObjectsV2, multipart uploads, copy, batch delete, S3 error documents,
``aws-chunked`` bodies); and
:class:`FaultProxy`, a TCP proxy that cuts connections at random points
of the byte stream in front of any HTTP server (fake-gcs-server included);
and :class:`FakeHub`, a Hugging Face Hub and its CDN that the real
``huggingface_hub`` client and HF ``datasets`` streaming read from.

Without any server: :class:`MemoryStore`, an in-memory object store (the
``ObjectStore`` protocol, with generations, preconditions, compose and
multipart uploads), and :class:`MockTransport`, which runs the GCS client's
logic (handlers, error mapping, retries, checked reads) against a function
answering :class:`MockRequest` with :class:`MockResponse`.

Example::

    from aioflux.testing import GCS_LIKE_PROFILE, running_emulator

    with running_emulator(profile=GCS_LIKE_PROFILE) as emu:
        emu.create_bucket("data")
        os.environ["STORAGE_EMULATOR_HOST"] = emu.endpoint
        s3 = botocore_session.create_client("s3", endpoint_url=emu.s3_endpoint, ...)
"""

from __future__ import annotations

from aioflux.testing._errors import ApiError
from aioflux.testing._fake_gcs import fake_gcs_server
from aioflux.testing._fault_proxy import FaultProxy, ProxyStats
from aioflux.testing._hub import FakeHub, HubRequest
from aioflux.testing._memory import MemoryStore
from aioflux.testing._mock import MockRequest, MockResponse, MockTransport
from aioflux.testing._profile import GCS_LIKE_PROFILE, EmulatorProfile, Faults
from aioflux.testing._serve import serve_main
from aioflux.testing._server import Emulator, running_emulator

__all__ = [
    "GCS_LIKE_PROFILE",
    "ApiError",
    "Emulator",
    "EmulatorProfile",
    "FakeHub",
    "FaultProxy",
    "Faults",
    "HubRequest",
    "MemoryStore",
    "MockRequest",
    "MockResponse",
    "MockTransport",
    "ProxyStats",
    "fake_gcs_server",
    "running_emulator",
    "serve_main",
]
