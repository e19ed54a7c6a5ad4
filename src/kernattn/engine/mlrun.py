"""One naming rule for the MLflow runs of every track (kernattn.tracking does the calls).

experiment: the `experiment` of the params section the track names for it (the char
track: tracking.experiment; the LM track: lm.experiment), else 'kernattn-<track>-<scale>'
(vision names none); `{scale}` is filled in by the params loader. run name: the run id, '<row>-s<seed>', in every track. Tags: track, run_id,
seed, variant, scale, fingerprint, params digest, git commit, device, and the track's own.
Params: config.json flattened, less what changes from one session to the next.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from ..tracking.client import flatten

# config.json keys that are not MLflow params: they change between sessions of one run (and
# MLflow params are immutable) or describe the machine, not the run.
SESSION_KEYS = ("tracking", "resumed_from_step", "params_path", "device_name", "effective", "python_version",
                "git_dirty")

# The identity fields of a run (its head in final.json) that become MLflow tags, the same
# for the runs training opens and the runs sync-mlflow creates.
TAG_KEYS = ("track", "run_id", "row", "seed", "variant", "source", "label", "matched", "git_commit",
            "params_digest", "scale", "fingerprint", "device", "plugin")


def source_tags(command: str | None, commit: str | None) -> dict[str, str | None]:
    """MLflow's own system tags (its UI's Source and Version columns) for a run `kernattn
    <command>` made at `commit`: the same for the runs training opens and those sync-mlflow creates."""
    return {"mlflow.source.name": f"kernattn {command}" if command else "kernattn",
            "mlflow.source.type": "LOCAL", "mlflow.source.git.commit": commit}


class NamesExperiment(Protocol):
    """A params section that names an MLflow experiment: tracking (the char track), lm."""

    experiment: str


def experiment_name(section: NamesExperiment | None, track: str, scale: str) -> str:
    """The section's experiment; 'kernattn-<track>-<scale>' for a track that names none (None)
    or an empty name."""
    return section.experiment if section is not None and section.experiment else f"kernattn-{track}-{scale}"


def tracking_for(tracking: Any, experiment: str) -> Any:
    """The params' tracking section aimed at `experiment`."""
    if dataclasses.is_dataclass(tracking):
        return dataclasses.replace(tracking, experiment=experiment)
    from types import SimpleNamespace

    return SimpleNamespace(**{**vars(tracking), "experiment": experiment})


def mlflow_params(config: dict[str, Any]) -> dict[str, str]:
    """The MLflow params of a run, from its config.json (training and sync-mlflow agree).

    Read through JSON as config.json holds it: a tuple nested in a list (a row's `paper`
    references) is a list there, and training (the in-memory config) must log the same text
    as sync-mlflow (the file)."""
    import json

    config = json.loads(json.dumps(config))
    return flatten({k: v for k, v in config.items() if k not in SESSION_KEYS})
