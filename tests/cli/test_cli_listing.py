"""What ``ls`` and ``du`` print, and when they fail: against the emulator
(its GCS API and its S3 face) and the local filesystem."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from aioflux import Client, parse_url
from aioflux.testing import Emulator

_LISTINGS = [["ls"], ["ls", "-r"], ["ls", "-l"], ["ls", "--json"], ["du"], ["du", "--json"]]


# gcloud storage's rule: a URL that matches nothing is exit 1 with one line
# ("One or more URLs matched no objects"), as rm -r and cp -r already were.
@pytest.mark.parametrize("argv", _LISTINGS)
@pytest.mark.parametrize(("name", "what"), [
    ("no-such-prefix", "no object 'no-such-prefix' and no folder 'no-such-prefix/'"),
    ("d/a", "no object 'd/a' and no folder 'd/a/'"),  # only a prefix of d/a.bin
    ("missing-dir/", "no folder 'missing-dir/'"),
])
def test_a_url_that_matches_nothing_fails_in_one_line(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str, argv: list[str], name: str, what: str) -> None:
    sync_client.write(bucket, "d/a.bin", b"aaaa")
    url = f"gs://{bucket}/{name}"
    assert run(*argv, url) == (1, "", f"aioflux {argv[0]}: {argv[0]} {url}: nothing matches "
                                      f"({what})\n")


@pytest.mark.parametrize("argv", _LISTINGS)
def test_an_empty_bucket_matches_and_a_missing_one_fails(  # type: ignore[no-untyped-def]
        run, bucket: str, argv: list[str]) -> None:
    # As gcloud storage: an existing bucket matches, even empty.
    code, out, err = run(*argv, f"gs://{bucket}")
    assert (code, err) == (0, "")
    if argv == ["du", "--json"]:
        assert json.loads(out) == {"url": f"gs://{bucket}/", "objects": 0, "bytes": 0}
    elif argv[0] == "du":
        assert out == f"0\t0 B\t0 objects\tgs://{bucket}/\n"
    else:
        assert out == ("[]\n" if "--json" in argv else "")
    for url in ("gs://nosuchbucket-cli", "gs://nosuchbucket-cli/x"):
        code, out, err = run(*argv, url)
        assert (code, out) == (1, "")
        assert err.startswith(f"aioflux {argv[0]}: list {url}") and "404" in err, err
        assert len(err.splitlines()) == 1


def test_a_local_directory_matches_even_empty(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_bytes(b"F")
    # As GNU ls: an existing directory lists (nothing), a missing path fails.
    for argv in (["ls"], ["ls", "-r"], ["ls", "-l"]):
        assert run(*argv, str(tmp_path / "empty")) == (0, "", "")
    assert run("ls", f"{tmp_path}/empty/") == (0, "", "")
    assert run("du", str(tmp_path / "empty"))[0] == 0
    missing = parse_url(tmp_path / "missing")
    for argv in (["ls"], ["ls", "-r"], ["du"]):
        assert run(*argv, str(tmp_path / "missing")) == (
            1, "", f"aioflux {argv[0]}: {argv[0]} {missing}: nothing matches (no object "
                   f"{missing.name!r} and no folder '{missing.name}/')\n")
    assert run("ls", str(tmp_path / "full" / "f")) == (0, f"file://{tmp_path}/full/f\n", "")


@pytest.mark.parametrize("flags", [["-l", "-r"], ["-l"]])
def test_ls_long_shows_updated_recursive_or_not(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str, flags: list[str]) -> None:
    a = sync_client.write(bucket, "d/a.bin", b"aaaa")
    b = sync_client.write(bucket, "d/sub/b.bin", b"bb")
    code, out, err = run("ls", *flags, f"gs://{bucket}/d/")
    assert (code, err) == (0, "")
    rows = [line.split() for line in out.splitlines()]
    expect = [[str(a.size), str(a.generation), sync_client.stat(bucket, a.name).updated,
               f"gs://{bucket}/d/a.bin"]]
    if "-r" in flags:
        expect.append([str(b.size), str(b.generation), sync_client.stat(bucket, b.name).updated,
                       f"gs://{bucket}/d/sub/b.bin"])
    else:
        expect.append([f"gs://{bucket}/d/sub/"])
    assert rows == expect


def test_ls_json_recursive_shows_updated(run, sync_client: Client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    sync_client.write(bucket, "x", b"x")
    sync_client.write(bucket, "y/z", b"z")
    code, out, _ = run("ls", "-r", "--json", f"gs://{bucket}")
    assert code == 0
    rows = json.loads(out)
    assert [r["url"] for r in rows] == [f"gs://{bucket}/x", f"gs://{bucket}/y/z"]
    assert [r["updated"] for r in rows] == [sync_client.stat(bucket, n).updated
                                           for n in ("x", "y/z")]
    assert all(r["updated"] for r in rows)


# On S3 the generation is the ETag as a number (43 digits for an MD5 one):
# ls -l, --json and stat show the ETag itself, as S3 tools do.
def test_s3_listings_show_the_etag(run, emulator: Emulator, bucket: str) -> None:  # type: ignore[no-untyped-def]
    body = b"single"
    md5 = hashlib.md5(body).hexdigest()
    emulator.store.put(bucket, "d/single", body)
    multipart = hashlib.md5(b"parts").hexdigest() + "-3"
    emulator.store.put(bucket, "d/multi", b"multi", etag=multipart)
    emulator.store.put(bucket, "d/opaque", b"opaque", etag="opaque-etag-1")  # not an MD5
    emulator.store.put(bucket, "d/sub/x", b"x")

    def s3run(*argv: str) -> tuple[int, str, str]:
        return run(*argv, "--s3-endpoint", emulator.s3_endpoint)  # type: ignore[no-any-return]

    code, out, err = s3run("ls", "-l", f"s3://{bucket}/d/")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[1::2] for line in lines[:3]] == [
        [multipart, f"s3://{bucket}/d/multi"], ["opaque-etag-1", f"s3://{bucket}/d/opaque"],
        [md5, f"s3://{bucket}/d/single"]]
    assert lines[3].split() == [f"s3://{bucket}/d/sub/"]
    # The column fits the widest ETag: every URL, the folder's too, starts at one place.
    assert len({line.index("s3://") for line in lines}) == 1, out
    etags = {f"s3://{bucket}/d/multi": multipart, f"s3://{bucket}/d/opaque": "opaque-etag-1",
             f"s3://{bucket}/d/single": md5}
    code, out, _ = s3run("ls", "--json", f"s3://{bucket}/d")
    assert {r["url"]: r["etag"] for r in json.loads(out) if "url" in r} == etags
    code, out, _ = s3run("ls", "-r", "--json", f"s3://{bucket}/d")
    assert {r["url"]: r["etag"] for r in json.loads(out)} == {
        **etags, f"s3://{bucket}/d/sub/x": hashlib.md5(b"x").hexdigest()}
    code, out, _ = s3run("stat", f"s3://{bucket}/d/single")
    info = json.loads(out)
    assert (code, info["etag"], info["size"]) == (0, md5, len(body))
    # Other stores have no ETag: the generation stays.
    code, out, _ = s3run("ls", "--json", f"gs://{bucket}/d/")
    assert "etag" not in json.loads(out)[0]


# ls printed nothing until the last page and held every row (a 10 M object
# bucket took GBs); it prints each page as it comes, still in name order.
@pytest.mark.parametrize("argv", [["ls", "-r"], ["ls"], ["ls", "-l"]])
def test_ls_prints_each_page_as_it_comes(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
        argv: list[str]) -> None:
    from aioflux.testing._errors import ApiError

    for i in range(2500):  # three pages of 1000
        emulator.store.put(bucket, f"o{i:04d}", b"")
    pages = emulator.store.list_page
    asked = []

    def third_page_fails(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("page_token"))
        if len(asked) == 3:
            raise ApiError(403, "forbidden", "denied on the third page")
        return pages(*args, **kwargs)

    monkeypatch.setattr(emulator.store, "list_page", third_page_fails)
    code, out, err = run(*argv, f"gs://{bucket}")
    assert code == 1 and err.startswith(f"aioflux ls: list gs://{bucket}") and "403" in err
    assert [line.split()[-1] for line in out.splitlines()] == [
        f"gs://{bucket}/o{i:04d}" for i in range(2000)]


def test_ls_merges_folders_and_objects_across_pages_in_name_order(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str) -> None:
    # Folders fall on every page and between pages; a folder sorts after an
    # object that is its name ("d/o1500" before "d/o1500/"), and after
    # "d/o1500-x" ('-' before '/').
    names = [f"d/o{i:04d}" for i in range(2300)] + [
        "d/o1500/z", "d/o1500-x", "d/a/b", "d/zz/q", "d/zz/r/s", "d/", "d/o0999/x", "d/o1000/x"]
    for name in names:
        emulator.store.put(bucket, name, b"")
    shown = sorted({n if n == "d/" else "d/" + n[2:].split("/", 1)[0]
                    + ("/" if "/" in n[2:] else "") for n in names})
    expect = [f"gs://{bucket}/{n}" for n in shown]
    code, out, err = run("ls", f"gs://{bucket}/d/")
    assert (code, err) == (0, "") and out.splitlines() == expect
    code, out, err = run("ls", "--json", f"gs://{bucket}/d")
    assert (code, err) == (0, "")
    assert [r.get("url") or r["prefix"] for r in json.loads(out)] == expect
    code, out, _ = run("ls", "-r", f"gs://{bucket}/d")
    assert out.splitlines() == [f"gs://{bucket}/{n}" for n in sorted(names)]


def test_ls_long_keeps_the_etag_column_across_pages_on_s3(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str) -> None:
    for i in range(1500):
        emulator.store.put(bucket, f"o{i:04d}", b"x")
    # On the second page only: the widest ETag (of a multipart upload).
    emulator.store.put(bucket, "o1499", b"x", etag=hashlib.md5(b"x").hexdigest() + "-10000")
    code, out, err = run("ls", "-l", f"s3://{bucket}", "--s3-endpoint", emulator.s3_endpoint)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 1500 and lines[-1].split()[1].endswith("-10000")
    assert len({line.index("s3://") for line in lines}) == 1


# The ETag column is the store's word (``ShownEtags``), not its class: a
# store of another package with ETags behind its generations shows them.
def test_a_listing_shows_etags_of_any_store_that_knows_them() -> None:
    from aioflux._core.concurrency.portal import call
    from aioflux._core.storage.protocol import ShownEtags
    from aioflux.cli._objects import _row
    from aioflux.testing import MemoryStore

    class EtagStore(MemoryStore):
        def _known_etag(self, generation: int) -> str | None:
            return f'"etag-{generation}"'

    for store, etag in [(MemoryStore(buckets=["bkt"]), None),
                        (EtagStore(buckets=["bkt"]), "etag-{}")]:
        info = call(store.write("bkt", "o", b"body"))
        assert isinstance(store, ShownEtags) is (etag is not None)
        row = _row(store, info)
        assert row.get("etag") == (etag and etag.format(info.generation))
