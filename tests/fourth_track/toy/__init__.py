"""The toy track: a one-layer attention model copying a lagged token stream (tests only)."""
