import pickle
import subprocess
import sys
import traceback

import pytest

import aioflux
from aioflux import (
    AiofluxError,
    ChecksumMismatch,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    ProtocolError,
    RateLimited,
    ServerError,
    StorageError,
    TLSError,
    TransportError,
)
from aioflux._core.errors import error_for_status


@pytest.mark.parametrize(
    ("status", "cls"),
    [(404, NotFound), (403, PermissionDenied), (401, PermissionDenied),
     (412, PreconditionFailed), (429, RateLimited), (503, ServerError), (408, ServerError),
     (400, InvalidRequest), (416, InvalidRequest), (304, PreconditionFailed),
     (301, ProtocolError), (302, ProtocolError), (307, ProtocolError), (308, ProtocolError)],
)
def test_status_maps_to_specific_class(status: int, cls: type[StorageError]) -> None:
    err = error_for_status(status, "boom", operation="read", bucket="b", name="o")
    assert type(err) is cls
    assert "read gs://b/o" in str(err)
    assert str(status) in str(err)


def test_builtin_mixins() -> None:
    assert isinstance(error_for_status(404, "", operation="stat"), FileNotFoundError)
    assert isinstance(error_for_status(403, "", operation="stat"), PermissionError)
    assert isinstance(error_for_status(400, "", operation="stat"), ValueError)
    assert isinstance(TLSError("x"), (TransportError, ConnectionError))


@pytest.mark.parametrize("cls", [NotFound, PermissionDenied, ChecksumMismatch, RateLimited,
                                 ProtocolError, TLSError])
def test_errors_survive_pickling(cls: type[StorageError]) -> None:
    err = cls("read gs://b/o failed", operation="read", bucket="b", name="o", status=404,
              reason="notFound", attempts=3)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err)
    assert (back.operation, back.bucket, back.name, back.status, back.reason, back.attempts) == (
        "read", "b", "o", 404, "notFound", 3)


def test_detail_is_shortened_and_single_line() -> None:
    err = error_for_status(500, "x\n" * 1000, operation="read", bucket="b", name="o")
    assert "\n" not in str(err)
    assert len(str(err)) < 400


ERRORS = sorted(name for name in aioflux.__all__
                if isinstance(getattr(aioflux, name), type)
                and issubclass(getattr(aioflux, name), AiofluxError))


# The errors that are no StorageError (no status attribute).
PLAIN = {"AiofluxError", "BridgeError", "InvalidArgument", "InvalidURL", "ShardFormatError"}


def test_every_exported_error_is_checked() -> None:
    assert len(ERRORS) == 17 and "NotFound" in ERRORS and "AiofluxError" in ERRORS


@pytest.mark.parametrize("name", ERRORS)
def test_errors_are_named_as_users_import_them(name: str) -> None:
    # Tracebacks once showed aioflux._core.errors.NotFound.
    cls = getattr(aioflux, name)
    assert f"{cls.__module__}.{cls.__qualname__}" == f"aioflux.{name}"
    err = cls("read gs://b/o failed")
    assert traceback.format_exception_only(err) == [f"aioflux.{name}: read gs://b/o failed\n"]


def test_errors_unpickle_in_a_fresh_interpreter() -> None:
    # As a spawn worker's error reaches its parent: pickled by the public name.
    errors = [getattr(aioflux, name)("read gs://b/o failed") for name in ERRORS]
    errors[ERRORS.index("NotFound")] = NotFound("read gs://b/o failed", operation="read",
                                               bucket="b", name="o", status=404)
    code = ("import pickle, sys\n"
            "for e in pickle.load(sys.stdin.buffer):\n"
            "    print(type(e).__module__, type(e).__qualname__, getattr(e, 'status', '-'))\n")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(errors),
                         capture_output=True, check=True).stdout.decode().splitlines()
    statuses = {"NotFound": "404"}
    assert out == [f"aioflux {name} {statuses.get(name, '-' if name in PLAIN else 'None')}"
                   for name in ERRORS]


def test_a_note_is_kept_where_python_has_no_add_note() -> None:
    # Python 3.10 (supported) has no BaseException.add_note: called bare, it
    # raised AttributeError in place of the error it was to annotate.
    from aioflux._core.errors import add_note

    class OnPython310(Exception):
        add_note = None

    exc = OnPython310("the user's error")
    add_note(exc, "first")
    add_note(exc, "second")
    assert exc.__notes__ == ["first", "second"]
    native = ValueError("x")
    add_note(native, "noted")
    assert native.__notes__ == ["noted"]
