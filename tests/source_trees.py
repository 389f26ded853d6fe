"""One parse of a source tree per test process, shared by every walk over it (issue 31).

File: ``tests/source_trees.py`` (a helper of the unit tier's source walks: ``test_one_home``,
``test_no_string_imports``). Each walk used to read and ``ast.parse`` the whole package again and then
``ast.walk`` every tree again; here a tree is parsed once and its walk order computed once, per process
(so once per xdist worker), and every walk reads the same trees.
Guarantee: a walk sees the files as they are on disk now: the cache is keyed by the root and by every
``.py`` file's path, size and modification time, so a planted file in a test's ``tmp_path`` or an edit
between two calls is parsed afresh. The trees are shared: a walk must not change them (none does; a walk
that set attributes on nodes would leak into the next walk).
What would break it: a walk that mutates a tree, or a file changed within one mtime tick at the same size.
"""

from __future__ import annotations

import ast
import functools
import os


def _stamp(root: str) -> tuple[tuple[str, int, int], ...]:
    """Every ``.py`` file under ``root`` (``__pycache__`` skipped) as (relative path, size, mtime ns)."""
    out = []
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(base, name)
                st = os.stat(path)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                out.append((rel, st.st_size, st.st_mtime_ns))
    return tuple(out)


@functools.cache
def _parsed(root: str, stamp: tuple[tuple[str, int, int], ...]) -> tuple[tuple[str, ast.Module], ...]:
    out = []
    for rel, _size, _mtime in stamp:
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8") as f:
            out.append((rel, ast.parse(f.read(), filename=path)))
    return tuple(out)


def modules(root: str) -> tuple[tuple[str, ast.Module], ...]:
    """(path relative to ``root`` with ``/``, parsed tree) of every ``.py`` file under ``root``, sorted."""
    return _parsed(root, _stamp(root))


# id(node) -> (node, its ast.walk order); the node is kept so its id is never reused while cached
_WALKS: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}


def walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """``ast.walk(node)`` as a tuple, computed once per node (the trees of ``modules`` are shared)."""
    hit = _WALKS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    order = tuple(ast.walk(node))
    _WALKS[id(node)] = (node, order)
    return order
