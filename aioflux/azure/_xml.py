"""Azure Blob answers: XML documents, the version token, checksums in headers.

Version token: an Azure ETag is a quoted hexadecimal number
(``"0x8DCB1C5A2F3E4B7"``, Azurite's too), so ``ObjectInfo.generation`` is
that number, exact and reversible: preconditions and pinned reads map back
to ``If-Match`` without asking the server. Any other ETag (a proxy's, a
store that only looks like Azure) becomes a 63-bit hash above 2**64, which
the store maps back through the ETags it has seen (else a HEAD).

Checksums: aioflux's writes store the crc32c of the whole blob in the
metadata ``aioflux_crc32c`` (returned with every GET and HEAD, and in
listings with ``include=metadata``); Azure's own MD5 of the blob
(``Content-MD5``, ``x-ms-blob-content-md5`` on a range) is the check of a
whole blob that has no crc32c.

XML is parsed by lxml without entities, DTDs or network access: a hostile
server's entity bomb is refused as unparsable, never expanded.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .._core.errors import (
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    describe,
)
from .._core.integrity.crc import decode_crc32c
from .._net.checked_reads import Answers
from .._net.failures import Op
from .._net.pinned import gone as pinned_gone
from .._net.xml_answers import fail, lxml_etree, rfc3339

__all__ = [
    "ANSWERS",
    "CRC_KEY",
    "blob_md5",
    "etag_of",
    "fail",
    "generation_of",
    "gone",
    "lxml",
    "metadata_of",
    "parse",
    "precondition_failed",
    "reversible",
    "rfc3339",
    "stored_crc32c",
]

#: The metadata name aioflux's writes keep the blob's crc32c under.
CRC_KEY = "aioflux_crc32c"
_CRC_HEADER = "x-ms-meta-" + CRC_KEY
_AZURE_ETAG = re.compile(r'(?:W/)?"?0x([0-9A-Fa-f]{1,16})"?')
_HASHED = 1 << 64
_HASH_MASK = (1 << 63) - 1
INSTALL_HINT = 'pip install "aioflux-storage[azure]"'


def missing_extra(package: str, purpose: str) -> InvalidArgument:
    """The error for a package of the ``azure`` extra that is not installed.

    Args:
        package: the missing package.
        purpose: what az:// needs it for.

    Returns:
        The exception to raise, naming the package, the extra and the command.
    """
    return InvalidArgument(f"az:// URLs need the azure extra (azure-storage-blob, "
                           f"azure-identity, lxml); {package}, for {purpose}, is not "
                           f"installed: {INSTALL_HINT}")


def lxml() -> Any:
    """``lxml.etree``.

    Raises:
        InvalidArgument: lxml is not installed; the message names the extra.
    """
    return lxml_etree(lambda: missing_extra("lxml", "reading Azure's XML answers"))


def generation_of(etag: str) -> int:
    """The generation number of an ETag (see the module doc); 0 for none."""
    if not etag:
        return 0
    match = _AZURE_ETAG.fullmatch(etag.strip())
    if match is not None:
        value = int(match.group(1), 16)
        if value:
            return value
    digest = hashlib.blake2b(etag.encode(), digest_size=8).digest()
    return _HASHED | (int.from_bytes(digest, "big") & _HASH_MASK)


def reversible(generation: int) -> bool:
    """Whether ``generation`` carries its ETag rather than a hash of it."""
    return 0 < generation < _HASHED


def etag_of(generation: int) -> str | None:
    """The ETag a reversible generation stands for (Azure's spelling:
    upper-case hex), or None for a hashed one."""
    return f'"0x{generation:X}"' if reversible(generation) else None


def stored_crc32c(headers: Mapping[str, str]) -> int | None:
    """The crc32c aioflux stored in the blob's metadata (lower-cased
    headers); None when absent or malformed (the length checks still hold)."""
    value = headers.get(_CRC_HEADER)
    if not value:
        return None
    try:
        return decode_crc32c(value.strip())
    except ValueError:
        return None


def blob_md5(headers: Mapping[str, str]) -> str | None:
    """The whole blob's MD5 (hex) an answer reports: ``x-ms-blob-content-md5``
    (a ranged GET), else ``Content-MD5`` of an answer that is no range
    (a range's own, when asked, is only that range's)."""
    value = headers.get("x-ms-blob-content-md5")
    if value is None and "content-range" not in headers:
        value = headers.get("content-md5")
    if not value:
        return None
    try:
        digest = base64.b64decode(value.strip(), validate=True)
    except ValueError:
        return None
    return digest.hex() if len(digest) == 16 else None


def md5_base64(headers: Mapping[str, str]) -> str | None:
    """:func:`blob_md5` as ``ObjectInfo.md5`` holds it (base64)."""
    digest = blob_md5(headers)
    return None if digest is None else base64.b64encode(bytes.fromhex(digest)).decode()


def metadata_of(headers: Mapping[str, str]) -> dict[str, str]:
    """The custom metadata of an answer (lower-cased headers), aioflux's
    own crc32c left out."""
    return {k[10:]: v for k, v in headers.items()
            if k.startswith("x-ms-meta-") and k != _CRC_HEADER}


def _answered_version(headers: Mapping[str, str]) -> int | None:
    return generation_of(headers.get("etag", "")) or None


def _pin(headers: Mapping[str, str]) -> dict[str, str]:
    # A resumed read continues the version its first response came from.
    etag = headers.get("etag")
    return {"If-Match": etag} if etag else {}


#: How a Get Blob's answers are read (aioflux._net.checked_reads).
ANSWERS = Answers(crc32c=stored_crc32c, md5=blob_md5, version=_answered_version, pin=_pin,
                  md5_source="Content-MD5")


def parse(raw: bytes, op: Op) -> Any:
    """Parse an XML answer with lxml (no entities, DTD or network).

    Raises:
        StorageError: unparsable XML (an entity bomb among others).
    """
    etree = lxml()
    # A parser per call: lxml's parsers are not to be shared between threads.
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             remove_comments=True, remove_pis=True, huge_tree=False)
    try:
        root = etree.fromstring(raw, parser)
    except etree.XMLSyntaxError as exc:
        fail(op, f"unparsable XML response ({str(exc)[:120]})", exc)
    if root is None:
        fail(op, "an empty XML response")
    if any(True for _ in root.iter(etree.Entity)):
        # An entity left unexpanded is a document no Azure server sends.
        fail(op, "an XML response declaring entities")
    return root


def gone(op: Op, generation: int) -> NotFound:
    """A pinned generation (ETag) that is no longer the blob's: gone, as
    an overwritten generation is on GCS."""
    return pinned_gone(op, generation, what="blob", reason="ConditionNotMet")


def precondition_failed(op: Op, generation: int) -> PreconditionFailed:
    """An ``if_generation_match`` that did not hold."""
    what = "exists already" if generation == 0 else f"is not generation {generation}"
    return PreconditionFailed(f"{describe(op.operation, op.bucket, op.name, 'az')} failed: "
                              f"the blob {what}", operation=op.operation, bucket=op.bucket,
                              name=op.name, status=412, reason="ConditionNotMet")
