"""A broken AWS configuration is a PermissionDenied that says what to fix.

botocore raises its own exceptions (ProfileNotFound, ConfigParseError,
CredentialRetrievalError...) or a bare OSError (a credential_process that
does not exist) while it reads ``~/.aws`` and resolves credentials; the S3
store turns each into a PermissionDenied naming the profile or file, with
no secret in it. Only "no credentials at all" still means anonymous access.

Every test points ``AWS_CONFIG_FILE`` / ``AWS_SHARED_CREDENTIALS_FILE`` at
files in ``tmp_path`` (never the real home).
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import CredentialRetrievalError

from aioflux import PermissionDenied
from aioflux._api import stores
from aioflux._api.stores import store_for_url
from aioflux._core.auth import AnonymousAuth, AuthRequest
from aioflux.s3 import S3Store
from aioflux.s3._auth import SigV4, session_region

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
ENDPOINT = "http://127.0.0.1:9"


def _region(_url: str) -> str:
    return "us-east-1"


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Empty config and credentials files, and no credentials in the environment."""
    config, credentials = tmp_path / "config", tmp_path / "credentials"
    config.write_text("")
    credentials.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    return config, credentials


def _raised(call: object) -> PermissionDenied:
    assert callable(call)
    with pytest.raises(PermissionDenied) as info:
        call()
    exc = info.value
    assert exc.__cause__ is not None  # raise ... from botocore's exception
    assert SECRET not in str(exc)
    # It crosses to a DataLoader worker's parent intact.
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is PermissionDenied and str(again) == str(exc)
    return exc


def test_a_missing_profile_from_aws_profile_is_named(aws_files: tuple[Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = aws_files
    monkeypatch.setenv("AWS_PROFILE", "nope")
    for call in (lambda: SigV4.found(_region),
                 lambda: session_region(),
                 lambda: S3Store(endpoint=ENDPOINT, region="us-east-1"),
                 lambda: S3Store(endpoint=ENDPOINT)):
        exc = _raised(call)
        assert exc.reason == "ProfileNotFound"
        message = str(exc)
        assert "'nope'" in message and "AWS_PROFILE" in message and str(config) in message
        assert "\n" not in message


def test_a_missing_profile_argument_is_named(aws_files: tuple[Path, Path]) -> None:
    exc = _raised(lambda: S3Store(endpoint=ENDPOINT, region="us-east-1", profile="typo"))
    assert "profile 'typo'" in str(exc) and "profile=" in str(exc)


def test_an_unparsable_config_gives_its_path_and_line_not_its_text(
        aws_files: tuple[Path, Path]) -> None:
    config, _ = aws_files
    # A key pasted without "=": the line botocore cannot parse is a secret.
    config.write_text(f"[default]\nregion = us-east-1\naws_secret_access_key {SECRET}\n")
    for call in (lambda: session_region(), lambda: SigV4.found(_region)):
        exc = _raised(call)
        assert exc.reason == "ConfigParseError"
        assert str(config) in str(exc) and "line 3" in str(exc)


def test_an_unparsable_credentials_file_is_named(aws_files: tuple[Path, Path]) -> None:
    _, credentials = aws_files
    credentials.write_text(f"[default\naws_secret_access_key = {SECRET}\n")
    exc = _raised(lambda: S3Store(endpoint=ENDPOINT, region="us-east-1"))
    assert str(credentials) in str(exc)


def test_a_credential_process_that_does_not_exist_says_so(aws_files: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    config, _ = aws_files
    program = tmp_path / "no-such-helper"
    config.write_text(f"[profile p]\ncredential_process = {program} --token {SECRET}\n")
    exc = _raised(lambda: S3Store(endpoint=ENDPOINT, region="us-east-1", profile="p"))
    message = str(exc)
    assert "credential_process" in message and str(program) in message
    assert "profile 'p'" in message and str(config) in message


def test_a_failing_credential_process_is_translated(aws_files: tuple[Path, Path]) -> None:
    config, _ = aws_files
    config.write_text("[profile p]\ncredential_process = sh -c 'echo expired >&2; exit 3'\n")
    exc = _raised(lambda: SigV4.found(_region, profile="p"))
    assert exc.reason == "CredentialRetrievalError"
    assert "profile 'p'" in str(exc) and "expired" in str(exc)


def test_partial_credentials_are_translated(aws_files: tuple[Path, Path]) -> None:
    _, credentials = aws_files
    credentials.write_text("[default]\naws_access_key_id = AKIAEXAMPLE\n")
    exc = _raised(lambda: SigV4.found(_region))
    assert exc.reason == "PartialCredentialsError" and "aws_secret_access_key" in str(exc)


def test_no_credentials_at_all_is_still_anonymous(aws_files: tuple[Path, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert SigV4.found(_region) is None
    store = S3Store(endpoint=ENDPOINT, region="us-east-1")
    assert isinstance(store.transport.auth, AnonymousAuth)


async def test_a_refresh_that_fails_is_translated(aws_files: tuple[Path, Path]) -> None:
    def refresh() -> dict[str, str]:
        raise CredentialRetrievalError(provider="sso", error_msg="token expired")

    expired = (datetime.datetime.now(datetime.timezone.utc)
               - datetime.timedelta(hours=1)).isoformat()
    credentials = RefreshableCredentials.create_from_metadata(
        {"access_key": "AKIAEXAMPLE", "secret_key": SECRET, "token": "t",
         "expiry_time": expired}, refresh, "sso")
    signer = SigV4(_region, credentials=credentials, profile="p")
    with pytest.raises(PermissionDenied, match=r"profile 'p'.*token expired") as info:
        await signer.headers(AuthRequest("GET", f"{ENDPOINT}/bkt/k"))
    assert isinstance(info.value.__cause__, CredentialRetrievalError)
    assert SECRET not in str(info.value)


# -- the chain, resolved off the event loop -------------------------------------------------


@dataclass(frozen=True)
class SlowProcess:
    """A credential_process that waits for the test's word.

    Attributes:
        runs: the file it appends a line to per run.
        go: the file whose existence lets it answer.
    """

    runs: Path
    go: Path


@pytest.fixture
def slow_process(aws_files: tuple[Path, Path], tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> SlowProcess:
    """A default profile whose credential_process answers once the file
    ``go`` exists (it fails after 30 s without it)."""
    config, _ = aws_files
    process = SlowProcess(tmp_path / "runs", tmp_path / "go")
    program = tmp_path / "cred.py"
    program.write_text(
        "import json, os, sys, time\n"
        f"open({str(process.runs)!r}, 'a').write('run\\n')\n"
        "deadline = time.monotonic() + 30\n"
        f"while not os.path.exists({str(process.go)!r}):\n"
        "    if time.monotonic() > deadline:\n"
        "        sys.exit('the test never said go: its loop was blocked')\n"
        "    time.sleep(0.005)\n"
        "print(json.dumps({'Version': 1, 'AccessKeyId': 'AKIDPROCESS',\n"
        f"                  'SecretAccessKey': {SECRET!r}}}))\n")
    config.write_text(f"[default]\ncredential_process = {sys.executable} {program}\n")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", ENDPOINT)
    monkeypatch.setattr(stores, "_defaults", {})
    return process


async def test_the_url_api_resolves_the_chain_off_the_loop(slow_process: SlowProcess) -> None:
    # The credential_process answers only once the loop has run on while it
    # runs (three beats after it started): resolved on the loop, as it once
    # was, the loop could not beat, and the process gave up (no credentials).
    # Counts and files, no clock: a slow machine only takes longer.
    beats_while_running = 0

    async def heartbeat() -> None:
        nonlocal beats_while_running
        while True:
            await asyncio.sleep(0.01)
            if slow_process.runs.exists():
                beats_while_running += 1
                if beats_while_running == 3:
                    slow_process.go.touch()

    beating = asyncio.create_task(heartbeat())
    store, _ = store_for_url("s3://bkt/k")  # what alist_files / aopen do on the loop
    request = AuthRequest("GET", f"{ENDPOINT}/bkt/k")
    signed = await asyncio.wait_for(asyncio.gather(
        *(store.transport.auth.headers(request) for _ in range(5))), 60)
    beating.cancel()
    assert beats_while_running >= 3
    assert all("Credential=AKIDPROCESS/" in h["Authorization"] for h in signed)
    assert slow_process.runs.read_text().count("run") == 1  # one lookup for the burst
    assert SECRET not in repr(store.transport.auth)


def test_off_a_loop_the_chain_is_still_resolved_at_construction(
        slow_process: SlowProcess) -> None:
    slow_process.go.touch()
    store = stores.new_store("s3")
    assert isinstance(store.transport.auth, SigV4)
    assert slow_process.runs.read_text().count("run") == 1


async def test_a_deferred_chain_reports_a_broken_profile_at_the_first_request(
        aws_files: tuple[Path, Path]) -> None:
    config, _ = aws_files
    config.write_text("[default]\ncredential_process = sh -c 'echo expired >&2; exit 3'\n")
    store = S3Store(endpoint=ENDPOINT, region="us-east-1", defer_credentials=True)
    request = AuthRequest("GET", f"{ENDPOINT}/bkt/k")
    for _ in range(2):  # a failure is not kept: the next request looks again
        with pytest.raises(PermissionDenied, match="expired") as info:
            await store.transport.auth.headers(request)
        assert info.value.reason == "CredentialRetrievalError"
    # Pickled by its settings, deferral included.
    again = pickle.loads(pickle.dumps(store))
    assert type(again.transport.auth).__name__ == "ChainAuth"


async def test_a_deferred_chain_without_credentials_is_anonymous(
        aws_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3Store(endpoint=ENDPOINT, region="us-east-1", defer_credentials=True)
    assert await store.transport.auth.headers(AuthRequest("GET", f"{ENDPOINT}/bkt/k")) == {}
