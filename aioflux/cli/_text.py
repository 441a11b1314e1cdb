"""How names reach the terminal: a line of output per name, one line per
failure, whatever control characters a name holds."""

from __future__ import annotations

import re

__all__ = ["missing", "one_line", "shell_quoted"]

# Control characters: C0, DEL and C1. A name may hold them (S3 and Azure
# keys, local file names; GCS refuses only CR and LF).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A brace pattern as the shards expand one: {a,b} or {000..099}.
_BRACES = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")


def _escape(char: str) -> str:
    # Octal escapes of the UTF-8 bytes (a C1 control is two), as GNU ls
    # writes them and bash's $'...' reads them back.
    return _NAMED_ESCAPES.get(char) or "".join(f"\\{b:03o}" for b in char.encode())


def shell_quoted(text: str) -> str:
    """``text`` as one line of output: itself, or where it holds a control
    character, quoted as GNU ``ls`` quotes such a name on a terminal
    (``'gs://b/new'$'\\n''line'``), which bash, zsh and ksh read back as
    the name.

    Printed raw, ``s3://b/new\\nline`` was two lines, ``s3://b/new`` and
    ``line``: a script reading ``ls`` a line at a time took them for two
    objects, and deleted ``s3://b/new`` if there was one.

    Args:
        text: a URL (or any text) to print on a line of its own.

    Returns:
        The line.
    """
    if not _CONTROL.search(text):
        return text
    parts = []
    for run in re.split(r"([\x00-\x1f\x7f-\x9f]+)", text):
        if not run:
            continue
        if _CONTROL.match(run):
            parts.append("$'" + "".join(_escape(c) for c in run) + "'")
        else:
            parts.append("'" + run.replace("'", "'\\''") + "'")
    return "".join(parts)


def one_line(text: str) -> str:
    """``text`` with its control characters written as backslash escapes
    (``\\n``, ``\\r``, ``\\t``, ``\\001``): a message that names a URL
    holding a line break stays the one line on stderr that every failure is.

    Args:
        text: a message.

    Returns:
        The message on one line.
    """
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def missing(message: str, name: str) -> str:
    """The message of a missing object ``name``, with a word on wildcards
    where the name holds one: ``gsutil`` and ``aws s3`` users write
    ``gs://b/logs/*.json``, which aioflux takes as a name (``*`` is a
    valid character of one), and "no such object" alone left them guessing.
    So for a brace pattern (``http://host/train-{0..4}.tar``), which only
    the shards expand.

    Args:
        message: the failure.
        name: the object name that was not found.

    Returns:
        The message, and the word on wildcards if it applies.
    """
    if _BRACES.search(name):
        return (f"{message} (a brace pattern names several objects, which only aioflux "
                "shards and the shard datasets expand; elsewhere '{' and '}' are part of a "
                "name: name one object)")
    if not any(c in name for c in "*?["):
        return message
    return (f"{message} (aioflux takes '*', '?' and '[' as part of a name, not as wildcards: "
            "name a folder, with -r where the command takes it)")
