"""``hf://`` URLs in the forms huggingface_hub's HfFileSystem takes, the
bucket they are written as, and the wait a 429's headers ask for."""

from __future__ import annotations

import pytest

from aioflux import InvalidURL, parse_url
from aioflux._core.records.hub_paths import hub_repo
from aioflux._net.web import wait_of


@pytest.mark.parametrize(("url", "bucket", "name"), [
    ("hf://datasets/org/ds/data/train.parquet", "datasets/org/ds", "data/train.parquet"),
    ("hf://datasets/org/ds", "datasets/org/ds", ""),
    ("hf://org/model/model.safetensors", "models/org/model", "model.safetensors"),
    ("hf://models/org/model@v1.0/a/b.bin", "models/org/model@v1.0", "a/b.bin"),
    ("hf://spaces/org/app@main/app.py", "spaces/org/app@main", "app.py"),
    ("hf://datasets/org/ds@refs%2Fconvert%2Fparquet/default/train/0000.parquet",
     "datasets/org/ds@refs%2Fconvert%2Fparquet", "default/train/0000.parquet"),
    # HfFileSystem's special refs, written with their '/'.
    ("hf://datasets/org/ds@refs/convert/parquet/default/train/0000.parquet",
     "datasets/org/ds@refs%2Fconvert%2Fparquet", "default/train/0000.parquet"),
    ("hf://org/model@refs/pr/3/w.bin", "models/org/model@refs%2Fpr%2F3", "w.bin"),
    # An '@' past the repo id is a file's.
    ("hf://datasets/org/ds/file@1.txt", "datasets/org/ds", "file@1.txt"),
    ("hf://datasets/org/ds@" + "a" * 40 + "/x", "datasets/org/ds@" + "a" * 40, "x"),
])
def test_the_forms_hffilesystem_accepts(url: str, bucket: str, name: str) -> None:
    parsed = parse_url(url)
    assert (parsed.scheme, parsed.bucket, parsed.name) == ("hf", bucket, name)
    again = parse_url(str(parsed))
    assert (again.bucket, again.name) == (bucket, name)


def test_the_bucket_names_the_repo_and_decoded_revision() -> None:
    repo = hub_repo("datasets/org/ds@refs%2Fconvert%2Fparquet")
    assert (repo.type, repo.id, repo.revision) == ("dataset", "org/ds", "refs/convert/parquet")
    assert (repo.api_path, repo.web_path) == ("datasets/org/ds", "datasets/org/ds")
    model = hub_repo("models/org/m")
    assert (model.revision, model.web_path) == (None, "org/m")


@pytest.mark.parametrize(("url", "says"), [
    ("hf://dataset/org/ds/x", "plural"),
    ("hf://gpt2", "org/name"),
    ("hf://datasets/org", "org/name"),
    ("hf://buckets/org/b/x", "not served"),
    ("hf://datasets/org/ds@/x", "empty"),
    ("hf://datasets/-bad/ds/x", "repo id"),
    ("hf:/datasets/org/ds", "lacks"),
])
def test_what_is_not_a_repo_is_refused(url: str, says: str) -> None:
    with pytest.raises(InvalidURL, match=says):
        parse_url(url)


@pytest.mark.parametrize(("headers", "wait"), [
    ({"Retry-After": "7"}, 7.0),
    ({"RateLimit": '"api";r=0;t=55'}, 55.0),
    ({"Retry-After": "2", "RateLimit": '"api";r=0;t=55'}, 2.0),
    ({"RateLimit": '"api";r=12;t=55'}, None),  # requests left: no wait
    ({}, None),
])
def test_the_wait_a_429_asks_for(headers: dict[str, str], wait: float | None) -> None:
    assert wait_of(headers) == wait
