"""Typed configuration loading: a YAML file plus environment overrides, validated at the edge.

Daemons and CLIs describe their configuration as pydantic models and call :func:`load_config`.
Library code never reads files or the environment; it takes constructor arguments.

Environment overrides use ``<PREFIX>__<KEY>__<SUBKEY>=value``: the part after the prefix is split on
``__`` and lowercased into a key path (a numeric segment is a list index: ``ACCESS_KEYS__0__ID``),
and the value is parsed as a YAML scalar (so ``8``, ``true`` and ``1.5`` become numbers and
booleans). Overrides are applied on top of the file before validation.

Validation errors become one :class:`~lakefs_core.errors.BadInputError` whose ``field`` is the exact
dotted key path (``mirrors.0.region``) and whose message never repeats the offending value, so
secrets cannot leak into logs through a typo.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from lakefs_core.errors import BadInputError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for configuration models: unknown keys are errors, values are not coerced loosely."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _key_path(loc: tuple[int | str, ...], data: Any, error_type: str) -> str:
    """The key path of a validation error as written in the input.

    pydantic's ``loc`` for a discriminated union carries the tag (``credentials.static.x``): segments
    that do not exist in the input (other than the last, the missing key itself) are dropped.
    """
    parts: list[str] = []
    node: Any = data
    for i, seg in enumerate(loc):
        present = (isinstance(node, dict) and seg in node) or (
            isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)
        )
        if present:
            parts.append(str(seg))
            node = node[seg]
        elif i == len(loc) - 1:
            parts.append(str(seg))
            node = None
    if error_type in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("source")
    return ".".join(parts) or "<root>"


def _set_path(
    tree: dict[str, Any], path: list[str], value: Any, source: str, free_mappings: frozenset[tuple[str, ...]]
) -> None:
    """Set ``path`` in ``tree``; a numeric segment addresses a list item (or appends one).

    A new node is created as a list when the next segment is numeric, except below the paths in
    ``free_mappings``, whose keys are user-chosen names (that may be digits).
    """
    node: Any = tree
    for i, part in enumerate(path):
        where = ".".join(path[: i + 1])
        key: Any = part
        if isinstance(node, list):
            if not part.isdigit() or int(part) > len(node):
                raise BadInputError(f"environment override {source} names no item of the list", field=where)
            key = int(part)
            if key == len(node):
                node.append(None)
        elif not isinstance(node, dict):
            raise BadInputError(f"environment override {source} descends into a scalar value", field=where)
        if i == len(path) - 1:
            node[key] = value
            return
        nxt = node[key] if isinstance(node, list) else node.get(key)
        if nxt is None:
            as_list = path[i + 1].isdigit() and tuple(path[: i + 1]) not in free_mappings
            nxt = [] if as_list else {}
            node[key] = nxt
        node = nxt


def env_overrides(env: Mapping[str, str], prefix: str) -> list[tuple[list[str], Any, str]]:
    """Extract ``(key_path, parsed_value, variable_name)`` for every ``PREFIX__...`` variable."""
    marker = prefix.upper() + "__"
    found: list[tuple[list[str], Any, str]] = []
    for name in sorted(env):
        if not name.upper().startswith(marker):
            continue
        parts = [p.lower() for p in name[len(marker) :].split("__")]
        if not all(parts):
            raise BadInputError("empty key segment in environment override", field=name)
        try:
            value = yaml.safe_load(env[name]) if env[name] != "" else ""
        except yaml.YAMLError:
            value = env[name]
        if isinstance(value, (dict, list)):
            value = env[name]  # only scalars come from the environment
        found.append((parts, value, name))
    return found


def load_raw(path: Path | None) -> dict[str, Any]:
    """Read a YAML mapping from ``path`` (an absent path means an empty mapping)."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise BadInputError(f"config file {path} does not exist", field="config") from e
    except OSError as e:
        raise BadInputError(f"config file {path} cannot be read: {e.strerror}", field="config") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise BadInputError(f"config file {path} is not valid YAML{where}", field="config") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInputError(f"config file {path} must hold a mapping at the top level", field="config")
    return data


def validate(model: type[M], data: Mapping[str, Any]) -> M:
    """Validate ``data`` into ``model``, reporting the first error by exact key path."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors(include_input=False, include_url=False, include_context=False)
        first = errors[0]
        field = _key_path(tuple(first["loc"]), data, str(first["type"]))
        message = str(first["msg"]).removeprefix("Value error, ")
        extra = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise BadInputError(f"{message}{extra}", field=field) from None


def load_config(
    model: type[M],
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    env_prefix: str | None = None,
    free_mappings: frozenset[tuple[str, ...]] = frozenset(),
) -> M:
    """Load ``path`` (YAML), apply ``env_prefix`` overrides from ``env``, validate into ``model``.

    ``free_mappings`` names the key paths whose children are user-chosen names (e.g.
    ``{("regions",)}``), so a numeric override segment below them is a name, not a list index.
    """
    data = load_raw(path)
    if env is not None and env_prefix:
        for parts, value, name in env_overrides(env, env_prefix):
            _set_path(data, parts, value, name, free_mappings)
    return validate(model, data)
