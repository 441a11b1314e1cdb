import google_crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioflux._core.integrity.crc import (
    Crc32c,
    crc32c,
    crc32c_combine,
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


def test_large_buffers_read_in_place_or_in_bounded_pieces() -> None:
    data = bytearray(range(256)) * 20_000  # > 1 MiB: in place
    want = google_crc32c.value(bytes(data))
    assert crc32c(memoryview(data)) == want
    assert crc32c(memoryview(bytes(data))) == want  # read-only: copied in pieces


def test_gcs_encoding() -> None:
    # Known value: crc32c("hello") as GCS reports it.
    assert encode_crc32c(crc32c(b"hello")) == "mnG7TA=="
    assert decode_crc32c("mnG7TA==") == crc32c(b"hello")


@given(st.lists(st.binary(max_size=500), max_size=10))
def test_appending_parts_checksums_equals_one_pass(chunks: list[bytes]) -> None:
    running = Crc32c()
    for chunk in chunks:
        running.append(crc32c(chunk), len(chunk))
    joined = b"".join(chunks)
    assert (running.value, running.length) == (google_crc32c.value(joined), len(joined))


@given(st.binary(min_size=1, max_size=3000), st.integers(0, 2**32 - 1), st.integers(0, 40))
def test_writable_buffers_are_read_in_place_with_the_same_result(
        data: bytes, start: int, offset: int) -> None:
    # bytearrays, views of them and read-only views (at any offset) take the
    # ctypes path, with and without the GIL; bytes google_crc32c's own call.
    want = google_crc32c.extend(start, data[offset:])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("aioflux._core.integrity.crc._COPY_CHUNK", 1)  # small data, same path
        for gil_from in (1, 1 << 20):  # without the GIL, then with it
            patch.setattr("aioflux._core.integrity.crc._IN_PLACE_FROM", gil_from)
            assert crc32c(bytearray(data)[offset:], start) == want
            assert crc32c(memoryview(bytearray(data))[offset:], start) == want
            assert crc32c(memoryview(data)[offset:], start) == want
            assert crc32c(data[offset:], start) == want


def test_large_read_only_views_are_read_in_place() -> None:
    data = bytes(range(256)) * (5 << 12)  # 5 MiB
    view = memoryview(data)[3:]
    assert crc32c(view, 7) == google_crc32c.extend(7, data[3:])
    assert crc32c(view[: 100_000]) == google_crc32c.value(data[3:100_003])


def test_the_native_path_is_taken_where_the_c_extension_is() -> None:
    from aioflux._core.integrity import crc as module

    if google_crc32c.implementation != "c":
        pytest.skip("the pure-Python build has no C function to call")
    assert module._EXTEND_AT is not None


def test_combine_of_long_parts_matches_one_pass() -> None:
    # Long lengths exercise the cached operators (many squarings) the writer uses.
    a, b = bytes(range(256)) * 4099, bytes(range(255, -1, -1)) * 8192
    assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)
