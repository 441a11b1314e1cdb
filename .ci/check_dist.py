"""CI: what the built distributions hold (.ci/run, "wheel outside the checkout").

    python .ci/check_dist.py DIST_DIR    # from the checkout's root

The wheel holds the ``aioflux`` package alone, its metadata carries
classifiers and README.md as a Markdown long description, whose links are
absolute ``https://`` URLs (a relative link breaks on the package index);
every file README.md names outside the package (``examples/...``,
``docs/...``, ``ARCHITECTURE.md``...) is in the sdist, where the README says
they are.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

# A file named in backquotes, or a bare ``NAME.md``.
_NAMED = re.compile(r"`([A-Za-z0-9_./-]+)`|\b([A-Z][A-Z_]*\.md)\b")
# A Markdown link or image target, or an HTML href/src.
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)|\b(?:href|src)=[\"']([^\"']+)")


def named_outside_package(readme: str) -> set[str]:
    """The checkout's files and folders README.md names, outside ``aioflux/``."""
    found = set()
    for quoted, bare in _NAMED.findall(readme):
        path = (quoted or bare).rstrip("/")
        if path and path != "." and not path.startswith("aioflux") and Path(path).exists():
            found.add(path)
    return found


def relative_links(readme: str) -> list[str]:
    """Link targets of README.md that are not absolute ``https://`` URLs."""
    return [a or b for a, b in _LINK.findall(readme) if not (a or b).startswith("https://")]


def problems(dist: Path) -> list[str]:
    """What is wrong with the wheel and sdist in ``dist`` (none: an empty list)."""
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    found = []
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [meta_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = Parser().parsestr(zf.read(meta_name).decode())
    stray = [n for n in names if not n.startswith("aioflux/") and ".dist-info/" not in n]
    if stray:
        found.append(f"the wheel holds files outside aioflux/: {stray[:5]}")
    if not meta.get_all("Classifier"):
        found.append("the wheel's metadata has no classifiers")
    if meta.get("Description-Content-Type") != "text/markdown":
        found.append(f"long description type {meta.get('Description-Content-Type')!r}")
    readme = Path("README.md").read_text(encoding="utf-8")
    if meta.get_payload().strip() != readme.strip():
        found.append("the long description is not README.md")
    for target in relative_links(readme):
        found.append(f"README.md links to {target!r}: the long description needs https:// links")
    with tarfile.open(sdist) as tf:
        # Members are under "<name>-<version>/".
        members = [m.name.partition("/")[2] for m in tf.getmembers()]
    for path in sorted(named_outside_package(readme)):
        if not any(m == path or m.startswith(f"{path}/") for m in members):
            found.append(f"README.md names {path}, which the sdist does not hold")
    return found


def main() -> int:
    dist = Path(sys.argv[1])
    found = problems(dist)
    for problem in found:
        print(f"check_dist: {problem}", file=sys.stderr)
    if not found:
        named = len(named_outside_package(Path("README.md").read_text(encoding="utf-8")))
        print(f"check_dist: {', '.join(sorted(p.name for p in dist.iterdir()))}: wheel holds "
              f"aioflux/ only, has classifiers and README.md; the sdist holds the {named} "
              "paths README.md names outside the package")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
