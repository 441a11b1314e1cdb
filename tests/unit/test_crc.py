import google_crc32c
from hypothesis import given
from hypothesis import strategies as st

from aioflux._core.crc import (
    Crc32c,
    crc32c,
    crc32c_combine,
    crc32c_suffix,
    decode_crc32c,
    encode_crc32c,
)


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_combine_equals_crc_of_concatenation(a: bytes, b: bytes) -> None:
    assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)


@given(st.lists(st.binary(max_size=500), max_size=10))
def test_running_checksum_over_any_buffer_type(chunks: list[bytes]) -> None:
    running = Crc32c()
    for i, chunk in enumerate(chunks):
        running.update(memoryview(bytearray(chunk)) if i % 2 else chunk)
    joined = b"".join(chunks)
    assert running.value == google_crc32c.value(joined)
    assert running.length == len(joined)


def test_large_buffer_in_bounded_pieces() -> None:
    data = bytearray(range(256)) * 20_000  # > 1 MiB copy chunk
    assert crc32c(memoryview(data)) == google_crc32c.value(bytes(data))


def test_gcs_encoding() -> None:
    # Known value: crc32c("hello") as GCS reports it.
    assert encode_crc32c(crc32c(b"hello")) == "mnG7TA=="
    assert decode_crc32c("mnG7TA==") == crc32c(b"hello")


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_suffix_undoes_combine(a: bytes, b: bytes) -> None:
    assert crc32c_suffix(crc32c(a + b), crc32c(a), len(b)) == crc32c(b)


def test_combine_of_long_parts_matches_one_pass() -> None:
    # Long lengths exercise the cached operators (many squarings) the writer uses.
    a, b = bytes(range(256)) * 4099, bytes(range(255, -1, -1)) * 8192
    assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)
    assert crc32c_suffix(crc32c(a + b), crc32c(a), len(b)) == crc32c(b)
