"""``accelerate launch -m eaglehead.train --config configs/NAME.yaml [key=value ...]``"""

import argparse
import sys

from .config import load_config
from .recipe import TrainConfig
from .trainer import train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eaglehead.train", description="train a draft head (see configs/)")
    parser.add_argument("--config", required=True, help="YAML file validated against TrainConfig")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. optim.lr=5e-5")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(TrainConfig, args.config, args.overrides)
    except ValueError as exc:
        print(f"eaglehead.train: error: {exc}", file=sys.stderr)
        return 2
    train(cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
