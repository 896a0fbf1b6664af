"""Reading config files and ``--set key=value`` overrides (YAML with repeated keys refused), and
validation errors as a config file writes the keys."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from teamrl.protocol.settings import ConfigError


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r} (e.g. --set algorithm.group_size=4)")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML scalars) to a nested dict."""
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item}: {part!r} holds a value, not a section")
            node = nxt
        node[path[-1]] = value
    return data


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        self.key, self.first_line, self.second_line = key, first_line, second_line


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping raises :class:`_DuplicateKey`
    (plain YAML keeps the last one silently, so a second ``algorithm:`` section would replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden on purpose
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
            except TypeError:  # an unhashable key: the base constructor reports it
                pass
        return super().construct_mapping(node, deep=deep)


def read_yaml(p: Path) -> dict[str, Any]:
    """The sections of config file ``p``; an empty file, a repeated key or a top level that is not a
    mapping raises ConfigError."""
    try:
        loaded = yaml.load(p.read_text(), Loader=_StrictLoader)
    except _DuplicateKey as dup:
        raise ConfigError(
            f"{p}: key {dup.key!r} is given twice in the same mapping, at lines {dup.first_line} and "
            f"{dup.second_line}; YAML would silently keep only the second. Merge them into one."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if loaded is None or loaded == {}:
        raise ConfigError(
            f"{p} is empty: give at least one section (e.g. 'algorithm:' with 'group_size: 4' under it), "
            "or omit the CONFIG argument to use the defaults"
        )
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"{p}: the top level must be a mapping of sections (e.g. 'algorithm:', 'workflow:'), "
            f"got a {'list' if isinstance(loaded, list) else 'single value'}: {str(loaded)[:60]!r}"
        )
    return loaded


_NAMES_A_KEY = re.compile(r"[a-z_]+\.[a-z_.]+[ :=]")


def format_errors(err: ValidationError, root: type[BaseModel], prefix: str = "") -> str:
    lines = []
    for e in err.errors():
        key, _ = _walk(e["loc"], root)
        key = ".".join(p for p in (prefix, key) if p)
        if e["type"] == "extra_forbidden":
            _, model = _walk(e["loc"][:-1], root)
            bad = str(e["loc"][-1])
            valid = sorted(model.model_fields) if model else []
            close = difflib.get_close_matches(bad, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            lines.append(f"  {key}: unknown key{hint} valid keys here: {', '.join(valid)}")
        elif e["type"] == "union_tag_invalid":
            ctx = e.get("ctx", {})
            field = ctx.get("discriminator", "").strip("'")
            lines.append(
                f"  {key}.{field}: {ctx.get('tag')!r} is unknown; use one of {ctx.get('expected_tags')}"
            )
        else:
            got = e.get("input")
            got_txt = "" if isinstance(got, dict) else f" (got {got!r})"
            msg = e["msg"].removeprefix("Value error, ")
            if not key and _NAMES_A_KEY.match(msg):  # a check across sections that names its key first
                lines.append(f"  {msg}{got_txt}")
            else:
                lines.append(f"  {key or '(top level)'}: {msg}{got_txt}")
    return "\n".join(lines)


def _walk(loc: tuple[Any, ...], root: type[BaseModel]) -> tuple[str, type[BaseModel] | None]:
    """The key at ``loc`` as a YAML file writes it, and the pydantic model that validated the mapping
    there (to list its valid keys; None below a plain value).

    A section with several kinds (``workflow``: pipeline or debate) is followed in ``loc`` by the kind's
    tag, which a YAML file does not write: it is left out of the key."""
    model: type[BaseModel] | None = root
    shown: list[str] = []
    kinds: dict[str, type[BaseModel]] = {}  # right after a section with several kinds: its models by tag
    skip_name = False  # after a dict-valued field the next part is a user-chosen name
    for part in loc:
        if kinds:
            model, kinds = kinds.get(str(part)), {}
            continue
        shown.append(str(part))
        if skip_name or isinstance(part, int):
            skip_name = False
            continue
        field = model.model_fields.get(str(part)) if model is not None else None
        model = None
        if field is None:
            continue
        ann = field.annotation
        if get_origin(ann) is dict:
            ann, skip_name = get_args(ann)[1], True
        if field.discriminator is not None:
            tag = str(field.discriminator)
            kinds = {m.model_fields[tag].default: m for m in get_args(ann)}
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
    return ".".join(shown), model
