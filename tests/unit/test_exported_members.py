"""The public surface is exactly what is documented."""

import aioflux

DOCUMENTED = {
    "AiofluxError", "AsyncClient", "BridgeError", "ChecksumMismatch", "Client", "ClientConfig",
    "Conflict", "GcsURL", "InvalidArgument", "InvalidRequest", "InvalidURL", "ListPage",
    "MultipartUploadInfo", "NotFound", "ObjectInfo", "PartInfo", "PermissionDenied",
    "PreconditionFailed", "RateLimited", "ResumableUpload", "RetryPolicy", "ServerError",
    "StorageError", "Timeouts", "TransportError", "__version__", "call", "get_portal",
    "parse_url", "submit",
}


def test_exported_members_are_documented() -> None:
    exported = set(aioflux.__all__)
    assert exported >= DOCUMENTED, DOCUMENTED - exported
    for name in exported:
        assert hasattr(aioflux, name), name
    public = {n for n in vars(aioflux) if not n.startswith("_") and n not in
              {"annotations", "cli", "testing", "torch"}} - {"_"}
    import types

    public = {n for n in public if not isinstance(getattr(aioflux, n), types.ModuleType)}
    assert public == exported - {"__version__"}


def test_import_aioflux_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, aioflux; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
