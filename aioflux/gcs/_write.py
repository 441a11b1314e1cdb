"""Whole objects written in one call, checked: ``write`` and ``compose``.

A write is one request (``uploadType=multipart``: the resource and the
bytes) up to ``SIMPLE_UPLOAD_LIMIT``, a resumable session beyond it
(:mod:`._resumable`); a compose is one request naming its sources. Each
carries what the server must check (the data's crc32c; the sources'
generations), and the object published is checked against what was sent
(:mod:`._published`): the data's size and crc32c, or the sources' combined,
when every source is an ObjectInfo that knows them. A request retried after
its first attempt landed (the answer lost) fails its own precondition: it
succeeds only if the object then holds exactly what was sent (for a compose
of sources given by name, what they compose to as they stand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core.errors import NotFound, PreconditionFailed
from .._core.integrity.crc import crc32c, encode_crc32c
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import SourceSpec, composite_of, published_before
from .._net.transport import Op
from ._json import compose_body, multipart_related, refused_resource, written_handler
from ._published import confirm_published, verify_published
from ._resumable import ResumableUpload

if TYPE_CHECKING:
    from ._client import AsyncClient

__all__ = ["SIMPLE_UPLOAD_LIMIT", "compose_object", "write_object"]

# One request up to this size; a resumable session beyond it, so a failure
# costs one chunk, not the whole body.
SIMPLE_UPLOAD_LIMIT = 16 * 1024 * 1024


async def write_object(client: AsyncClient, bucket: str, name: str, view: memoryview,
                       content_type: str, if_generation_match: int | None,
                       metadata: dict[str, str] | None, resumable: bool | None) -> ObjectInfo:
    """Write ``view`` as ``name``, checked (see ``AsyncClient.write``)."""
    checksum = crc32c(view)
    if resumable is None:
        resumable = len(view) > SIMPLE_UPLOAD_LIMIT
    if resumable:
        # The session carries the crc32c from the start, and the final
        # request repeats it, so a checking server refuses bad bytes.
        upload = ResumableUpload(client, bucket, name, content_type=content_type,
                                 if_generation_match=if_generation_match, metadata=metadata,
                                 crc32c=checksum)
        await upload.start()
        try:
            return await upload.finish(view, crc32c=checksum)
        except BaseException:
            await upload.cancel()
            raise
    op = Op("write", bucket, name)
    try:
        answer = await _multipart_upload(client, bucket, name, view, checksum, content_type,
                                         if_generation_match, metadata)
    except PreconditionFailed as exc:
        # A retried upload whose first attempt landed (its response lost)
        # fails its own precondition: it is ours if the object now holds
        # exactly these bytes.
        if if_generation_match is None:
            raise
        return await published_before(client, bucket, name, exc, len(view), checksum)
    if isinstance(answer, str):
        # The write may have published: only the name can tell what it holds.
        return await confirm_published(client, op, len(view), checksum,
                                       why=f"the answer's object resource {answer}")
    # What the answer left out (a crc32c, the generation) comes back filled in.
    return await verify_published(client, op, answer, len(view), checksum)


async def _multipart_upload(client: AsyncClient, bucket: str, name: str, view: memoryview,
                            checksum: int, content_type: str, if_generation_match: int | None,
                            metadata: dict[str, str] | None) -> ObjectInfo | str:
    """One ``uploadType=multipart`` request: the resource and the bytes; its
    answer, or what makes it no object resource (``written_handler``)."""
    resource: dict[str, Any] = {"name": name, "contentType": content_type,
                                "crc32c": encode_crc32c(checksum)}
    if metadata:
        resource["metadata"] = metadata
    boundary, body = multipart_related(resource, content_type, view)
    params = {"uploadType": "multipart", **client._json_params}
    if if_generation_match is not None:
        params["ifGenerationMatch"] = str(if_generation_match)
    url = f"{client.endpoint}/upload/storage/v1/b/{bucket}/o"
    return await client.transport.request(
        Op("write", bucket, name), "POST", url, written_handler(Op("write", bucket, name)),
        params=params,
        headers={"Content-Type": f"multipart/related; boundary={boundary}"}, data=body)


async def _sources_now(client: AsyncClient, bucket: str,
                       sources: Sequence[SourceSpec]) -> tuple[int, int] | None:
    """``(size, crc32c)`` of the composite of ``sources`` as they stand (a
    generation a source names must be the one standing); None where that
    cannot be known."""
    found = []
    for src in sources:
        name, generation = (src, None) if isinstance(src, str) else \
            (src.name, src.generation) if isinstance(src, ObjectInfo) else src
        info = await client.stat(bucket, name)
        if generation is not None and info.generation != generation:
            return None
        found.append(info)
    return composite_of(found)


async def compose_object(client: AsyncClient, bucket: str, destination: str,
                         sources: Sequence[SourceSpec], if_generation_match: int | None,
                         content_type: str) -> ObjectInfo:
    """Compose ``sources`` into ``destination``, checked (see ``AsyncClient.compose``)."""
    body = compose_body(sources, content_type)
    params = dict(client._json_params)
    if if_generation_match is not None:
        params["ifGenerationMatch"] = str(if_generation_match)
    expected = composite_of(sources)
    op = Op("compose", bucket, destination)
    try:
        answer: ObjectInfo | str = await client.transport.request(
            op, "POST", f"{client._json_url(bucket, destination)}/compose",
            written_handler(op), params=params, headers={"Content-Type": "application/json"},
            data=body)
    except PreconditionFailed as exc:
        # As in write_object: a retried compose whose first attempt landed.
        if exc.attempts < 2 or if_generation_match is None:
            raise
        try:
            # Sources given by name: what they hold now (a source changed
            # since is no proof, and the precondition's failure stands).
            known = expected or await _sources_now(client, bucket, sources)
            info = await client.stat(bucket, destination)
        except NotFound:
            raise exc from None
        if known is None or (info.size, info.crc32c) != known:
            raise
        return info
    if isinstance(answer, str):
        if expected is None:
            raise refused_resource(op, "the object resource", answer)
        return await confirm_published(client, op, *expected,
                                       why=f"the answer's object resource {answer}")
    if expected is not None:
        return await verify_published(client, op, answer, *expected)
    return answer
