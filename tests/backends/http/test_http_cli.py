"""The CLI over http(s) URLs served by nginx: a missing object is not
found (never "a web server has no listing"), a brace pattern given to
``cat`` is named as such, and the shards' hints lead somewhere a web
server allows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.calls import call
from tests.servers.nginx import Nginx, running_nginx
from tests.torch._shards_util import make_samples, tar_shard

COUNTS = (3, 5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    root = tmp_path_factory.mktemp("http-cli")
    for n, count in enumerate(COUNTS):
        (root / f"train-{n}.tar").write_bytes(tar_shard(make_samples(f"s{n}/", count)))
    with running_nginx(root) as nginx:
        yield nginx


@pytest.mark.parametrize("argv", [["stat"], ["cat"], ["cp"], ["ls"], ["du"]])
def test_a_missing_object_is_not_found(server: Nginx, tmp_path: Path, argv: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    url = f"{server.endpoint}/nope.tar"
    more = [os.fspath(tmp_path / "copy")] if argv == ["cp"] else []
    code, out, err = call(capsys, *argv, url, *more)
    assert (code, out) == (1, "")
    # It asked a listing whether the name was a folder: "a web server has no listing".
    assert err == (f"aioflux {argv[0]}: stat {url} failed: HTTP 404: No such object on the "
                   "web server\n")
    assert list(tmp_path.iterdir()) == []


def test_ls_and_du_of_an_object_show_it(server: Nginx,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"{server.endpoint}/train-0.tar"
    assert call(capsys, "ls", url) == (0, f"{url}\n", "")
    code, out, err = call(capsys, "du", url)
    size = (server.root / "train-0.tar").stat().st_size
    assert (code, err) == (0, "")
    assert out.split("\t")[0::2] == [str(size), "1 objects"]


def test_a_brace_pattern_given_to_cat_is_named(server: Nginx,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    url = f"{server.endpoint}/train-{{0..1}}.tar"
    code, out, err = call(capsys, "cat", url)
    assert (code, out) == (1, "")
    assert err.startswith(f"aioflux cat: stat {url} failed: HTTP 404")
    assert err.endswith("(a brace pattern names several objects, which only aioflux shards "
                        "and the shard datasets expand; elsewhere '{' and '}' are part of a "
                        "name: name one object)\n")


def test_shards_ls_hints_at_counting_by_reading(server: Nginx,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    pattern = f"{server.endpoint}/train-{{0..1}}.tar"
    code, out, err = call(capsys, "shards", "ls", pattern)
    assert (code, err) == (0, "")
    # It said "(aioflux shards index)", which a web server refuses.
    assert out.splitlines()[-1].endswith(
        "2 without a matching index: samples unknown (a web server takes no index beside "
        "its shards: aioflux shards verify counts them by reading)")
    code, out, err = call(capsys, "shards", "verify", pattern)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == (f"verified 2 shards, {sum(COUNTS)} samples in the good "
                                    "ones: all good")


def test_shards_index_of_a_web_server_says_it_cannot(server: Nginx,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pattern = f"{server.endpoint}/train-{{0..1}}.tar"
    code, out, err = call(capsys, "shards", "index", pattern)
    assert (code, out) == (2, "")
    assert err == (f"aioflux shards: error: {pattern}: a web server takes no writes, so its "
                   "shards cannot be indexed in place: aioflux shards verify counts their "
                   "samples by reading them, and ShardDataset indexes them into its local "
                   "cache (index_dir) (see aioflux shards --help)\n")
