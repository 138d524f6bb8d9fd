"""Typed configuration loading: a YAML file plus environment overrides, validated at the edge.

Daemons and CLIs describe their configuration as pydantic models and call :func:`load_config`.
Library code never reads files or the environment; it takes constructor arguments.

Environment overrides use ``<PREFIX>__<KEY>__<SUBKEY>=value``: the part after the prefix is split on
``__`` and lowercased into a key path (a numeric segment is a list index: ``ACCESS_KEYS__0__ID``),
and the value is parsed as a YAML scalar (so ``8``, ``true`` and ``1.5`` become numbers and
booleans). Overrides are applied on top of the file before validation.

Validation reports EVERY problem, not the first: all pydantic errors, every environment override
that names no key, and the model's own semantic checks (:meth:`StrictModel.config_problems`, run once
the fields are valid) become one :class:`~lakefs_core.errors.ConfigError` (a ``BadInputError``, exit
code 9) listing ``(key path, message)`` pairs. ``field`` is the first exact dotted key path
(``mirrors.0.region``); messages never repeat the offending value, so secrets cannot leak into logs
through a typo (paths are shown: they are no secret and the key alone would not say which file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from lakefs_core.errors import BadInputError, ConfigError, StartupError
from lakefs_core.redact import redact_url

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for configuration models: unknown keys are errors, values are not coerced loosely."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    def config_problems(self) -> list[tuple[str, str]]:
        """Semantic problems spanning several keys, as ``(key path, message)`` (none by default).

        Run by :func:`validate` after the fields validated, so a model lists cross-key problems here
        rather than stopping at the first in a ``model_validator``."""
        return []


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
        else:
            key = _existing_key(node, part)
        if i == len(path) - 1:
            node[key] = value
            return
        nxt = node[key] if isinstance(node, list) else node.get(key)
        if nxt is None:
            as_list = path[i + 1].isdigit() and tuple(path[: i + 1]) not in free_mappings
            nxt = [] if as_list else {}
            node[key] = nxt
        node = nxt


def _existing_key(node: Mapping[str, Any], part: str) -> str:
    """The key of ``node`` an override segment names: itself, or the existing key it spells with
    ``_`` for ``-`` (a shell cannot export ``LAKEFS_MIRROR__REGIONS__US-EAST__...``, so
    ``US_EAST`` names region ``us-east``)."""
    if part in node:
        return part
    for key in node:
        if isinstance(key, str) and key.lower().replace("-", "_") == part:
            return key
    return part


DATA_DIR_KEY = "data_dir"
DATA_DIR_PLACEHOLDER = "${data_dir}"


def expand_data_dir(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Replace ``${data_dir}`` in every string value with the top-level ``data_dir`` (set in the
    file, or by ``PREFIX__DATA_DIR``): one setting relocates every path of a shipped config. The
    problem when a value uses it and ``data_dir`` is unset or not an absolute path."""
    root = data.pop(DATA_DIR_KEY, None)
    problems: list[tuple[str, str]] = []

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{where}.{i}") for i, v in enumerate(node)]
        if isinstance(node, str) and DATA_DIR_PLACEHOLDER in node:
            if not isinstance(root, str) or not root.startswith("/"):
                problems.append(
                    (where, f"uses {DATA_DIR_PLACEHOLDER} but {DATA_DIR_KEY} is no absolute path")
                )
                return node
            return node.replace(DATA_DIR_PLACEHOLDER, root.rstrip("/") or "/")
        return node

    data.update(walk(data, ""))
    return problems


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
        # Imported on use (here and in load_raw): a run with no file and no override, the CLI's
        # default, does not pay ~10 ms for importing PyYAML.
        import yaml

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
    except UnicodeDecodeError as e:
        raise BadInputError(f"config file {path} is not UTF-8 text (byte {e.start})", field="config") from e
    import yaml

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


def problems_of(error: ValidationError, data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every error of ``error`` as ``(key path, message)``, in order, without repeating values."""
    found: list[tuple[str, str]] = []
    for item in error.errors(include_input=False, include_url=False, include_context=False):
        field = _key_path(tuple(item["loc"]), data, str(item["type"]))
        problem = (field, str(item["msg"]).removeprefix("Value error, "))
        if problem not in found:
            found.append(problem)
    return found


def validate(model: type[M], data: Mapping[str, Any], prior: Sequence[tuple[str, str]] = ()) -> M:
    """Validate ``data`` into ``model``; every problem (``prior`` ones first) in one ConfigError."""
    problems = list(prior)
    try:
        value = model.model_validate(data)
    except ValidationError as e:
        problems += problems_of(e, data)
    else:
        if isinstance(value, StrictModel):
            problems += value.config_problems()
        if not problems:
            return value
    raise ConfigError(problems) from None


def apply_overrides(
    data: dict[str, Any],
    env: Mapping[str, str],
    prefix: str,
    free_mappings: frozenset[tuple[str, ...]] = frozenset(),
) -> list[tuple[str, str]]:
    """Apply every ``PREFIX__...`` override to ``data``; the problems of those that cannot apply."""
    problems: list[tuple[str, str]] = []
    try:
        overrides = env_overrides(env, prefix)
    except BadInputError as e:
        return [(e.field or "environment", str(e).removeprefix(f"{e.field}: "))]
    for parts, value, name in overrides:
        try:
            _set_path(data, parts, value, name, free_mappings)
        except BadInputError as e:
            problems.append((e.field or name, str(e).removeprefix(f"{e.field}: ")))
    return problems


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
    Raises :class:`~lakefs_core.errors.ConfigError` listing every problem.
    """
    data = load_raw(path)
    problems: list[tuple[str, str]] = []
    if env is not None and env_prefix:
        problems = apply_overrides(data, env, env_prefix, free_mappings)
    problems += expand_data_dir(data)
    return validate(model, data, problems)


Problem = tuple[str, str]  # (key path, message without the value)


@dataclass
class ConfigReport:
    """What :func:`inspect_config` found: the validated ``config`` (``None`` when invalid), the
    configuration ``problems`` (exit 9) and the ``startup_problems`` the environment would cause."""

    config: BaseModel | None
    problems: list[Problem]
    startup_problems: list[Problem]

    @property
    def exit_code(self) -> int:
        if self.problems:
            return ConfigError.exit_code
        return StartupError.exit_code if self.startup_problems else 0


def inspect_config(
    model: type[M],
    path: Path | None,
    *,
    env: Mapping[str, str] | None,
    env_prefix: str,
    free_mappings: frozenset[tuple[str, ...]] = frozenset(),
    environment_checks: Callable[[Mapping[str, Any]], list[Problem]] | None = None,
) -> ConfigReport:
    """Every problem of a configuration at once, for ``check-config``: unlike :func:`load_config` it
    also runs ``environment_checks`` on the merged raw data (file plus overrides), so a missing
    SQLite directory is reported beside a bad value even when the file does not validate."""
    try:
        data = load_raw(path)
    except BadInputError as e:
        return ConfigReport(None, [(e.field or "config", str(e).removeprefix(f"{e.field}: "))], [])
    problems = apply_overrides(data, env, env_prefix, free_mappings) if env is not None else []
    problems += expand_data_dir(data)
    startup = environment_checks(data) if environment_checks is not None else []
    try:
        config: BaseModel | None = validate(model, data, problems)
    except ConfigError as e:
        return ConfigReport(None, e.problems, startup)
    return ConfigReport(config, [], startup)


def format_problems(problems: Sequence[Problem]) -> str:
    """One problem per line, ``key.path: message``."""
    return "\n".join(f"  {field}: {message}" for field, message in problems)


def display(value: Any, name: str = "") -> Any:
    """A JSON-able view of a configuration with secrets masked and paths shown: a secret URL (a
    key ending in ``url``) keeps everything but its password; any other secret is ``***``."""
    if isinstance(value, BaseModel):
        return {k: display(getattr(value, k), k) for k in type(value).model_fields}
    if isinstance(value, SecretStr):
        if name.endswith("url"):
            return redact_url(value.get_secret_value())
        return "***" if value.get_secret_value() else ""
    if isinstance(value, dict):
        return {str(k): display(v, name) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [display(v, name) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
