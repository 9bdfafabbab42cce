"""Sphinx configuration of the documentation site (`make docs` builds it into docs/_build/html).

The guides are the Markdown pages of this folder, read by MyST. The API reference is generated
at every build from the public names (`__all__`) of the package and of its sub-packages, so that
a name added to the API is documented without anyone listing it here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from datafusion_distributed import __version__

project = "datafusion-distributed"
author = "the datafusion-distributed contributors"
copyright = "Apache License 2.0, the datafusion-distributed contributors"  # noqa: A001 (Sphinx's name)
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the docstrings' Args:, Returns:, Raises: sections
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "api/generated/*.md"]
myst_heading_anchors = 4  # links to a page's sections by their titles, as GitHub renders them
myst_enable_extensions = ["colon_fence"]
default_role = "code"  # the docstrings' `name` is code
autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a dataclass's Attributes: section as fields, not a second description
html_theme = "pydata_sphinx_theme"  # the theme of the DataFusion projects' sites
html_title = f"datafusion-distributed {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
suppress_warnings = [
    # the guides link to files of the repository outside docs/ (benchmarks/README.md, examples/):
    # they resolve on GitHub and in a clone, not inside the site
    "myst.xref_missing",
]

# The public API, by module: every name of each one's __all__ (in this order on the page).
API_MODULES = [
    ("datafusion_distributed", "The package: contexts, clusters, configuration, resolvers and errors"),
    ("datafusion_distributed.events", "Handlers: task counts, routing, plan rewrites, adaptation, events"),
    ("datafusion_distributed.work_unit_feed", "Work-unit feeds"),
    ("datafusion_distributed.execution_plans", "Distributed plans: stages, tasks, inputs"),
    ("datafusion_distributed.flight_sql", "The Arrow Flight SQL endpoint"),
    ("datafusion_distributed.dashboard", "The dashboard"),
    ("datafusion_distributed.codec", "Plan bytes (for contributors)"),
    ("datafusion_distributed.test_utils.compare", "Test utilities: comparing results"),
    ("datafusion_distributed.test_utils.distribution", "Test utilities: showing how a query ran"),
    ("datafusion_distributed.test_utils.tpch", "Test utilities: TPC-H data and queries"),
    ("datafusion_distributed.test_utils.local_check", "Test utilities: plans checked in one process"),
]


def _write_api_pages(folder: Path) -> None:
    """docs/api/index.rst: one section per module of API_MODULES, an autosummary of its names
    (a name a module re-exports from one listed before it is documented there only)."""
    lines = ["API reference", "=============", "", "Every public name, from its docstring.", ""]
    documented: set[int] = set()
    for module_name, title in API_MODULES:
        module = importlib.import_module(module_name)
        names = [
            n for n in module.__all__ if not n.startswith("_") and id(getattr(module, n)) not in documented
        ]
        documented.update(id(getattr(module, n)) for n in names)
        lines += [title, "-" * len(title), "", f".. currentmodule:: {module_name}", "", ".. autosummary::"]
        lines += ["   :toctree: generated", "   :nosignatures:", ""]
        lines += [f"   {name}" for name in names]
        lines.append("")
    text = "\n".join(lines)
    folder.mkdir(exist_ok=True)
    page = folder / "index.rst"
    if not page.exists() or page.read_text() != text:
        page.write_text(text)


_write_api_pages(Path(__file__).parent / "api")


def setup(app: object) -> None:
    """Diagrams written in ```mermaid blocks show as their text (GitHub draws them)."""
    from pygments.lexers.special import TextLexer

    app.add_lexer("mermaid", TextLexer)  # type: ignore[attr-defined]
