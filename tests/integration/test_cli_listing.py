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
