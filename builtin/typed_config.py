"""Typed YAML configs: nested dataclasses, unknown keys rejected, types checked, overrides applied.

Any dataclass tree works; a recipe config is just more dataclasses::

    @dataclass
    class RunConfig:
        data: DataConfig                      # a nested section
        steps: int = 100

    cfg = load_config(RunConfig, "configs/run.yaml", ["data.max_length=4096", "steps=10"])
    save_config(cfg, out_dir / "config.yaml")   # the resolved config, every default written out

Supported field types: ``int``, ``float`` (a string such as ``"1e-4"`` is converted, because YAML 1.1
reads ``1e-4`` as a string), ``bool``, ``str``, ``pathlib.Path``, ``list[T]``, ``dict[str, T]``,
``Optional[T]`` / ``T | None``, ``Literal[...]`` and nested dataclasses. Range checks belong in each
dataclass's ``__post_init__`` (raise ``ValueError`` naming the field); the loader adds the section and
the file to the message.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

__all__ = ["changed_fields", "config_from_dict", "dump_config", "flatten", "load_config", "omit_added_later",
           "parse_config_args", "save_config"]

T = typing.TypeVar("T")


def load_config(cls: type[T], yaml_path: str | Path, overrides: typing.Sequence[str] = ()) -> T:
    """Read ``yaml_path`` into an instance of dataclass ``cls``, then apply ``key.sub=value`` overrides.

    Override values are parsed as YAML (``3``, ``1e-4``, ``true``, ``null``, ``[2, 5, 8]``, ``text``);
    text that is not valid YAML is kept as a string.
    Raises ValueError naming the dotted key and the file for unknown keys and wrong types.
    """
    path = Path(yaml_path)
    if not path.is_file():
        raise ValueError(f"config file not found: {path}")
    with path.open() as f:
        data = yaml.safe_load(f)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    for item in overrides:
        _apply_override(cls, data, item)
    return config_from_dict(cls, data, source=str(path))


def parse_config_args(cls: type[T], argv: typing.Sequence[str] | None, *, prog: str, description: str,
                      example: str, override_example: str) -> tuple[T, str]:
    """A job's command line, ``--config YAML [key=value ...]``, parsed and validated into ``cls``.

    Returns ``(config, the YAML path)``; bad usage exits through argparse, a bad config raises ValueError
    (:func:`load_config`). ``example`` and ``override_example`` are shown in ``--help``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", required=True, help=f"YAML file validated against {cls.__name__} (e.g. {example})")
    parser.add_argument("overrides", nargs="*", help=f"key=value overrides, e.g. {override_example}")
    args = parser.parse_args(argv)
    return load_config(cls, args.config, args.overrides), args.config


def config_from_dict(cls: type[T], data: dict, source: str = "<dict>") -> T:
    """Build dataclass ``cls`` from a plain dict (e.g. a config saved next to a checkpoint)."""
    return _build(cls, data, prefix="", source=source)


def dump_config(obj: Any) -> dict:
    """The dataclass tree as plain dicts/lists/scalars, ready for YAML or JSON."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise ValueError(f"dump_config expects a dataclass instance, got {type(obj).__name__}")
    return _plain(obj)


def omit_added_later(data: dict, added_later: dict[tuple[str | None, str], Any]) -> dict:
    """Remove from a dumped config (``dump_config``) each ``(section, name)`` field of ``added_later`` that holds
    the value given there (section ``None``: a top-level field), in place; returns ``data``.

    For keys hashed from a config (a shipped artifact's recipe key, a data directory's saved config): a field
    added after something was keyed, at the value that reproduces how it was made, leaves the key unchanged.
    """
    for (section, name), neutral in added_later.items():
        part = data if section is None else data.get(section, {})
        if name in part and part[name] == neutral:
            del part[name]
    return data


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """The leaves of nested dicts under dotted keys: ``{"a": {"b": 1}, "c": 2}`` -> ``{"a.b": 1, "c": 2}``."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def changed_fields(old: dict, new: dict, absent: dict[str, Any] | None = None) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` for each key of two flat dicts (:func:`flatten`) whose values differ,
    sorted by key. A key one side lacks reads ``absent[key]`` there (``None`` if ``absent`` has no entry): the
    value a field holds in a config saved before the field existed. Each caller words its own message."""
    absent = absent or {}
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key, absent.get(key)), new.get(key, absent.get(key))
        if a != b:
            out.append((key, a, b))
    return out


def save_config(obj: Any, path: str | Path) -> None:
    """Write the resolved config (every field, defaults included) as YAML."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with Path(path).open("w") as f:
        yaml.safe_dump(dump_config(obj), f, sort_keys=False)


# --- machinery ----------------------------------------------------------------------------------


def _apply_override(cls: type, data: dict, item: str) -> None:
    if "=" not in item:
        raise ValueError(f"override {item!r}: expected key.sub=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    # Walk the dataclass tree first, so an unknown key is reported before anything is changed.
    tp: Any = cls
    for i, part in enumerate(parts):
        tp = _unwrap_optional(tp)
        if typing.get_origin(tp) is dict:  # free-form keys below a dict field
            break
        if not (dataclasses.is_dataclass(tp) and part in _field_types(tp)):
            raise ValueError(f"override {item!r}: unknown key '{'.'.join(parts[: i + 1])}'")
        tp = _field_types(tp)[part]
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    try:
        node[parts[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError:
        node[parts[-1]] = raw  # not YAML (e.g. a Jinja string): keep the text; the type check still applies


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _build(cls: type, data: Any, prefix: str, source: str) -> Any:
    where = prefix.rstrip(".") or "the top level"
    if not isinstance(data, dict):
        raise ValueError(f"{source}: {where}: expected a mapping for {cls.__name__}, got {data!r}")
    fields = _field_types(cls)
    for key in data:
        if key not in fields:
            raise ValueError(
                f"{source}: unknown key '{prefix}{key}' (known keys of {cls.__name__}: {', '.join(fields)})"
            )
    kwargs = {k: _coerce(v, fields[k], f"{prefix}{k}", source) for k, v in data.items()}
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.name not in kwargs
        and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{source}: missing required key(s) {', '.join(prefix + m for m in missing)}")
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ValueError(f"{source}: {prefix}{e}") from None


class _Mismatch(Exception):
    pass


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    try:
        return _convert(value, tp, key, source)
    except _Mismatch:
        raise ValueError(f"{source}: key '{key}' expects {_type_name(tp)}, got {value!r}") from None


def _convert(value: Any, tp: Any, key: str, source: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key, source)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        # Compare type too: YAML `1` must not satisfy Literal[True] and vice versa.
        if any(type(value) is type(a) and value == a for a in args):
            return value
        raise _Mismatch
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _Mismatch
        return _build(tp, value, prefix=f"{key}.", source=source)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        (item_tp,) = args or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        _, val_tp = args or (str, Any)
        return {str(k): _coerce(v, val_tp, f"{key}.{k}", source) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise _Mismatch from None
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise _Mismatch
    raise ValueError(f"{source}: key '{key}' has a field type the config loader does not support: {tp!r}")


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        return f"a list of {_type_name(args[0]) if args else 'values'}"
    if origin is dict:
        return f"a mapping of {_type_name(args[1]) if args else 'values'}"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    return getattr(tp, "__name__", repr(tp))


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj
