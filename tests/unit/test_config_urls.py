import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioflux import ClientConfig, GcsURL, InvalidURL, RetryPolicy, Timeouts, parse_url


def test_parse_url() -> None:
    assert parse_url("gs://my-bucket/a/b c.txt") == GcsURL("my-bucket", "a/b c.txt")
    assert parse_url("gs://my-bucket") == GcsURL("my-bucket", "")
    assert str(GcsURL("bkt", "x").join("y/", "/z")) == "gs://bkt/x/y/z"


@pytest.mark.parametrize("url", ["s3://b/o", "gs://", "gs://A/o", "gs://ab/o", "gs://-bad/o",
                                 "gs://b" + "x" * 70 + "/o", "gs://bkt/a\nb"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidURL):
        parse_url(url)


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
