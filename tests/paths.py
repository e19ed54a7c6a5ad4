"""Where the tests find the repository and the data: the data mirror folder named by
KERNATTN_DATA_MIRROR (.ci/run sets it where a mirror lies beside the checkout), else the data
cache, which `make test` fills first with `kernattn data pull --scale micro` (a network)."""

import os
from pathlib import Path

from kernattn.datasets.locate import default_home

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("KERNATTN_DATA_MIRROR") or os.environ.get("KERNATTN_DATA_HOME")
            or default_home())
DICKENS = DATA / "dickens" / "silesia_dickens.txt.gz"
FASHION = DATA / "images" / "fashion_mnist"
C4 = DATA / "fineweb_edu" / "c4-sample.00000-of-00001.json.gz"
EVAL = DATA / "eval"
