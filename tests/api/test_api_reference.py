"""The API reference covers every public name, and every public name documents itself.

The site's reference pages (``docs/reference/*.md``) render each public
name from a ``::: module.name`` directive (mkdocstrings); its content is the
docstring. So each public name needs a directive and a docstring, and each
public function, constructor and method (of the class itself, not
inherited) a Google-style ``Args:`` entry for every parameter and, when it
returns something, a ``Returns:`` (or ``Yields:``) section: the reference
then shows each parameter with its type, default and meaning.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_exported_members import DOCUMENTED

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
# Sections whose entries name parameters (dataclass fields are Attributes).
_PARAM_SECTIONS = {"Args:", "Arguments:", "Parameters:", "Attributes:", "Other Parameters:"}
_RETURN_SECTIONS = {"Returns:", "Yields:"}
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:")


def directives() -> set[str]:
    """Every ``::: dotted.name`` of the reference pages."""
    return {m for page in REFERENCE.glob("*.md") for m in _DIRECTIVE.findall(page.read_text())}


def sections(doc: str) -> dict[str, list[str]]:
    """A Google-style docstring's sections: title line -> its entry names."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    indent = None
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        heading = not line.startswith(" ") and stripped.endswith(":") \
            and " " not in stripped[:-1]
        if heading or stripped in _PARAM_SECTIONS:
            current = found.setdefault(stripped, [])
            indent = None
            continue
        if current is None or not stripped:
            continue
        if not line.startswith(" "):
            current = None
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width == indent and (entry := _ENTRY.match(stripped)):
            current.append(entry.group(1))
    return found


def _documented(doc: str | None) -> set[str]:
    names: set[str] = set()
    for title, entries in sections(doc or "").items():
        if title in _PARAM_SECTIONS:
            names |= {e.lstrip("*") for e in entries}
    return names


def _params(func: Callable[..., Any], *, bound: bool) -> list[str]:
    params = list(inspect.signature(func).parameters.values())
    if bound and params and params[0].name in {"self", "cls"}:
        params = params[1:]
    return [p.name for p in params if not p.name.startswith("_")]


def _returns_something(func: Callable[..., Any]) -> bool:
    annotation = inspect.signature(func).return_annotation
    return annotation not in {None, "None", inspect.Signature.empty}


def function_problems(where: str, func: Callable[..., Any], *, bound: bool = False,
                      extra_doc: str | None = None) -> list[str]:
    """What ``func``'s docstring lacks: a docstring, Args entries, a Returns section."""
    doc = inspect.getdoc(func) if func.__doc__ else None
    if not (doc or "").strip():
        return [f"{where}: no docstring"]
    problems = []
    missing = [p for p in _params(func, bound=bound)
               if p not in _documented(doc) | _documented(extra_doc)]
    if missing:
        problems.append(f"{where}: Args lacks {missing}")
    if _returns_something(func) and func.__name__ != "__init__" \
            and not set(sections(doc or "")) & _RETURN_SECTIONS:
        problems.append(f"{where}: no Returns section")
    return problems


def class_problems(where: str, cls: type) -> list[str]:
    """What ``cls`` lacks: its own docstring, its constructor's and methods' entries."""
    doc = cls.__dict__.get("__doc__")
    if not (doc or "").strip():
        return [f"{where}: no docstring"]
    problems = []
    init = cls.__dict__.get("__init__")
    if getattr(cls, "_is_protocol", False):
        pass  # typing.Protocol's own __init__: a protocol is not constructed
    elif isinstance(init, types.FunctionType):
        missing = [p for p in _params(init, bound=True)
                   if p not in _documented(doc) | _documented(init.__doc__)]
        if missing:
            problems.append(f"{where}(): Args lacks {missing}")
    elif "__dataclass_fields__" in cls.__dict__:
        fields = [n for n, f in cls.__dataclass_fields__.items()
                  if f.init and not n.startswith("_")]
        missing = [n for n in fields if n not in _documented(doc)]
        if missing:
            problems.append(f"{where}(): Attributes lacks {missing}")
    seen: set[str] = set()
    # Members of private bases (AsyncClient's multipart calls) are the
    # class's own in the reference (its directive shows inherited members).
    for owner in (cls, *private_bases(cls)):
        for name, member in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(member, property):
                if not (member.__doc__ or "").strip():
                    problems.append(f"{where}.{name}: no docstring")
                continue
            if isinstance(member, (classmethod, staticmethod)):
                member = member.__func__
            if isinstance(member, types.FunctionType):
                problems += function_problems(
                    f"{where}.{name}", member,
                    bound=not isinstance(vars(owner)[name], staticmethod))
    return problems


def _private_aioflux(cls: type) -> bool:
    """A class of aioflux's private modules that no package exports."""
    parts = cls.__module__.split(".")
    return parts[0] == "aioflux" and any(p.startswith("_") for p in parts) \
        and not any(cls is getattr(importlib.import_module(m), cls.__name__, None)
                    for m in DOCUMENTED if m != "aioflux.torch.lightning")


def private_bases(cls: type) -> list[type]:
    """The private aioflux classes among ``cls``'s bases (its reference shows
    their members as its own)."""
    return [b for b in cls.__mro__[1:] if _private_aioflux(b)]


def attribute_docstring(package: types.ModuleType, name: str) -> str | None:
    """The string literal right after ``name``'s assignment, in the module it is imported from."""
    tree = ast.parse(Path(package.__file__ or "").read_text())
    module = package
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            module = importlib.import_module(
                "." * node.level + (node.module or ""), package.__name__)
            break
    body = ast.parse(Path(module.__file__ or "").read_text()).body
    for stmt, following in itertools.pairwise(body):
        targets = (stmt.targets if isinstance(stmt, ast.Assign)
                   else [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) \
                and isinstance(following, ast.Expr) \
                and isinstance(following.value, ast.Constant) \
                and isinstance(following.value.value, str):
            return following.value.value
    return None


def test_sections_parser_reads_google_style() -> None:
    doc = '''Summary.

    Args:
        url: where.
        mode (str): how; a long line
            that goes on: with a colon.
        **settings: the rest.

    Returns:
        Something.
    '''
    found = sections(doc)
    assert found["Args:"] == ["url", "mode", "**settings"]
    assert "Returns:" in found
    assert _documented(doc) == {"url", "mode", "settings"}


def test_the_checks_catch_a_missing_entry() -> None:
    def documented(a: int, b: int) -> int:
        """Add.

        Args:
            a: one.

        Returns:
            The sum.
        """
        return a + b

    def undocumented(a: int) -> int:
        """Nothing about a."""
        return a

    assert function_problems("f", documented) == ["f: Args lacks ['b']"]
    assert function_problems("g", undocumented) == ["g: Args lacks ['a']",
                                                    "g: no Returns section"]


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_every_public_name_is_in_the_reference(module_name: str) -> None:
    if module_name == "aioflux.torch.lightning":
        pytest.importorskip("lightning")
    module = importlib.import_module(module_name)
    rendered = directives()
    missing = [n for n in module.__all__ if n != "__version__"
               and f"{module_name}.{n}" not in rendered]
    assert not missing, f"docs/reference/*.md has no '::: {module_name}.NAME' for {missing}"


# Classes whose private base is the machinery itself, not API: MockTransport
# is the GCS client's transport, driven by the client under test.
MACHINERY_BASES = {"aioflux.testing.MockTransport"}


def directive_options(target: str) -> str:
    """The indented ``options:`` lines under ``::: target``, as text."""
    for page in REFERENCE.glob("*.md"):
        match = re.search(rf"^::: {re.escape(target)}\n((?:    .*\n)*)", page.read_text(),
                          re.MULTILINE)
        if match:
            return match.group(1)
    return ""


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_members_of_private_bases_are_shown(module_name: str) -> None:
    # AsyncClient's multipart calls live in a private mixin: without
    # inherited_members the reference would leave them out.
    if module_name == "aioflux.torch.lightning":
        pytest.importorskip("lightning")
    module = importlib.import_module(module_name)
    for name in module.__all__:
        item, target = getattr(module, name), f"{module_name}.{name}"
        if isinstance(item, type) and private_bases(item) and target not in MACHINERY_BASES:
            assert "inherited_members: true" in directive_options(target), target


def test_the_reference_renders_only_public_names() -> None:
    for target in directives():
        module_name, _, name = target.rpartition(".")
        assert not any(part.startswith("_") for part in target.split(".")), target
        assert name in importlib.import_module(module_name).__all__, target


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED))
def test_public_names_document_themselves(module_name: str) -> None:
    if module_name == "aioflux.torch.lightning":
        pytest.importorskip("lightning")
    module = importlib.import_module(module_name)
    problems: list[str] = []
    for name in module.__all__:
        item = getattr(module, name)
        where = f"{module_name}.{name}"
        if name == "__version__":
            assert isinstance(item, str)
        elif isinstance(item, type) and item.__name__ != name:
            # Another name for a class (GcsURL = StoreURL): documented where it is bound.
            if not attribute_docstring(module, name):
                problems.append(f"{where}: no docstring after its assignment")
        elif isinstance(item, type):
            problems += class_problems(where, item)
        elif isinstance(item, types.FunctionType):
            problems += function_problems(where, item)
        elif not attribute_docstring(module, name):
            problems.append(f"{where}: no docstring after its assignment")
    assert not problems, "\n".join(problems)
