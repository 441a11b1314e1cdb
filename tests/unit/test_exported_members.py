"""The public surface is exactly what is documented (README and docstrings)."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

DOCUMENTED = {
    "aioflux": {
        "AiofluxError", "AsyncClient", "AsyncObjectWriter", "BridgeError", "COMPOSED_PREFIX",
        "ChecksumMismatch", "CleanReport", "Client", "ClientConfig", "Conflict",
        "DownloadOptions", "DownloadStats", "Downloader", "GcsURL", "InvalidArgument",
        "InvalidRequest", "InvalidURL", "ListPage", "MultipartUploadInfo", "NotFound",
        "ObjectInfo", "ObjectReader", "ObjectWriter", "PartInfo", "PermissionDenied",
        "PreconditionFailed", "RateLimited", "ResumableUpload", "RetryPolicy", "ServerError",
        "StorageError", "StreamItem", "Timeouts", "TransportError", "__version__",
        "alist_files", "aload_files", "call", "clean_bucket", "download_many", "get_portal",
        "list_files", "list_objects_parallel", "load_files", "open", "parse_url", "submit",
    },
    "aioflux.torch": {
        "Checkpoint", "CheckpointInfo", "CheckpointManager", "IterableDataset", "MapDataset",
        "SaveFuture", "SaveRecord", "list_files", "load_files",
    },
    "aioflux.testing": {
        "Emulator", "EmulatorProfile", "FaultProxy", "Faults", "GCS_LIKE_PROFILE",
        "ProxyStats", "fake_gcs_server", "running_emulator", "serve_main",
    },
}


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_exported_members_are_exactly_the_documented_ones(module_name: str) -> None:
    module = __import__(module_name, fromlist=["__all__"])
    assert set(module.__all__) == DOCUMENTED[module_name]
    public = {n for n, v in vars(module).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)
              and n != "annotations"}
    assert public == DOCUMENTED[module_name] - {"__version__"}


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_public_items_have_docstrings(module_name: str) -> None:
    module = __import__(module_name, fromlist=["__all__"])
    for name in module.__all__:
        item = getattr(module, name)
        if callable(item) and not isinstance(item, type(Exception)):
            assert item.__doc__ and item.__doc__.strip(), f"{module_name}.{name}"


def test_import_aioflux_does_not_import_torch() -> None:
    code = "import sys, aioflux; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
