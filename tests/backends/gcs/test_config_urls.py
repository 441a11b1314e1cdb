import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioflux import ClientConfig, InvalidURL, RetryPolicy, StoreURL, Timeouts, parse_url


def test_parse_url() -> None:
    assert parse_url("gs://my-bucket/a/b c.txt") == StoreURL("my-bucket", "a/b c.txt")
    assert parse_url("gs://my-bucket") == StoreURL("my-bucket", "")
    assert str(StoreURL("bkt", "x").join("y/", "/z")) == "gs://bkt/x/y/z"


@pytest.mark.parametrize("url", ["s3://b/o", "gs://", "gs://A/o", "gs://ab/o", "gs://-bad/o",
                                 "gs://b" + "x" * 70 + "/o", "gs://bkt/a\nb"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidURL):
        parse_url(url)


# A known scheme without "//" used to be read as a relative path, so
# CheckpointManager("gs:/b/run1") wrote to ./gs:/b/run1 on local disk.
@pytest.mark.parametrize(("url", "fix"), [
    ("gs:/my-bucket/run1", "did you mean gs://my-bucket/run1?"),
    ("s3:/my-bucket/x", "did you mean s3://my-bucket/x?"),
    ("gs:my-bucket", "did you mean gs://my-bucket?"),
    ("s3:my-bucket/x", "did you mean s3://my-bucket/x?"),
    ("GS:/my-bucket/x", "did you mean gs://my-bucket/x?"),
    ("S3:my-bucket", "did you mean s3://my-bucket?"),
    ("gs:", "use gs://bucket/name"),
    ("file:/tmp/x", "did you mean file:///tmp/x?"),
    ("File:/tmp/x", "did you mean file:///tmp/x?"),
    ("file:tmp/x", "use file:///absolute/path or a plain path"),
    # pathlib collapses "//": Path("gs://b") / "x" is "gs:/b/x".
    (Path("gs://my-bucket") / "x", "did you mean gs://my-bucket/x?"),
])
def test_scheme_without_slashes_is_refused(url: str | os.PathLike[str], fix: str) -> None:
    with pytest.raises(InvalidURL) as info:
        parse_url(url)
    message = str(info.value)
    assert message.startswith(repr(os.fspath(url))) and "lacks the '//'" in message
    assert fix in message
    assert f"a local path: ./{os.fspath(url)}" in message


# "gs//b/o" (the colon left out) was the relative path ./gs/b/o: `ls gs//b/o`
# listed an empty local directory and exited 0.
@pytest.mark.parametrize(("url", "fix"), [
    ("gs//my-bucket/o", "did you mean gs://my-bucket/o?"),
    ("S3//my-bucket/x/", "did you mean s3://my-bucket/x/?"),
    ("gs//", "use gs://bucket/name"),
    ("file//tmp/x", "did you mean file:///tmp/x?"),
    ("file//", "use file:///absolute/path or a plain path"),
])
def test_scheme_without_colon_is_refused(url: str, fix: str) -> None:
    with pytest.raises(InvalidURL) as info:
        parse_url(url)
    message = str(info.value)
    assert message.startswith(repr(url)) and "lacks the ':'" in message
    assert fix in message
    assert f"a local path: ./{url}" in message


def test_a_local_directory_named_like_a_scheme_is_written_with_dot_slash() -> None:
    url = parse_url("./gs:/my-bucket/run1")
    assert url.scheme == "file"
    assert str(url) == "file://" + os.path.abspath("gs:/my-bucket/run1")
    # Only the three schemes: "c:/x" or "gsx:/y" stay plain relative paths.
    assert parse_url("gsx:/y").scheme == parse_url("c:/x").scheme == "file"
    assert parse_url("./gs//my-bucket/o") == parse_url("gs/my-bucket/o")
    assert parse_url("./gs//my-bucket/o").scheme == "file"


def test_file_urls_take_three_slashes_or_localhost() -> None:
    assert parse_url("file:///tmp/x") == parse_url("file://localhost/tmp/x") \
        == parse_url("/tmp/x") == StoreURL("tmp", "x", "file")
    with pytest.raises(InvalidURL, match="file:///path"):
        parse_url("file://tmp/x")


def test_paths_are_accepted() -> None:
    assert parse_url(Path("/tmp/run1/x")) == parse_url("/tmp/run1/x") \
        == StoreURL("tmp", "run1/x", "file")
    assert parse_url(Path("rel/x")) == parse_url("rel/x")
    with pytest.raises(InvalidURL, match="got bytes"):
        parse_url(b"/tmp/x")  # type: ignore[arg-type]


def test_require_object() -> None:
    with pytest.raises(InvalidURL, match="names no object"):
        parse_url("gs://bucket", require_object=True)


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [(RetryPolicy, {"max_attempts": 0}, "max_attempts"),
     (RetryPolicy, {"initial_delay": 2, "max_delay": 1}, "max_delay"),
     (RetryPolicy, {"multiplier": 0.5}, "multiplier"),
     (Timeouts, {"connect": 0}, "connect"),
     (ClientConfig, {"max_concurrency": 0}, "max_concurrency")],
)
def test_config_validation_names_the_field(cls: type, kwargs: dict[str, object],
                                           field: str) -> None:
    with pytest.raises(ValueError, match=field):
        cls(**kwargs)


def test_replace_validates() -> None:
    cfg = ClientConfig()
    assert cfg.replace(max_concurrency=8).max_concurrency == 8
    assert cfg.effective_connection_limit == cfg.max_concurrency
    with pytest.raises(ValueError):
        cfg.replace(max_concurrency=-1)


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
       | st.text(alphabet="abcXYZ019_.~-/ %?#+", max_size=40))
def test_object_names_quote_like_urllib(name: str) -> None:
    from urllib.parse import quote

    from aioflux.gcs._json import quote_name

    # The plain-name fast path must encode exactly as urllib does.
    assert quote_name(name) == quote(name, safe="")


def test_default_concurrency_and_lean_reads() -> None:
    config = ClientConfig()
    assert config.max_concurrency == 128 and config.lean_reads
