"""`kernattn preflight`: what would fail on the cluster, found on a CPU before the GPU-hours are
spent (cli.py). Above the tracks: it builds and steps their models."""
