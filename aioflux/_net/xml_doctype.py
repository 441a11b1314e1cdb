"""XML answers that declare a DTD, refused before anything is expanded.

S3 and GCS's XML API send none. ElementTree expands the internal entities
one declares (expat stops only past 8 MiB and 100 times the input): a
2 KiB answer to a multipart upload's creation made an 8 MB upload id,
sent again in every part's URL, and one at the 64 MiB cap on answers
could take GBs.
"""

from __future__ import annotations

from typing import NoReturn
from xml.parsers import expat

from .._core.errors import ProtocolError, describe
from .transport import Op

__all__ = ["refuse_doctype"]

# How a UTF-16 document starts (with or without its byte order mark): the
# one other encoding expat reads where "<!DOCTYPE" is not those bytes.
_UTF16_STARTS = (b"\xfe\xff", b"\xff\xfe", b"<\x00", b"\x00<")

_SERVICES = {"gs": "GCS", "s3": "S3"}


class _Declared(Exception):
    """A document declares a DTD (raised out of expat's handler)."""


def _declared(*args: object) -> NoReturn:
    raise _Declared


def refuse_doctype(raw: bytes, op: Op) -> None:
    """Refuse a document that declares a DTD: one pass of expat without a
    tree, stopped at the declaration. A document it cannot read is left to
    the caller's parser to report.

    Args:
        raw: the answer's body.
        op: the operation, bucket and object answered about.

    Raises:
        ProtocolError: the document declares a DTD.
    """
    if b"<!DOCTYPE" not in raw and not raw.startswith(_UTF16_STARTS):
        return  # no declaration (XML spells it so, in capitals): no second parse
    checker = expat.ParserCreate()
    checker.StartDoctypeDeclHandler = _declared
    try:
        checker.Parse(raw, True)
    except _Declared:
        service = _SERVICES.get(op.scheme, op.scheme)
        raise ProtocolError(f"{describe(op.operation, op.bucket, op.name, op.scheme)} failed: "
                            f"the answer declares a DTD, which {service} never sends (its "
                            "entities are not expanded)", operation=op.operation,
                            bucket=op.bucket, name=op.name, status=200) from None
    except expat.ExpatError:
        pass
