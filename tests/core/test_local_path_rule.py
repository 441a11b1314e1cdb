"""A local path follows one rule, plain or as a ``file://`` URL: made
absolute and normalized by name as ``os.path.abspath`` does (the URL with
``..`` was an InvalidURL where the same path worked), and errors quote the
whole path (they quoted the name below the first directory: ``'me/dl/..'``
of ``/home/me/dl/..``). A local name's own check takes every plain name,
whether or not it looks plain at a glance, and refuses the rest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import aioflux
from aioflux import InvalidURL, LocalStore, parse_url
from aioflux._core.concurrency.portal import call
from aioflux._core.records.urls import validate_object_name


@pytest.mark.parametrize("path", ["/home/me/a/sub/../data.txt", "/home/me/a/./data.txt",
                                  "/home/me/a//data.txt", "/home/me/a/sub/x/../../data.txt",
                                  "/home/me/../me/a/data.txt"])
def test_a_file_url_names_what_the_same_path_names(path: str) -> None:
    expected = ("home", "me/a/data.txt", "file")
    assert tuple(parse_url(path))[:2] == tuple(parse_url("file://" + path))[:2] == expected[:2]
    assert str(parse_url("file://" + path)) == str(parse_url(path)) == "file:///home/me/a/data.txt"
    assert parse_url("file://localhost" + path) == parse_url(path)


def test_a_relative_path_resolves_against_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_url("sub/../x.txt") == parse_url(f"file://{tmp_path}/sub/../x.txt") \
        == parse_url(tmp_path / "x.txt")


def test_a_folder_keeps_its_slash_and_the_root_is_refused() -> None:
    assert parse_url("file:///tmp/a/../b/") == parse_url("/tmp/a/../b/")
    assert parse_url("file:///tmp/a/../b/").name == "b/"
    for url in ("file:///tmp/..", "/tmp/..", "file:///", "file:///./"):
        with pytest.raises(InvalidURL, match="names the filesystem root"):
            parse_url(url)


def test_open_writes_and_reads_a_file_url_with_dot_dot(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with aioflux.open(f"file://{tmp_path}/sub/../data.txt", "w") as f:
        f.write("kept")
    assert (tmp_path / "data.txt").read_text() == "kept"
    with aioflux.open(f"{tmp_path}/sub/../data.txt") as f:
        assert f.read() == b"kept"
    assert list(aioflux.list_files(f"file://{tmp_path}/sub/../")) == [
        f"file://{tmp_path}/data.txt"]


@pytest.mark.parametrize("tail", ["a\nb.txt", "a\x00b.txt", "a\udcffb.txt"])
@pytest.mark.parametrize("form", ["plain", "file://"])
def test_errors_quote_the_whole_path(tail: str, form: str) -> None:
    path = f"/home/me/dl/../{tail}"
    url = path if form == "plain" else "file://" + path
    with pytest.raises(InvalidURL) as info:
        aioflux.open(url, "wb")
    message = str(info.value)
    assert repr(f"/home/me/{tail}") in message, message  # the path, from its first '/'
    assert repr(url) in message, message  # and what the caller wrote
    assert f"'me/{tail}" not in message.replace(repr(f"/home/me/{tail}"), "")


def test_a_relative_path_error_quotes_the_absolute_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURL) as info:
        parse_url("sub/a\nb")
    assert repr(os.path.join(str(tmp_path), "sub/a\nb")) in str(info.value)


def test_a_path_too_long_is_said_without_repeating_it(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/" + "x" * 2000
    with pytest.raises(InvalidURL, match="longer than 1024 bytes after its first directory") \
            as info:
        parse_url(url)
    assert len(str(info.value)) < 300


def test_the_store_api_still_refuses_dots_in_names(tmp_path: Path) -> None:
    # A name is an object's, never a path to resolve: "a/../b" would be a
    # second spelling of "b".
    bucket, name = parse_url(tmp_path / "x.txt")
    store = LocalStore()
    try:
        with pytest.raises(InvalidURL, match="plain relative path"):
            call(store.write(bucket, name.replace("x.txt", "sub/../x.txt"), b"x"))
    finally:
        call(store.aclose())
    assert not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize("name", ["a", "a/b.txt", "a/", ".hidden", "a/.b", "a/..b/c", "..a",
                                  "a/b./c", "é/😀.jpg"])
def test_plain_names_pass_whether_or_not_they_look_plain_at_a_glance(name: str) -> None:
    assert validate_object_name(name, scheme="file") == name


@pytest.mark.parametrize("name", [".", "..", "./a", "a/./b", "a/../b", "a/..", "a//b", "a//",
                                  "/a", "a\x00b", "//", "a/."])
def test_names_with_dots_empty_segments_or_nul_are_refused(name: str) -> None:
    with pytest.raises(InvalidURL, match=r"not a plain relative path|is not allowed"):
        validate_object_name(name, scheme="file")
