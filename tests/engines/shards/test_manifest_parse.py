"""A manifest read as columns is the manifest read line by line (issue 49).

``parse_columns`` reads aioflux's own lines all at once with numpy and
leaves every other line to ``json.loads``; whatever the text, it must take
the entries ``parse_rows`` (the line-by-line reference) takes, in the same
order, and refuse what it refuses with the same message.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from aioflux import ShardFormatError
from aioflux._engines.shards import _manifest_parse
from aioflux._engines.shards._manifest import Entry, Table, encode_manifest
from aioflux._engines.shards._manifest_parse import parse_columns, parse_rows

HEAD = b'{"kind": "aioflux-shard-manifest", "shards": 0, "version": 1}\n'


def read_both(data: bytes) -> tuple[list[Any] | str, list[Any] | str]:
    """Each parse's entries (as tuples of what counting reads) or its error."""
    try:
        rows: list[Any] | str = [(r[0], r[1], -1 if r[2] is None else r[2],
                                  -1 if r[3] is None else r[3], r[4], r[6], r[7])
                                 for r in parse_rows(data, "m")]
    except (ShardFormatError, UnicodeDecodeError) as exc:
        rows = f"{type(exc).__name__}: {exc}"
    try:
        c = parse_columns(data, "m")
        columns: list[Any] | str = list(zip(
            c.names, c.size.tolist(), c.crc32c.tolist(), c.version.tolist(),
            [c.formats[k] for k in c.format.tolist()], c.samples.tolist(),
            c.data_size.tolist(), strict=True))
    except (ShardFormatError, UnicodeDecodeError) as exc:
        columns = f"{type(exc).__name__}: {exc}"
    return rows, columns


def entries(rng: random.Random, n: int) -> list[Entry]:
    names = ["a.tar", "sub/b.tar", "été.tar", 'q"uote', "back\\slash", "tab\tname", "",
             "x" * 40, "\u2028", "\ud800", "a,b", "a}{b"]
    return [Entry(name=rng.choice(names) + str(k),
                  size=rng.choice([0, 1, 10, 2**31, 2**63 - 1, 12345678901234567]),
                  crc32c=rng.choice([None, 0, 1, 2**32 - 1]),
                  version=rng.choice([None, 0, 7, 1_700_000_000_123_456_789, 2**63 - 1,
                                      2**63, 2**100]),
                  format=rng.choice(["tar", "lines", "", "webdataset-tar"]),
                  compression=rng.choice([None, "gzip", "zstd", "a,b"]),
                  samples=rng.choice([0, 1, 99, 10**18]),
                  data_size=rng.choice([0, 5, 2**40]))
            for k in range(n)]


def test_aioflux_s_lines_and_another_tool_s_are_read_as_line_by_line() -> None:
    rng = random.Random(49)
    own = encode_manifest(entries(rng, 300))
    lines = own.split(b"\n")
    other = [
        lines[1],
        json.dumps(json.loads(lines[2]), ensure_ascii=False).encode(),  # spaces, raw UTF-8
        json.dumps(dict(reversed(json.loads(lines[3]).items()))).encode(),  # another order
        b'{"name":"p.tar","size":3,"format":"tar","samples":1}',  # the optional fields left out
        b"   ",
        b"",
        b'{"compression":null,"crc32c":null,"data_size":null,"format":"tar","name":"n",'
        b'"samples":0,"size":0,"version":null}',
        b'{"compression":null,"crc32c":00,"data_size":1,"format":"tar","name":"n",'
        b'"samples":0,"size":0,"version":null}',  # a leading zero: not JSON
    ]
    texts = [own, own.rstrip(b"\n"), HEAD, HEAD.rstrip(b"\n"), own.replace(b"\n", b"\r\n"),
             b"\n".join([lines[0], *other[:7], *lines[4:]]), b"\n".join([lines[0], *other]),
             own + b"\n\n", own.replace(b"n.tar", "\u00e9".encode())]
    for data in texts:
        rows, columns = read_both(data)
        assert columns == rows, data[:200]
    assert isinstance(read_both(texts[-2])[1], list) and len(read_both(own)[1]) == 300
    assert "line 9" in str(read_both(b"\n".join([lines[0], *other]))[1])


def test_damaged_lines_are_refused_as_line_by_line() -> None:
    # Every kind of edit at random places of manifests aioflux wrote: each
    # text is taken as the line-by-line parse takes it, or refused with its
    # message (a number past an int64 is refused by the columns alone).
    rng = random.Random(7)
    alphabet = b'0123456789"{}:,\\ \n\r\tnulx-e.azAZ_\x1c\x7f\xc3\xa9'
    outcomes = set()
    for _ in range(1500):
        data = bytearray(encode_manifest(entries(rng, rng.randint(1, 4))))
        head = data.index(b"\n") + 1
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(head, len(data))
            edit = rng.random()
            if edit < 0.6:
                data[at] = rng.choice(alphabet)
            elif edit < 0.8:
                del data[at]
            else:
                data.insert(at, rng.choice(alphabet))
        rows, columns = read_both(bytes(data))
        if isinstance(columns, str) and "past an int64" in columns:
            assert isinstance(rows, list) and any(max(r[1], r[5], r[6]) >= 2**63 for r in rows)
            outcomes.add("past")
            continue
        assert columns == rows, bytes(data)
        outcomes.add("taken" if isinstance(rows, list) else "refused")
    assert outcomes == {"taken", "refused", "past"}


def test_the_header_and_the_encoding_are_checked_first() -> None:
    for data, message in ((b"", "not an aioflux shard manifest"),
                          (b"\n" + HEAD, "not an aioflux shard manifest"),
                          (b'{"kind": "aioflux-shard-manifest", "version": 2}\n', "version 2"),
                          (HEAD + b'{"name": "\xff"}\n', "can't decode")):
        with pytest.raises((ShardFormatError, UnicodeDecodeError), match=message):
            parse_columns(data, "m")
        with pytest.raises((ShardFormatError, UnicodeDecodeError), match=message):
            parse_rows(data, "m")


def test_aioflux_s_own_lines_are_read_with_no_json_loads_a_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The manifest's JSON was parsed line by line (~8 us an entry): its own
    # lines are now read as columns, json.loads left to the header and to
    # lines of another form.
    calls: list[str] = []
    loads = json.loads

    def counted(text: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(text)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    entries = [Entry(name=f"s/{k:05d}.tar", size=1000 + k, crc32c=k * 7919 % 2**32,
                     version=1_700_000_000_000_000_000 + k, format="tar",
                     compression="gzip" if k % 3 else None, samples=k % 50, data_size=3 * k)
               for k in range(2000)]
    data = encode_manifest(entries)
    table = Table(data, "m")
    assert len(calls) == 1  # the header
    assert len(table) == 2000 and table.formats == ("tar",)
    assert table.samples.tolist() == [e.samples for e in entries]
    assert table.version.tolist() == [e.version for e in entries]
    assert [table.rows[e.name] for e in entries] == list(range(2000))
    lines = data.split(b"\n")
    lines[5] = json.dumps(loads(lines[5]), indent=1).replace("\n", " ").encode()
    calls.clear()
    again = Table(b"\n".join(lines), "m")
    assert len(calls) == 2  # the header and the one line of another form
    assert again.samples.tolist() == table.samples.tolist()


def test_a_format_longer_than_a_word_and_several_formats() -> None:
    entries = [Entry(name=f"{k}", size=k, crc32c=None, version=k + 1,
                     format=("tar", "lines", "a-format-past-8-bytes", "")[k % 4],
                     compression=None, samples=k, data_size=k) for k in range(40)]
    for some in (entries[:2], entries[:3], entries, entries[3::4]):
        table = Table(encode_manifest(some), "m")
        assert table.formats == tuple(sorted({e.format for e in some}))
        assert [table.formats[table.format[table.rows[e.name]]] for e in some] == \
            [e.format for e in some]


def test_the_column_reader_s_block_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_manifest_parse, "_LINES_AT_ONCE", 3)
    monkeypatch.setattr(_manifest_parse, "_BYTES_AT_ONCE", 7)  # the searches' slices too
    rng = random.Random(3)
    for data in (encode_manifest(entries(rng, 50)), encode_manifest(
            [Entry(f"{k}", k, k, k, "tar", None, k, k) for k in range(50)])):
        rows, columns = read_both(data)
        assert columns == rows and isinstance(rows, list) and len(rows) == 50
