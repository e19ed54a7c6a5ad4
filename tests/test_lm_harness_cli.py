"""`kernattn lm-eval`'s own part of the harness's command line (tracks/lm/harness_cli.py)."""

import json

from kernattn.tracks.lm.harness_cli import default_output


def test_a_kernattn_run_scored_without_output_path_writes_beside_its_evaluation():
    args = ["run", "--model", "kernattn", "--model_args", "run=results/tiny/lm/runs/base-s0,max_gen_toks=3"]
    assert default_output(args) == [*args, "--output_path", "results/tiny/lm/eval/base-s0-lm-eval"]
    eq = ["run", "--model=kernattn", "--model_args=run=a/runs/r"]
    assert default_output(eq) == [*eq, "--output_path", "a/eval/r-lm-eval"]


def test_another_model_or_a_given_output_path_is_left_alone():
    for args in (["run", "--model", "hf", "--model_args", "run=a/b/c"],
                 ["run", "--model", "kernattn", "--model_args", "run=a/b/c", "--output_path", "o"],
                 ["run", "--model", "kernattn", "--model_args", "run=a/b/c", "-o", "o"],
                 ["run", "--model", "kernattn", "--model_args", "batch_size=2"]):
        assert default_output(args) == args


RESULTS = {"results": {"core6_copa": {"alias": "core6_copa", "acc,none": 0.75, "acc_stderr,none": 0.25,
                                      "acc_norm,none": 0.5, "acc_norm_stderr,none": "N/A"},
                       "gsm8k": {"exact_match,strict-match": 0.125, "exact_match,none": float("nan")}}}


def test_every_numeric_score_is_one_metric_named_by_task_and_measure():
    from kernattn.tracks.lm.harness_results import metrics_of

    assert metrics_of(RESULTS) == {"lm_eval/core6_copa/acc": 0.75, "lm_eval/core6_copa/acc_stderr": 0.25,
                                   "lm_eval/core6_copa/acc_norm": 0.5, "lm_eval/gsm8k/exact_match_strict-match": 0.125}


def _results_folder(tmp_path):
    out = tmp_path / "eval" / "r-lm-eval" / "model"
    out.mkdir(parents=True)
    (out / "results_2026-12-02T07-00-00.json").write_text(json.dumps(RESULTS))
    return tmp_path / "eval" / "r-lm-eval"


def test_the_scores_go_into_the_mlflow_run_that_trained_the_model(tmp_path):
    from mlflow.tracking import MlflowClient

    from kernattn.tracks.lm.harness_results import log

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("lm-micro", artifact_location=str(tmp_path / "art")))
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "final.json").write_text(json.dumps({"mlflow_run_id": run.info.run_id, "tracking_uri": uri,
                                                   "steps": 40}))
    assert log(folder, _results_folder(tmp_path)) == run.info.run_id
    got = client.get_run(run.info.run_id).data.metrics
    assert got["lm_eval/core6_copa/acc"] == 0.75 and got["lm_eval/gsm8k/exact_match_strict-match"] == 0.125
    assert client.get_metric_history(run.info.run_id, "lm_eval/core6_copa/acc")[0].step == 40
    assert [a.path for a in client.list_artifacts(run.info.run_id, "lm-eval")] == [
        "lm-eval/results_2026-12-02T07-00-00.json"]


def test_a_run_trained_without_tracking_keeps_its_results_and_says_so(tmp_path):
    from kernattn.tracks.lm.harness_results import log

    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "final.json").write_text(json.dumps({"mlflow_run_id": None, "tracking_uri": None}))
    said = []
    assert log(folder, _results_folder(tmp_path), warn=said.append) is None
    assert len(said) == 1 and "trained without MLflow tracking" in said[0]
    assert log(folder, tmp_path / "nothing", warn=said.append) is None and "no results_*.json" in said[1]
