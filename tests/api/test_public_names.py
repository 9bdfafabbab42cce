"""Every public name of the library says what it is: a docstring and type hints.

Covers the modules under FOLDERS (the whole package) minus NOT_YET.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

import datafusion_distributed
from datafusion_distributed.api.context import DistributedContext
from datafusion_distributed.api.dataframe import DistributedDataFrame

PACKAGE = datafusion_distributed.__name__

# Module prefixes checked: a module is covered when its name is a prefix or starts with one plus ".".
FOLDERS = [PACKAGE]

# Modules inside FOLDERS that are not checked yet.
NOT_YET: set[str] = set()


def _covered(name: str) -> bool:
    return name not in NOT_YET and any(name == p or name.startswith(p + ".") for p in FOLDERS)


def _module_names() -> list[str]:
    names = [PACKAGE] + [
        info.name for info in pkgutil.walk_packages(datafusion_distributed.__path__, PACKAGE + ".")
    ]
    return sorted(n for n in names if _covered(n))


def _runs_on_import(name: str) -> bool:
    """`__main__` modules run the program when imported, so only their source is read."""
    return name.rsplit(".", 1)[-1] == "__main__"


def _is_public(name: str) -> bool:
    return not name.startswith("_")


def _auto_doc(cls: type) -> bool:
    """Dataclasses and named tuples without a docstring get one made from their signature."""
    generated = dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    return generated and (cls.__doc__ or "").startswith(cls.__name__ + "(")


def _defined_names(module: ModuleType) -> Iterator[tuple[str, object]]:
    """Public functions and classes defined in `module` (not imported into it), by qualified name."""
    seen: set[int] = set()
    for name, value in vars(module).items():
        value = inspect.unwrap(value) if callable(value) else value
        if not _is_public(name) or id(value) in seen:
            continue
        if not (inspect.isfunction(value) or inspect.isclass(value)):
            continue
        if value.__module__ != module.__name__ or value.__qualname__ != name:
            continue
        seen.add(id(value))
        yield name, value
        if inspect.isclass(value):
            yield from _members(value)


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """Public methods, properties and nested classes in the class's own `__dict__`."""
    for name, value in vars(cls).items():
        if not _is_public(name):  # also skips dunders
            continue
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property) or inspect.isfunction(value):
            yield f"{cls.__qualname__}.{name}", value
        elif inspect.isclass(value) and value.__qualname__ == f"{cls.__qualname__}.{name}":
            yield value.__qualname__, value
            yield from _members(value)


def _signature_problems(func: Callable, needs_return: bool = True) -> list[str]:
    problems = []
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    for i, param in enumerate(signature.parameters.values()):
        if i == 0 and param.name in ("self", "cls"):
            continue
        if param.annotation is inspect.Parameter.empty:
            problems.append(f"parameter {param.name!r} has no type hint")
    if needs_return and signature.return_annotation is inspect.Signature.empty:
        problems.append("no return type hint")
    return problems


def _problems(value: object) -> list[str]:
    if isinstance(value, property):
        problems = [] if (value.fget and (value.fget.__doc__ or "").strip()) else ["no docstring"]
        if value.fget:
            problems += _signature_problems(value.fget)
        if value.fset:
            problems += [f"setter: {p}" for p in _signature_problems(value.fset, needs_return=False)]
        return problems
    if inspect.isclass(value):
        doc = "" if _auto_doc(value) else (value.__doc__ or "")
        return [] if doc.strip() else ["no docstring"]
    problems = [] if (value.__doc__ or "").strip() else ["no docstring"]
    return problems + _signature_problems(value)


def _module_docstring(name: str) -> str | None:
    if _runs_on_import(name):
        spec = importlib.util.find_spec(name)
        with open(spec.origin, encoding="utf-8") as source:
            return ast.get_docstring(ast.parse(source.read()))
    return importlib.import_module(name).__doc__


def _is_public_module(name: str) -> bool:
    """Packages and modules without a leading underscore, and the `__main__` entry point."""
    last = name.rsplit(".", 1)[-1]
    return _is_public(last) or last == "__main__"


def _names() -> list[tuple[str, object]]:
    names = []
    for module_name in _module_names():
        if _runs_on_import(module_name):
            continue
        module = importlib.import_module(module_name)
        names += [(f"{module_name}.{qualname}", value) for qualname, value in _defined_names(module)]
    return names


MODULES = [n for n in _module_names() if _is_public_module(n)]
NAMES = _names()


@pytest.mark.parametrize("module_name", MODULES)
def test_public_module_has_a_docstring(module_name: str) -> None:
    assert (_module_docstring(module_name) or "").strip(), f"{module_name}: no module docstring"


@pytest.mark.parametrize(("name", "value"), NAMES, ids=[n for n, _ in NAMES])
def test_public_name_has_a_docstring_and_type_hints(name: str, value: object) -> None:
    problems = _problems(value)
    assert not problems, f"{name}: " + "; ".join(problems)


@pytest.mark.parametrize("cls", [DistributedContext, DistributedDataFrame], ids=lambda cls: cls.__name__)
def test_every_public_method_of_the_api_is_checked(cls: type) -> None:
    """The walk sees every public method, including those made by assignment
    (`read_parquet = _made_on_ctx(SessionContext.read_parquet)`), not only `def`s."""
    checked = {name for name, _ in NAMES}
    prefix = f"{cls.__module__}.{cls.__qualname__}."
    public = {
        name: value
        for name, value in vars(cls).items()
        if _is_public(name) and (callable(value) or isinstance(value, property | staticmethod | classmethod))
    }
    assert public, f"{cls.__name__}: no public methods found"
    missed = sorted(name for name in public if prefix + name not in checked)
    assert not missed, f"{cls.__name__}: not checked: {missed}"
    if cls is DistributedContext:
        assigned = [name for name, value in public.items() if hasattr(value, "__wrapped__")]
        assert "read_parquet" in assigned and "register_parquet" in assigned
