"""The public surface is exactly what is documented (the API reference and docstrings)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

DOCUMENTED = {
    # The API reference's "Public API": what a user needs. Engine and portal internals
    # (``call``, ``submit``, ``get_portal``, writers, readers, the listing
    # engine, clean-up) stay importable from their private modules only.
    "aioflux": {
        "AiofluxError", "AzureStore", "BridgeError", "ChecksumMismatch", "Client",
        "ClientConfig", "Conflict", "DownloadOptions", "DownloadStats", "Downloader",
        "GcsStore", "HfStore", "HttpStore", "InvalidArgument", "InvalidRequest", "InvalidURL",
        "ListPage", "LocalStore", "MultipartUploadInfo", "NotFound", "ObjectInfo", "ObjectStore",
        "PartInfo", "PermissionDenied", "PreconditionFailed",
        "ProtocolError", "RateLimited", "ReaderOptions", "RetryPolicy", "S3Store", "ServerError",
        "ShardFormatError",
        "StorageError", "StoreURL", "StreamItem", "SyncStore", "TLSError", "Timeouts",
        "TransportError", "UnclosedWriterWarning", "WriterOptions", "__version__", "alist_files",
        "aload_files", "list_files", "load_files", "open", "parse_url",
    },
    "aioflux.torch": {
        "Checkpoint", "CheckpointInfo", "CheckpointManager", "DatasetSettings",
        "ObjectIterableDataset", "ObjectMapDataset", "Order", "Parquet",
        "ResumableBatchSampler", "ResumableSampler",
        "SaveFuture", "SaveRecord", "ShardDataset", "ShardMapDataset", "ShardReads",
        "ShardWriter",
    },
    "aioflux.otel": {"instrument"},
    "aioflux.fsspec": {"AiofluxFileSystem", "TouchRefused", "register"},
    "aioflux.azure": {"AzureStore"},
    "aioflux.http": {"HttpStore"},
    "aioflux.hf": {"HfStore"},
    "aioflux.torch.dcp": {"DcpReader", "DcpWriter", "GcsFileSystem"},
    "aioflux.torch.lightning": {"AsyncGcsCheckpointIO", "GcsCheckpointIO"},
    "aioflux.testing": {
        "ApiError", "Emulator", "EmulatorProfile", "FakeHub", "FaultProxy", "Faults",
        "GCS_LIKE_PROFILE", "HubRequest", "MemoryStore", "MockRequest", "MockResponse",
        "MockTransport", "ProxyStats", "fake_gcs_server", "running_emulator", "serve_main",
    },
}
# Packages re-export only; modules (dcp, lightning) also hold their imports.
PACKAGES = {"aioflux", "aioflux.torch", "aioflux.testing", "aioflux.fsspec", "aioflux.azure",
            "aioflux.http", "aioflux.hf"}
REMOVED_FROM_ROOT = {
    "call": "aioflux._core.concurrency.portal",
    "submit": "aioflux._core.concurrency.portal",
    "get_portal": "aioflux._core.concurrency.portal",
    "ObjectReader": "aioflux._engines.reader",
    "ObjectWriter": "aioflux._engines.writer",
    "AsyncObjectWriter": "aioflux._engines.async_writer",
    "ResumableUpload": "aioflux.gcs._resumable",
    "COMPOSED_PREFIX": "aioflux._engines.compose",
    "list_objects_parallel": "aioflux._engines.listing",
    "clean_bucket": "aioflux._engines.clean",
    "CleanReport": "aioflux._engines.clean",
}
# help(aioflux) ran 3,411 lines with the engine internals exported, then
# ~3,270; with the second backend (LocalStore), the ObjectStore protocol,
# StoreURL and the writer/reader options ~3,800 on CPython 3.11, most of it
# the error classes' inherited members and the stores' methods; with the
# third backend (S3Store) ~4,140; with the integrity and cancellation
# options documented on the stores and clients ~4,260; with ShardFormatError
# (its inherited ValueError members) ~4,415; with every public method's
# parameters documented for the API reference (the ObjectStore protocol's
# Args, Returns and Raises, the stores' fetch, the records' fields) ~4,740;
# with the requester-pays settings (user_project, requester_pays) ~4,865;
# with every store's URLs and client named in open / list_files /
# load_files ~4,900; with the request rate's settings (request_rate,
# rate_doubling, throttle_deadline) ~4,930; with UnclosedWriterWarning (pydoc
# lists a warning's inherited members too) ~5,015; with the stores' operations
# documented once, by ObjectStore, each naming every error it raises (what
# StoreBase's copies said besides: InvalidURL, "replaced while it was read"...)
# ~5,120; with DownloadOptions.min_sources (the fewest sources worth a
# composite) ~5,142; with LocalStore.read_ranges (a DataLoader worker's
# samples of a file in one hand-off) ~5,153; with the stores named and
# exported alike (GcsStore for AsyncClient, now an alias outside __all__;
# AzureStore and HttpStore at the root, ~860) and the one blocking face of
# every store (SyncStore, ~370, its methods' docstrings the protocol's; the
# hand-written Client twin replaced by SyncStore's GCS face), less GcsURL
# and download_many (deprecated), ~6,437; with HfStore at the root beside
# the other stores (~366), ~6,803; with GcsStore pickled by its arguments
# as the other stores are (its __getstate__ and __setstate__), ~6,817; with
# RetryPolicy and Timeouts saying a read resumes past max_attempts and total,
# ~6,823. A new export shows up here.
HELP_LINES_MAX = 6_826


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_exported_members_are_exactly_the_documented_ones(module_name: str) -> None:
    if module_name == "aioflux.torch.lightning":
        pytest.importorskip("lightning")
    module = importlib.import_module(module_name)
    assert set(module.__all__) == DOCUMENTED[module_name]
    if module_name in PACKAGES:
        # dir(), not vars(): aioflux imports each name on first use (its
        # __dir__ lists them all, and getattr imports them).
        public = {n for n, v in ((n, getattr(module, n)) for n in dir(module))
                  if not n.startswith("_") and not isinstance(v, types.ModuleType)
                  and n != "annotations"}
    else:
        # Classes and functions the module defines itself (not its imports).
        public = {n for n, v in vars(module).items()
                  if not n.startswith("_") and callable(v)
                  and getattr(v, "__module__", None) == module_name}
    assert public == DOCUMENTED[module_name] - {"__version__"}


def _reference_section(title: str) -> str:
    index = Path(__file__).resolve().parents[2] / "docs" / "reference" / "index.md"
    return re.split(r"\n#+ ", index.read_text().split(f"\n{title}\n", 1)[1], maxsplit=1)[0]


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_the_reference_lists_every_export(module_name: str) -> None:
    # The API reference's Public API list names each module's exports (the
    # errors of the root are in its Errors section), so none is public only
    # by accident.
    bullets = re.split(r"\n- ", _reference_section("## Public API"))
    (bullet,) = [b for b in bullets if b.startswith(f"`{module_name}`:")]
    listed = set(re.findall(r"`([A-Za-z_][\w.]*)`", bullet))
    if module_name == "aioflux":
        listed |= set(re.findall(r"`([A-Za-z_]\w*)`", _reference_section("## Errors")))
    assert DOCUMENTED[module_name] <= listed, sorted(DOCUMENTED[module_name] - listed)


@pytest.mark.parametrize(("name", "home"), sorted(REMOVED_FROM_ROOT.items()))
def test_internals_left_the_root_but_stay_importable(name: str, home: str) -> None:
    import aioflux

    assert not hasattr(aioflux, name)
    assert getattr(importlib.import_module(home), name) is not None


def test_help_of_aioflux_is_short_and_shows_no_private_base() -> None:
    # In a fresh interpreter, as a user sees it: a class pickled earlier in
    # the test process (a ClientConfig sent to a spawned DataLoader worker)
    # shows copyreg's cached __slotnames__ in help() too.
    code = "import aioflux, pydoc; print(pydoc.render_doc(aioflux, renderer=pydoc.plaintext))"
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout
    assert len(text.splitlines()) <= HELP_LINES_MAX
    assert "aioflux._engines.writer." not in text and "_PublishOnExit" not in text


def test_import_aioflux_does_not_import_torch() -> None:
    code = "import sys, aioflux; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_import_aioflux_and_gs_file_stores_do_not_import_botocore() -> None:
    # botocore is the s3 extra's: only building an S3Store loads it.
    code = ("import sys, aioflux; from aioflux._api.stores import default_store; "
            "default_store('gs'); default_store('file'); print('botocore' in sys.modules); "
            "default_store('s3'); print('botocore' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
