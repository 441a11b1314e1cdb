"""Listings of files: the walk of a prefix's tree, page by page, and the
temporary files of unfinished writes as open uploads.

Directories are not objects; a file is listed by name first
(:func:`scan`), then stat-ed a page at a time (:func:`stat_files`), so a
file deleted between the two is left out rather than failing the listing.
"""

from __future__ import annotations

import datetime
import errno
import functools
import os
import stat as stat_mod
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from .._core.errors import NotFound, describe
from .._core.memory.columns import ListedColumns, rfc3339
from .._core.records.types import MultipartUploadInfo, ObjectInfo
from ._files import _XATTR, TEMP_MARK, generation_at, object_of, recorded_crc
from ._paths import folder_of, path_of

__all__ = ["Stated", "columns_of", "objects_of", "scan", "stat_files", "stated", "temporaries",
           "walk"]


def _in_range(name: str, start_offset: str | None, end_offset: str | None) -> bool:
    return ((start_offset is None or name >= start_offset)
            and (end_offset is None or name < end_offset))


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []  # removed while listing
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return []  # a prefix's folder no filesystem name can be: nothing below it
        raise


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether a directory entry is a file or a link to one. A link that
    never resolves (one to itself, or a cycle of them) is no file, as a
    dangling one is not: it must not fail the listing of every other file."""
    try:
        return entry.is_file()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return False
        raise


def _listed(entry: os.DirEntry[str], name: str, start_offset: str | None,
            end_offset: str | None) -> bool:
    """Whether a directory entry (not a directory) is an object a listing
    names: a file, not a temporary one, inside the offsets. A name no
    method takes (not UTF-8, a line break, over 1024 bytes) is listed: the
    datasets and ``load_files`` refuse it naming the file, where skipping
    it would drop a sample (or a file of ``cp -r``) in silence."""
    return (_in_range(name, start_offset, end_offset) and TEMP_MARK not in entry.name
            and _is_file(entry))


def _holds_object(directory: str, rel: str, start_offset: str | None,
                  end_offset: str | None) -> bool:
    """Whether any listable file lies below ``directory`` (stops at the first)."""
    stack = [(directory, rel)]
    while stack:
        path, rel = stack.pop()
        for entry in _entries(path):
            name = f"{rel}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, name))
            elif _listed(entry, name, start_offset, end_offset):
                return True
    return False


def _root(bucket: str, prefix: str) -> tuple[str, str]:
    """The bucket's directory, and the path below it where the walk of
    ``prefix`` starts (the prefix's directory part)."""
    folder = folder_of(bucket, prefix)  # the walk stays below the prefix's directory
    root = path_of(bucket, "", op="list")
    if not os.path.isdir(root):
        raise NotFound(f"{describe('list', bucket, prefix, 'file')} failed: no such "
                       "directory", operation="list", bucket=bucket, name=prefix)
    return root, folder[len(root) + 1:]


def _level(path: str) -> Iterator[str]:
    """A directory's keys in order: the names of its files a listing names
    (:func:`_listed`, offsets aside) and of its directories followed by
    ``/``, the start of every name below one, so that walking the levels
    in key order yields names sorted. Only the keys are held, not an entry
    each: a folder of a million files is walked in ~60 MB, not ~400."""
    keys = []
    for entry in _entries(path):
        if entry.is_dir(follow_symlinks=False):
            keys.append(entry.name + "/")
        elif TEMP_MARK not in entry.name and _is_file(entry):
            keys.append(entry.name)
    keys.sort()
    return iter(keys)


def walk(bucket: str, prefix: str, start_offset: str | None,
         end_offset: str | None) -> Iterator[tuple[str, str]]:
    """The files under ``prefix`` as (name, path) pairs in name order, not
    stat-ed yet (see :func:`stat_files`), found as the walk goes.

    It holds the sorted entries of the directories on its way down, never
    the tree's names: a listing of millions of files in many folders
    starts at once, in bounded memory (``scan`` sorts them all first).
    Names under a directory ``d`` all lie in ``["d/", "d0")`` (``0`` is
    the character after ``/``), which orders it among its siblings, skips
    it whole below ``start_offset`` and ends the walk at ``end_offset``.

    Raises:
        NotFound: no such bucket directory (at the call).
    """
    root, base = _root(bucket, prefix)
    return _walk(root, base, prefix, start_offset, end_offset)


def _walk(root: str, base: str, prefix: str, start_offset: str | None,
          end_offset: str | None) -> Iterator[tuple[str, str]]:
    stack = [(base, _level(f"{root}/{base}" if base else root))]
    while stack:
        rel, level = stack[-1]
        head = f"{rel}/" if rel else ""
        for key in level:
            name = head + key
            if end_offset is not None and name >= end_offset:
                return  # every name after it is past the end too
            if key[-1] == "/":
                folder = name[:-1]
                if ((folder.startswith(prefix) or prefix.startswith(name))
                        and (start_offset is None or start_offset < folder + "0")):
                    stack.append((folder, _level(f"{root}/{folder}")))
                    break  # its names come before the next sibling's
            elif name.startswith(prefix) and (start_offset is None or name >= start_offset):
                yield name, f"{root}/{name}"  # below end_offset: tested above
        else:
            stack.pop()


def scan(bucket: str, prefix: str, delimiter: str | None, start_offset: str | None,
         end_offset: str | None) -> tuple[list[tuple[str, str]], list[str]]:
    """The files under ``prefix`` as sorted (name, path) pairs, not stat-ed
    yet (see :func:`stat_files`), and, with ``delimiter``, the sorted
    prefixes that group the names continuing past it.

    Directories are not objects: an empty one is neither listed nor a
    prefix. Symbolic links to files are listed; links to directories are
    not followed (a loop could never end).
    """
    root, base = _root(bucket, prefix)
    files: list[tuple[str, str]] = []
    prefixes: set[str] = set()
    stack = [base]
    while stack:
        rel = stack.pop()
        for entry in _entries(f"{root}/{rel}" if rel else root):
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if delimiter == "/" and name.startswith(prefix):
                    # One level is enough: the directory is a prefix if any
                    # object lies below it.
                    if _holds_object(entry.path, name, start_offset, end_offset):
                        prefixes.add(name + "/")
                elif name.startswith(prefix) or prefix.startswith(name + "/"):
                    stack.append(name)
            elif name.startswith(prefix) and _listed(entry, name, start_offset, end_offset):
                files.append((name, entry.path))
    files.sort()
    if delimiter and delimiter != "/":
        kept: list[tuple[str, str]] = []
        for name, path in files:
            cut = name.find(delimiter, len(prefix))
            if cut >= 0:
                prefixes.add(name[:cut + len(delimiter)])
            else:
                kept.append((name, path))
        files = kept
    return files, sorted(prefixes)


class Stated(NamedTuple):
    """Files of a page that are still files (:func:`stat_files`), as columns."""

    names: list[str]
    sizes: list[int]
    mtimes: list[int]
    crc32cs: list[int | None]


def stat_files(files: list[tuple[str, str]]) -> Stated:
    """Stat a page of :func:`scan`'s or :func:`walk`'s files (a file gone, or
    no longer a regular file, is left out), each read into columns, not an
    object a file: a listing of files was mostly Python work per file."""
    names: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    crcs: list[int | None] = []
    stat, regular, attributes = os.stat, stat_mod.S_ISREG, os.listxattr
    for name, path in files:
        try:
            st = stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted since the scan: no longer an object
        if not regular(st.st_mode):
            continue  # replaced since by a directory or a pipe, which stat refuses
        names.append(name)
        sizes.append(st.st_size)
        mtimes.append(st.st_mtime_ns)
        # recorded_crc after the attributes' names: most files hold none, and
        # a failed read of one raises an OSError that costs twice the listing
        # (1e6 files: ~2.5 us a file, against ~5).
        try:
            crcs.append(recorded_crc(path, st) if _XATTR in attributes(path) else None)
        except OSError:
            crcs.append(None)  # no such file now, or a filesystem without attributes
    return Stated(names, sizes, mtimes, crcs)


def stated(pieces: Sequence[Stated]) -> Stated:
    """The pieces of one page, in order, as one."""
    if len(pieces) == 1:
        return pieces[0]
    return Stated([n for piece in pieces for n in piece.names],
                  [size for piece in pieces for size in piece.sizes],
                  [mtime for piece in pieces for mtime in piece.mtimes],
                  [crc for piece in pieces for crc in piece.crc32cs])


def objects_of(bucket: str, files: Stated) -> list[ObjectInfo]:
    """The ObjectInfo of stat-ed files."""
    return list(map(functools.partial(object_of, bucket), *files))


def columns_of(bucket: str, files: Stated) -> ListedColumns:
    """Stat-ed files as an index takes them: the columns of :func:`objects_of`'s
    records, without them."""
    mtimes = files.mtimes
    if not mtimes or min(mtimes) > 0:
        # After the epoch a generation is the time (generation_at), and the
        # ``updated`` time written out is the generation's: derived, not made.
        return ListedColumns(bucket, "file", files.names, files.sizes, mtimes, files.crc32cs,
                             None)
    return ListedColumns(bucket, "file", files.names, files.sizes,
                         list(map(generation_at, mtimes)), files.crc32cs,
                         list(map(rfc3339, mtimes)))


# -- open uploads -------------------------------------------------------------


def _unless_gone(exc: OSError) -> None:
    """Raise a walk's failure to read a directory, unless it is no longer one
    (as :func:`_entries`): ``os.walk`` skipped every failure, and a folder
    it could not read (EIO, EACCES) hid its temporaries from ``aioflux
    clean``, which reported nothing left."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)) and (
            exc.errno != errno.ENAMETOOLONG):
        raise exc


def temporaries(bucket: str, prefix: str) -> list[MultipartUploadInfo]:
    """Temporary files of unfinished writes under ``prefix``, as open uploads."""
    root = path_of(bucket, "", op="list uploads")
    found: list[MultipartUploadInfo] = []
    for directory, _dirs, files in os.walk(folder_of(bucket, prefix, op="list uploads"),
                                           onerror=_unless_gone):
        rel = directory[len(root):].strip("/")
        for file in files:
            target, mark, _ = file.partition(TEMP_MARK)
            if not mark or not target.startswith("."):
                continue
            name = f"{rel}/{target[1:]}" if rel else target[1:]
            if not name.startswith(prefix):
                continue
            try:
                mtime = os.stat(f"{directory}/{file}").st_mtime
            except FileNotFoundError:
                continue  # finished or aborted meanwhile
            when = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc)
            found.append(MultipartUploadInfo(bucket, name, file,
                                             when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
    return sorted(found, key=lambda u: (u.name, u.upload_id))
