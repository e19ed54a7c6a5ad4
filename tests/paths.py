"""Where the tests find the repository and the shared data: `../shared` beside the checkout,
as in CI, or KERNATTN_SHARED for a checkout elsewhere (a git worktree, say)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KERNATTN_SHARED") or REPO.parent / "shared")
DICKENS = SHARED / "data" / "dickens" / "silesia_dickens.txt.gz"
