"""A griffe extension for rlx's API pages (loaded by mkdocstrings, see mkdocs.yml).

rlx documents dataclass fields and constants with ``#:`` comments above them (the Sphinx
convention, which ``--help`` texts and editors read) and cross-references with Sphinx
roles (``:class:`~rlx.collect.rollout.Rollout```). Griffe reads neither, so this extension

* makes the ``#:`` comment block above an attribute its docstring, and
* renders a role as inline code: ``:class:`~rlx.collect.rollout.Rollout``` -> ``Rollout``,
  ``:mod:`rlx.core.cuda_graphs``` -> ``rlx.core.cuda_graphs``.

It changes only what the docs show, never the code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _role_to_code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)  # type: ignore[arg-type]


class RlxDocstrings(griffe.Extension):
    """``#:`` comments as attribute docstrings; Sphinx roles as inline code."""

    def on_attribute_instance(self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute,
                              agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or not attr.lineno or attr.filepath is None:
            return
        try:
            lines = attr.lines_collection[attr.filepath]
        except KeyError:
            return
        comment: list[str] = []
        i = attr.lineno - 2  # the line above the attribute, 0-based
        while i >= 0 and lines[i].strip().startswith("#:"):
            comment.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        if comment:
            attr.docstring = griffe.Docstring("\n".join(comment), lineno=i + 2, parent=attr)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = _ROLE.sub(_role_to_code, obj.docstring.value)

    # griffe < 2 names the same event on_package_loaded.
    on_package_loaded = on_package
