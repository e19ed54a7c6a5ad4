"""One rank of `kernattn <command> --nproc N` (launch.py): torchrun starts this module, which
runs the command's argv, handed over in the environment (torchrun's own parser would read the
command's options, `--run` among them, as its own)."""

from __future__ import annotations

import json
import os
import sys

ARGV_ENV = "KERNATTN_RANK_ARGV"


def main() -> int:
    from kernattn.cli import main as cli_main

    return cli_main(json.loads(os.environ[ARGV_ENV]))


if __name__ == "__main__":
    sys.exit(main())
