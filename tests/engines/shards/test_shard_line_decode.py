"""The lines ``shards verify`` decodes are the lines format's samples, at
their offsets, however the data is cut into chunks."""

from __future__ import annotations

import pytest

from aioflux import ShardFormatError
from aioflux._engines.shards import FORMATS
from aioflux._engines.shards._decode import decode_line, decoded_lines

# CRLF and LF lines, empty lines, a "\r" alone on a line, and a last line
# without a newline that keeps its "\r": every rule of the lines format.
DATA = b'{"a": 1}\r\n\n\r\n[2, 3]\n\n"x"\r\n{"b": {}}\r'


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", range(1, len(DATA) + 1))
def test_each_line_is_decoded_at_the_formats_offset(size: int) -> None:
    offsets, lengths, _, _ = FORMATS["lines"].index(_chunks(DATA, 7), "x")
    samples = [(int(o), DATA[int(o):int(o) + int(n)])
               for o, n in zip(offsets, lengths, strict=True)]
    assert samples[-1] == (len(DATA) - 10, b'{"b": {}}\r')  # the format keeps that "\r"
    # Good JSON but the "\r" at the end of the last line: json.loads takes it
    # as whitespace, as the dataset's decode="json" does.
    chunks = _chunks(DATA, size)
    assert list(decoded_lines(chunks, "json", "verify", "gs://b/s.jsonl")) == chunks
    # Each sample made bad in turn fails at its own offset.
    for offset, _ in samples:
        bad = DATA[:offset] + b"?" + DATA[offset + 1:]
        with pytest.raises(ShardFormatError, match=rf"^verify gs://b/s\.jsonl: the line at byte "
                                                   rf"{offset} is not JSON: "):
            list(decoded_lines(_chunks(bad, size), "json", "verify", "gs://b/s.jsonl"))


def test_utf8_and_json_are_the_datasets_decodes() -> None:
    assert decode_line("utf-8", "é".encode(), "read", "u", 0) == "é"
    assert decode_line("json", b'{"k": [1]}', "read", "u", 0) == {"k": [1]}
    with pytest.raises(ShardFormatError, match=r"^read u: the line at byte 5 is not UTF-8: "):
        decode_line("utf-8", b"\xff", "read", "u", 5)
    with pytest.raises(ShardFormatError, match=r"^read u: the line at byte 0 is not JSON: "):
        decode_line("json", b"\xff", "read", "u", 0)
