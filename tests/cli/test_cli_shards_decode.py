"""``aioflux shards verify`` decodes a lines shard as the dataset will: a
``.jsonl`` shard whose last line was cut, or holding a line that is not
JSON, passed verify (its crc32c and its lines were sound) and failed
``ShardDataset(decode="json")`` mid-epoch."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from aioflux import Client, ShardFormatError
from aioflux.testing import Emulator
from aioflux.torch import DatasetSettings, Order, ShardDataset, ShardReads

GOOD = b'{"id": 1, "text": "a"}\n' * 9
CUT = GOOD + b'{"id": 10, "te'  # the last line cut, as an interrupted writer leaves it
FOREIGN = b'{"id": 1}\r\n\n' + b"not json\n" + b'{"id": 3}\n'


@pytest.fixture(params=["gs", "file"])
def put(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``put(name, data)`` writes a shard and gives its URL, on the emulator or on files."""
    if request.param == "gs":
        sync_client: Client = request.getfixturevalue("sync_client")
        bucket: str = request.getfixturevalue("bucket")

        def to_bucket(name: str, data: bytes) -> str:
            sync_client.write(bucket, f"ds/{name}", data)
            return f"gs://{bucket}/ds/{name}"

        return to_bucket

    def to_file(name: str, data: bytes) -> str:
        (tmp_path / "ds").mkdir(exist_ok=True)
        (tmp_path / "ds" / name).write_bytes(data)
        return f"file://{tmp_path}/ds/{name}"

    return to_file


def _bad(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("BAD")]


@pytest.mark.parametrize(("data", "offset", "why"), [
    (CUT, len(GOOD), "Unterminated string"),
    (FOREIGN, 12, "Expecting value"),
])
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".ndjson", ".jsonl.gz"])
def test_verify_decodes_json_lines_by_default_naming_the_shard_and_byte(  # type: ignore[no-untyped-def]
        run, put, emulator: Emulator, data: bytes, offset: int, why: str, suffix: str) -> None:
    url = put(f"s{suffix}", gzip.compress(data) if suffix.endswith(".gz") else data)
    put("fine.jsonl", GOOD)
    code, out, err = run("shards", "verify", url.rsplit("/", 1)[0])
    assert code == 1, out + err
    (bad,) = _bad(out)
    assert bad.startswith(f"BAD  {url}: verify {url}: the line at byte {offset} is not JSON: {why}")
    assert out.splitlines()[-1] == "verified 2 shards, 9 samples in the good ones: 1 bad"
    # What the dataset says of it: the same byte, at the epoch's end.
    with pytest.raises(ShardFormatError, match=f"the line at byte {offset} is not JSON"):
        list(ShardDataset(url, format="lines", decode="json", order=Order(shuffle=False),
                          reads=ShardReads(cache_indexes=False),
                          settings=DatasetSettings(endpoint=emulator.endpoint)))
    # --decode none checks what decode=None reads: bytes, which every line is.
    code, out, _ = run("shards", "verify", "--decode", "none", url)
    assert code == 0 and not _bad(out)


def test_text_shards_decode_only_when_asked(run, put) -> None:  # type: ignore[no-untyped-def]
    url = put("t.txt", b"caf\xc3\xa9\n\xff\xfe\n")
    code, out, _ = run("shards", "verify", url)
    assert code == 0 and not _bad(out)  # decode=None: raw bytes
    code, out, _ = run("shards", "verify", "--decode", "utf-8", url)
    assert code == 1
    assert _bad(out) == [f"BAD  {url}: verify {url}: the line at byte 6 is not UTF-8: 'utf-8' "
                         "codec can't decode byte 0xff in position 0: invalid start byte"]
    # A .txt of JSON lines is decoded as JSON when asked.
    json_url = put("j.txt", FOREIGN)
    code, out, _ = run("shards", "verify", "--decode", "json", json_url)
    assert code == 1 and "the line at byte 12 is not JSON" in _bad(out)[0]


def test_good_json_lines_pass_and_decode_is_for_lines_shards(  # type: ignore[no-untyped-def]
        run, put) -> None:
    # CRLF lines, empty lines and a last line without a newline: as the dataset reads them.
    url = put("ok.jsonl", b'{"a": 1}\r\n\n\n{"b": [2]}\r\n"c"')
    code, out, err = run("shards", "verify", url)
    assert code == 0, out + err
    assert out.splitlines()[0].split()[:3] == ["ok", "3", "no"]
    code, _, err = run("shards", "verify", "--format", "tar", "--decode", "json", url)
    assert code == 2
    assert err.startswith(f"aioflux shards: error: --decode json decodes the lines of lines "
                          f"shards; {url} is a tar shard")
