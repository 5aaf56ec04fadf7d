"""``accelerate launch -m eaglehead.train --config configs/NAME.yaml [key=value ...]``"""

import sys

from eaglehead.builtin.typed_config import parse_config_args

from .recipe import TrainConfig
from .stop import exit_code
from .trainer import train


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, _ = parse_config_args(TrainConfig, argv, prog="eaglehead.train", description="train a draft head",
                                   example="configs/demo.yaml", override_example="optim.lr=5e-5")
    except ValueError as exc:
        print(f"eaglehead.train: error: {exc}", file=sys.stderr)
        return 2
    return exit_code(train(cfg))


if __name__ == "__main__":
    raise SystemExit(main())
