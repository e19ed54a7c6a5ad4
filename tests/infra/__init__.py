"""Infrastructure tests: a real one-node SLURM cluster, a real MLflow server, a real browser.

Daemons are started by session fixtures (conftest.py), by pid, in scratch folders, and
stopped in their teardown. All these tests carry the `infra` mark (`pytest -m infra`) and
one xdist group, so that under `pytest -n 2 --dist loadgroup` (make test) they share one
worker and each daemon is started once.
"""
