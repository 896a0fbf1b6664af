"""The configuration reference, generated from the pydantic models of ``teamrl.config.Config``.

A mkdocs hook (``hooks:`` in mkdocs.yml): on the page that holds the marker ``<!-- config-reference -->``
alone on a line (docs/reference/config.md) the marker is replaced by one section per top-level key, each a
table of every key below it (dotted path, type, default, description). Run as a script it prints that
Markdown: ``.venv/bin/python docs/hooks/config_reference.py``.

The walker only relies on pydantic's public model API, so it keeps working while sections move between
modules: nested models become dotted keys, ``dict[str, Model]`` becomes ``key.<name>.field``,
``list[Model]`` ``key[].field``, and a union of models (a discriminated union, or a section whose
built-in variants a registry lists) becomes one subsection per member under its tag. A field without a
description still gets its row.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import importlib
import inspect
import json
import logging
import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

log = logging.getLogger("mkdocs.hooks.config_reference")

MARKER = "<!-- config-reference -->"

# registry kind -> the top-level config key whose variants it lists
_KIND_SECTION = {
    "workflow": "workflow",
    "workflows": "workflow",
    "task suite": "tasks",
    "task_suite": "tasks",
    "tasks": "tasks",
    "suite": "tasks",
    "task suites": "tasks",
}
# where a registry of built-in components may live (the first that exists wins); each is
# {kind: {name: "module:attr" or object}}, or a function returning that
_REGISTRIES = (
    ("teamrl.config", "BUILTIN"),
    ("teamrl.config", "builtin_components"),
    ("teamrl.protocol.plugins", "BUILTIN"),
)
# names under which a component class keeps its settings model
_SETTINGS_ATTRS = ("Settings", "settings", "Config", "config_model", "settings_model")
# fields whose single Literal value names a union member, when the union names no discriminator
_TAG_FIELDS = ("name", "suite", "kind", "type")


# ------------------------------------------------------------------------------------ hook entry
def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """The marker, alone on its line, becomes the reference (a mention of it in prose stays)."""
    lines = markdown.split("\n")
    if MARKER not in (line.strip() for line in lines):
        return markdown
    return "\n".join(config_reference() if line.strip() == MARKER else line for line in lines)


# ------------------------------------------------------------------------------------- the walk
@dataclasses.dataclass
class Row:
    key: str
    type: str
    default: str
    description: str


@dataclasses.dataclass
class Section:
    title: str
    intro: str = ""
    rows: list[Row] = dataclasses.field(default_factory=list)
    subsections: list[Section] = dataclasses.field(default_factory=list)


def config_reference() -> str:
    from teamrl.config import Config

    registry = _registry()
    out: list[str] = []
    for name, field in Config.model_fields.items():
        section = Section(title=f"`{name}`", intro=_join(field.description, _docstring_of(field.annotation)))
        _field_into(section, name, field, registry.get(name, {}), top=True)
        out.append(_render(section, level=2))
    return "\n".join(out)


def _field_into(
    section: Section, path: str, field: FieldInfo, variants: dict[str, type[BaseModel]], top: bool = False
) -> None:
    """Rows (and subsections) for one field at ``path``: its own row, then what is nested in it."""
    ann = field.annotation
    if not top:
        section.rows.append(Row(path, _type(ann, field), _default(field), _desc(field)))
    members = _models_in_union(ann)
    if len(members) > 1 or (variants and members):
        disc = _discriminator(field)
        seen = {_tag(m, disc): m for m in members}
        base = members[0] if len(members) == 1 else None
        for tag, model in variants.items():
            if tag not in seen and isinstance(model, type) and issubclass(model, BaseModel):
                seen[tag] = model
        if base is not None:  # a base class resolved by name: its own keys, then each built-in's additions
            _model_into(section, path, base)
        disc_name = disc or _tag_field(members[0]) or "name"
        for tag, model in seen.items():
            if base is not None and model is base:
                continue
            sub = Section(title=f"`{path}` with `{disc_name}: {tag}`", intro=_docstring(model))
            _model_into(sub, path, model, base=base)
            section.subsections.append(sub)
        return
    target = _nested(ann)
    if target is not None:
        suffix, model = target
        _model_into(section, path + suffix, model)


def _model_into(
    section: Section, prefix: str, model: type[BaseModel], base: type[BaseModel] | None = None
) -> None:
    for name, field in model.model_fields.items():
        if base is not None and name in base.model_fields and _same(field, base.model_fields[name]):
            continue
        _field_into(section, f"{prefix}.{name}", field, {})


def _same(a: FieldInfo, b: FieldInfo) -> bool:
    return (a.annotation, _default(a), a.description) == (b.annotation, _default(b), b.description)


def _nested(ann: Any) -> tuple[str, type[BaseModel]] | None:
    """The one model nested in ``ann`` and the key suffix that reaches it, if any."""
    ann = _strip(ann)
    if _is_model(ann):
        return "", ann
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if _is_union(origin):
        found = [t for t in (_nested(a) for a in args if _strip(a) is not type(None)) if t is not None]
        return found[0] if len(found) == 1 else None
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping) and len(args) == 2:
        inner = _nested(args[1])
        return (f".<name>{inner[0]}", inner[1]) if inner else None
    if origin in (list, tuple, set, frozenset) and args:
        inner = _nested(args[0])
        return (f"[]{inner[0]}", inner[1]) if inner else None
    return None


def _models_in_union(ann: Any) -> list[type[BaseModel]]:
    ann = _strip(ann)
    if _is_model(ann):
        return [ann]
    if _is_union(typing.get_origin(ann)):
        return [m for a in typing.get_args(ann) if _is_model(m := _strip(a))]
    return []


def _discriminator(field: FieldInfo) -> str | None:
    disc = field.discriminator
    if disc is None:
        for meta in list(field.metadata) + _annotated_meta(field.annotation):
            disc = getattr(meta, "discriminator", None)
            if disc is not None:
                break
    if disc is None:
        return None
    return disc if isinstance(disc, str) else None  # a callable Discriminator has no field name


def _tag_field(model: type[BaseModel]) -> str | None:
    """The field that names a variant, when no discriminator says: a Literal or str field named so."""
    for name in _TAG_FIELDS:
        f = model.model_fields.get(name)
        if f is None:
            continue
        ann = _strip(f.annotation)
        if typing.get_origin(ann) is typing.Literal or ann is str:
            return name
    return None


def _tag(model: type[BaseModel], disc: str | None) -> str:
    name = disc or _tag_field(model)
    f = model.model_fields.get(name) if name else None
    if f is not None:
        values = typing.get_args(_strip(f.annotation))
        if typing.get_origin(_strip(f.annotation)) is typing.Literal and len(values) == 1:
            return str(values[0])
        if isinstance(f.default, str):
            return f.default
    return model.__name__


# ------------------------------------------------------------------------------- the registries
def _registry() -> dict[str, dict[str, type[BaseModel]]]:
    """{config key: {built-in name: settings model}} from the first registry found, else {}."""
    for module_name, attr in _REGISTRIES:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - a registry that does not exist (yet) is not an error
            continue
        reg = getattr(module, attr, None)
        if callable(reg) and not isinstance(reg, dict):
            try:
                reg = reg()
            except Exception:  # noqa: BLE001
                continue
        if isinstance(reg, dict) and reg:
            return _settings_by_section(reg)
    return {}


def _settings_by_section(reg: dict[str, Any]) -> dict[str, dict[str, type[BaseModel]]]:
    out: dict[str, dict[str, type[BaseModel]]] = {}
    for kind, entries in reg.items():
        section = _KIND_SECTION.get(str(kind).lower())
        if section is None or not isinstance(entries, dict):
            continue
        for name, target in entries.items():
            model = _settings_model(target)
            if model is not None:
                out.setdefault(section, {})[str(name)] = model
            else:
                log.info("config reference: no settings model found for %s %r", kind, name)
    return out


def _settings_model(target: Any) -> type[BaseModel] | None:
    try:
        if isinstance(target, str):
            module_name, _, attr = target.partition(":")
            target = importlib.import_module(module_name)
            for part in attr.split(".") if attr else []:
                target = getattr(target, part)
    except Exception:  # noqa: BLE001 - a component that cannot be imported here is left out
        return None
    if _is_model(target):
        return target
    for attr in _SETTINGS_ATTRS:
        model = getattr(target, attr, None)
        if _is_model(model):
            return model
    return None


# ---------------------------------------------------------------------------------- formatting
def _render(section: Section, level: int) -> str:
    lines = [f"{'#' * level} {section.title}", ""]
    if section.intro:
        lines += [_prose(section.intro), ""]
    if section.rows:
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        lines += [
            f"| `{r.key}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.description)} |"
            for r in section.rows
        ]
        lines.append("")
    for sub in section.subsections:
        lines.append(_render(sub, level + 1))
    return "\n".join(lines)


_ROLE = re.compile(r":(?:py:)?\w+:`~?([^`]+)`")


def _prose(text: str) -> str:
    """Sphinx roles (``:class:`x` ``) as code spans."""
    return _ROLE.sub(r"`\1`", text)


_CODE_SPAN = re.compile(r"(`+).+?\1")


def _cell(text: str) -> str:
    """``text`` for a table cell: one line, pipes escaped outside code spans (a table leaves those alone)."""
    text, out, end = _prose(text).replace("\n", " "), [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [text[end : m.start()].replace("|", "\\|"), m.group(0)]
        end = m.end()
    return "".join([*out, text[end:].replace("|", "\\|")])


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _type(ann: Any, field: FieldInfo | None = None) -> str:
    text = _code(_type_name(ann))
    bounds = _bounds(list(field.metadata) if field else []) + _bounds(_annotated_meta(ann))
    return f"{text} ({', '.join(bounds)})" if bounds else text


_BOUNDS = (
    ("gt", ">"),
    ("ge", ">="),
    ("lt", "<"),
    ("le", "<="),
    ("min_length", "min length"),
    ("max_length", "max length"),
)


def _bounds(metadata: list[Any]) -> list[str]:
    out = []
    for meta in metadata:
        for attr, sym in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None and not callable(value):
                out.append(f"{sym} {value}")
    return out


def _type_name(ann: Any) -> str:
    ann = _strip(ann)
    if ann is type(None):
        return "None"
    if ann is Any:
        return "any"
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) if isinstance(a, str) else repr(a) for a in args)
    if _is_union(origin):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]" if args else name
    if isinstance(ann, type):
        return ann.__name__
    return str(ann).replace("typing.", "")


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]
        except Exception:  # noqa: BLE001 - a factory that needs validated data
            return "(computed)"
    else:
        value = field.default
    return _code(_short(_plain(value)))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _short(value: Any, limit: int = 60) -> str:
    if _is_nested_default(value):
        return "{...}"
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_nested_default(value: Any) -> bool:
    """A whole section's defaults: shown in the rows below it, not in one cell."""
    return (
        isinstance(value, dict)
        and any(isinstance(v, dict) for v in value.values())
        and len(json.dumps(value, default=str)) > 60
    )


def _desc(field: FieldInfo) -> str:
    """The field's description, else the docstring of the model nested in it."""
    return field.description or _docstring_of(field.annotation)


def _docstring_of(ann: Any) -> str:
    target = _nested(ann)
    return _docstring(target[1]) if target else ""


def _docstring(model: type[BaseModel]) -> str:
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc).replace("\n\n", " ").replace("\n", " ") if doc else ""


def _join(*parts: str | None) -> str:
    """The non-empty parts as sentences, each once."""
    out = ""
    for p in parts:
        if not p or p in out:
            continue
        out = f"{out}{'' if not out or out.endswith(('.', ':', '!', '?')) else '.'}{' ' if out else ''}{p}"
    return out


# ------------------------------------------------------------------------------------- typing
def _strip(ann: Any) -> Any:
    """``ann`` without ``Annotated[...]`` wrappers."""
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def _annotated_meta(ann: Any) -> list[Any]:
    meta: list[Any] = []
    while typing.get_origin(ann) is typing.Annotated:
        meta += list(ann.__metadata__)
        ann = typing.get_args(ann)[0]
    return meta


def _is_union(origin: Any) -> bool:
    return origin is typing.Union or origin is types.UnionType


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


if __name__ == "__main__":
    print(config_reference())
