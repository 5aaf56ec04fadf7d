"""The CLI and config references are generated from the parser and the dataclasses, so they cannot drift:
the renderers show every option and key (defaults, choices, the source's comments), and a change in the code
changes the page (the checked-in pages are compared with fresh ones in ``test_results.py``)."""

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from eaglehead.cli import build_parser
from eaglehead.docs import ENV_DEFAULTS
from eaglehead.docsgen.reference import cli_reference, config_reference, config_sections, field_comments


def _parser(extra: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a thing")
    run.add_argument("--mode", choices=["a", "b"], default="a", help="which <mode> | how")
    run.add_argument("--hidden", help=argparse.SUPPRESS)
    if extra:
        run.add_argument("--steps", type=int, default=3, help="how many")
    return parser


def test_cli_reference_lists_each_option_with_default_choices_and_help():
    text = cli_reference(_parser())
    assert "## tool run" in text and "- [`run`](#tool-run): run a thing" in text
    assert "| `--mode` | `a` | `a`, `b` | which &lt;mode&gt; \\| how |" in text
    assert "--hidden" not in text
    assert "--steps" not in text and "| `--steps` | `3` | - | how many |" in cli_reference(_parser(extra=True))


def test_the_eaglehead_reference_has_every_subcommand_and_option():
    parser = build_parser()
    text = cli_reference(parser, ENV_DEFAULTS)
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in subs.items():
        assert f"## eaglehead {name}" in text
        for action in sub._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                for flag in action.option_strings:
                    assert f"`{flag}`" in text, (name, flag)
    # the machine-dependent default is shown as its rule, so the page is the same with or without a GPU
    assert "| `--device` | `cuda` when a GPU is visible, else `cpu` |" in text


@dataclass
class Inner:
    width: int = 4  # columns


@dataclass
class Outer:
    """What an outer section holds."""

    name: str
    # above the field,
    # on two lines
    kind: Literal["x", "y"] = "x"  # and at its end
    tags: list[str] = field(default_factory=lambda: ["<t>"])
    inner: Inner = field(default_factory=Inner)


def test_field_comments_join_the_lines_above_and_the_end_of_line():
    assert field_comments(Outer) == {"name": "", "kind": "above the field, on two lines and at its end", "tags": "",
                                     "inner": ""}


def test_config_reference_renders_keys_types_defaults_comments_and_sections():
    text = config_reference([("Outer config", "`tool run`", Outer)])
    assert "What an outer section holds." in text
    assert "| `name` | `str` | required |  |" in text
    assert "| `kind` | `Literal['x', 'y']` | `\"x\"` | above the field, on two lines and at its end |" in text
    assert '| `tags` | `list[str]` | `["<t>"]` |' in text
    assert "| `inner` | `Inner` | section [`inner`](#inner) |" in text
    assert "### `inner`" in text and "| `inner.width` | `int` | `4` | columns |" in text


@pytest.mark.parametrize("key", ["head.fused_layer_ids", "rollout.deep_stride", "optim.schedule", "data.turn_rows",
                                 "regenerate.engine", "regenerate.openai.base_url", "synthesis.category_prompts",
                                 "workers", "heldout_fraction"])
def test_the_config_reference_names_keys_users_set(key):
    assert f"| `{key}` |" in config_reference(config_sections())
