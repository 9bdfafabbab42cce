"""User extensions: what a user hands DataFusion to extend it, installed on every session that
plans or decodes a query's task plans (docs/extensions.md).

An extension is one of:

- an FFI physical extension codec, an object with `__datafusion_physical_extension_codec__`
  (the codec of a compiled library's execution plan nodes);
- an extension bundle of the `datafusion` wheel, an object with
  `__datafusion_session_components__` or `__datafusion_session_planner__`;
- an installer, a callable taking a SessionContext that registers functions, tables or
  providers on it, and returns None or the SessionContext to use instead;
- an importable name `"module:attribute"` of any of these (a class is made with no argument).
  Only names reach worker processes (`--extension` on the command line), so a cluster the
  library starts in other processes takes names only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from datafusion import SessionContext

from ..errors import ExtensionError

Extension = Any  # a codec, a bundle, an installer, or "module:attribute" naming one
_CODEC = "__datafusion_physical_extension_codec__"
_BUNDLE = ("__datafusion_session_components__", "__datafusion_session_planner__")


def extension_name(extension: Extension) -> str:
    """How `extension` is named in notes, errors and a worker's health answer: its importable
    name if given as one, else its class's (or function's) module and name."""
    if isinstance(extension, str):
        return extension
    named = extension if callable(extension) and hasattr(extension, "__qualname__") else type(extension)
    return f"{named.__module__}:{named.__qualname__}"


def load(extension: Extension) -> Any:
    """The object `extension` stands for: imported when a name, made when a class."""
    if not isinstance(extension, str):
        return extension
    module_name, colon, attribute = extension.partition(":")
    if not colon or not module_name or not attribute:
        raise ExtensionError(f"extension {extension!r}: expected 'module:attribute'")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExtensionError(
            f"extension {extension!r}: module {module_name!r} cannot be imported: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ExtensionError(f"extension {extension!r}: {module_name} has no {attribute!r}") from None
    if isinstance(found, type):
        try:
            found = found()
        except Exception as exc:
            raise ExtensionError(
                f"extension {extension!r}: the class cannot be made without arguments: {exc}"
            ) from exc
    return found


def _install_one(ctx: SessionContext, extension: Extension) -> SessionContext:
    found = load(extension)
    if hasattr(found, _CODEC):
        codec_id = getattr(found, "__datafusion_codec_id__", None)
        if codec_id is not None and codec_id in ctx.physical_extension_codec_ids():
            return ctx  # installed already (the user's context may carry it)
        return ctx.with_physical_extension_codec(found)
    if any(hasattr(found, hook) for hook in _BUNDLE):
        return ctx.with_extensions(found)
    if callable(found):
        installer: Callable[[SessionContext], SessionContext | None] = found
        made = installer(ctx)
        if made is not None and not isinstance(made, SessionContext):
            raise ExtensionError(
                f"extension {extension_name(extension)!r}: an installer returns None or a "
                f"SessionContext, not {type(made).__name__}"
            )
        return made or ctx
    raise ExtensionError(
        f"extension {extension_name(extension)!r} is neither a physical extension codec, an "
        "extension bundle nor an installer (a callable taking a SessionContext)"
    )


def install(ctx: SessionContext, extensions: Sequence[Extension]) -> SessionContext:
    """`ctx` with every one of `extensions` installed, in order (a codec on the context's
    codecs; a context with new codecs shares its session with `ctx`).

    Raises:
        ExtensionError: an extension cannot be loaded, or failed to install (named).
    """
    for extension in extensions:
        try:
            ctx = _install_one(ctx, extension)
        except ExtensionError:
            raise
        except Exception as exc:  # an installer's own error, or DataFusion's
            raise ExtensionError(f"extension {extension_name(extension)!r} failed to install: {exc}") from exc
    return ctx


def splittable_nodes(extensions: Sequence[Extension]) -> set[str]:
    """The node types `extensions` declare safe to split a stage across tasks (each computes
    over a share of its input partitions a share of its output): an extension's
    `splittable_nodes` attribute, the names its nodes give themselves."""
    return {str(name) for e in extensions for name in getattr(load(e), "splittable_nodes", ())}


def check_names(extensions: Sequence[Extension], where: str) -> tuple[str, ...]:
    """The names of `extensions`, which must all be names (`where` they go: worker processes).

    Raises:
        ExtensionError: one is an object, which cannot reach another process.
    """
    for extension in extensions:
        if not isinstance(extension, str):
            raise ExtensionError(
                f"{where} take extensions as importable names ('module:attribute'), not "
                f"{extension_name(extension)!r}: an object cannot reach another process"
            )
    return tuple(extensions)
