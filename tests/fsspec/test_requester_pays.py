"""The billing of requester-pays buckets, as fsspec callers spell it:
aioflux's ``user_project=`` (gs) and ``requester_pays=True`` (s3), gcsfs's
``requester_pays=True`` with ``project=`` or ``requester_pays="project"``,
s3fs's ``requester_pays=True``. Each reaches the store (its requests to a
requester-pays bucket of our emulator succeed), and what cannot be meant is
refused, not dropped."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from aioflux import InvalidArgument
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem
from aioflux.fsspec._options import settings_of
from aioflux.testing import Emulator
from tests.conftest import unique_bucket
from tests.fsspec.conftest import CONFIG

DATA = b"paid for by the reader"


@pytest.mark.parametrize(("options", "project"), [
    ({"user_project": "mine"}, "mine"),
    ({"requester_pays": True, "project": "mine"}, "mine"),
    ({"requester_pays": "mine"}, "mine"),
    ({"requester_pays": "mine", "user_project": "mine"}, "mine"),
    ({"requester_pays": False}, None),
    ({}, None),
])
def test_gcs_spellings_of_the_project_to_bill(options: dict[str, Any],
                                              project: str | None) -> None:
    settings = settings_of("gs", None, None, None, dict(options))
    assert settings.user_project == project and settings.requester_pays is None
    assert settings.fsspec == {}


@pytest.mark.parametrize(("options", "refusal"), [
    ({"requester_pays": True}, "requester_pays=True bills project=, which is not given"),
    ({"requester_pays": "mine", "user_project": "other"}, "the user project given twice"),
    ({"requester_pays": 1}, "requester_pays must be True"),
    ({"user_project": 7}, "user_project must be the project to bill"),
    # gcsfs's project= bills nothing without requester_pays=True.
    ({"project": "mine"}, "'project' is not a setting"),
])
def test_gcs_settings_that_cannot_be_meant_are_refused(options: dict[str, Any],
                                                       refusal: str) -> None:
    with pytest.raises(InvalidArgument, match=refusal):
        settings_of("gs", None, None, None, dict(options))


def test_s3_spellings_and_refusals() -> None:
    assert settings_of("s3", None, None, None, {"requester_pays": True}).requester_pays is True
    assert settings_of("s3", None, None, None, {"requester_pays": False}).requester_pays is False
    assert settings_of("s3", None, None, None, {}).requester_pays is None
    with pytest.raises(InvalidArgument, match="requester_pays must be True or False"):
        settings_of("s3", None, None, None, {"requester_pays": "yes"})
    with pytest.raises(InvalidArgument, match="'user_project' is not a setting"):
        settings_of("s3", None, None, None, {"user_project": "mine"})
    for scheme in ("file", "az"):
        with pytest.raises(InvalidArgument, match="'requester_pays' is not a setting"):
            settings_of(scheme, None, None, None, {"requester_pays": True})


@pytest.fixture
def paid(emulator: Emulator) -> str:
    name = emulator.create_bucket(unique_bucket("fs-rp"), requester_pays=True)
    emulator.store.put(name, "d/x", DATA)
    return name


@pytest.mark.parametrize("options", [
    {"user_project": "mine"},
    {"requester_pays": True, "project": "mine"},
    {"requester_pays": "mine"},
], ids=["aioflux", "gcsfs-true", "gcsfs-project"])
def test_a_gcs_filesystem_bills_the_project_given(emulator: Emulator, paid: str,
                                                  options: dict[str, Any]) -> None:
    fs = AiofluxFileSystem("gs", config=CONFIG, endpoint=emulator.endpoint,
                           skip_instance_cache=True, **options)
    try:
        assert fs.store.user_project == "mine"  # type: ignore[attr-defined]
        assert fs.cat_file(f"{paid}/d/x") == DATA
        fs.pipe_file(f"{paid}/d/y", b"written")
        assert fs.ls(f"{paid}/d", detail=False) == [f"{paid}/d/x", f"{paid}/d/y"]
        # A spawned worker's copy bills the same project.
        copy = pickle.loads(pickle.dumps(fs))
        assert copy.store.user_project == "mine"
        call(copy.store.aclose())
    finally:
        call(fs.store.aclose())


def test_a_gcs_filesystem_without_a_project_says_what_to_set(emulator: Emulator,
                                                             paid: str) -> None:
    fs = AiofluxFileSystem("gs", config=CONFIG, endpoint=emulator.endpoint,
                           skip_instance_cache=True)
    try:
        with pytest.raises(PermissionError, match="user_project="):
            fs.cat_file(f"{paid}/d/x")
    finally:
        call(fs.store.aclose())


def test_an_s3_filesystem_accepts_the_charges_when_asked(emulator: Emulator,
                                                         paid: str) -> None:
    paying = AiofluxFileSystem("s3", config=CONFIG, endpoint=emulator.s3_endpoint,
                               region="us-east-1", requester_pays=True,
                               skip_instance_cache=True)
    refusing = AiofluxFileSystem("s3", config=CONFIG, endpoint=emulator.s3_endpoint,
                                 region="us-east-1", skip_instance_cache=True)
    try:
        assert paying.cat_file(f"{paid}/d/x") == DATA
        assert paying.ls(f"{paid}/d", detail=False) == [f"{paid}/d/x"]
        with pytest.raises(PermissionError, match="requester_pays=True"):
            refusing.cat_file(f"{paid}/d/x")
    finally:
        call(paying.store.aclose())
        call(refusing.store.aclose())
