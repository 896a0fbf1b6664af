"""A griffe extension (mkdocs.yml: the python handler's ``extensions``): Sphinx roles in docstrings
(``:class:`Message` ``, ``:meth:`play` ``, ``:func:`~teamrl.config.load_config` ``) become code spans, as
they read in the source; mkdocstrings would show them as ``:class:Message``."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?[a-z]+:`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
