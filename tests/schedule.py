"""The order in which the end-to-end job hands its tests to pytest-xdist's workers.

`--dist loadgroup` queues the xdist groups first (most tests first: one worker each), then every
other test in collection order, and gives a worker the next one whenever it runs low. In file
order the longest tests came last (tests/test_plugins.py, test_preflight.py,
test_studies_stages.py, test_train.py), so the job ended with one worker still running them
while the others had nothing left (issue 47). `order()` sorts the queue instead:

1. the tests known to be long that do not read the micro DAG, longest first: they run while
   the `micro_dag` fixture trains it (the dvc group, queued first, starts it);
2. the tests that read the micro DAG (they wait for it), longest first;
3. every other test, in collection order: short ones, which fill the end.

LONG_S holds the seconds of the long tests in a measured e2e job (results/tests/; a test's time
there includes the session fixtures it waited on). A test missing from it, renamed or new, is
only queued in step 2 or 3; tests/test_schedule.py checks that every name here is a test."""

from __future__ import annotations

# test (file::name, without parameters) -> seconds in the e2e job of results/tests/slowest-*.csv
LONG_S: dict[str, float] = {
    "tests/test_dvc.py::test_dvc_adopts_snakemakes_outputs_and_is_then_up_to_date": 332.4,
    "tests/test_dvc.py::test_dvc_repro_rebuilds_deleted_outputs_and_reruns_only_what_reads_them": 187.8,
    "tests/infra/test_mlflow_server.py::test_unreachable_server_training_goes_on_and_sync_uploads_later": 158.1,
    "tests/test_studies_stages.py::test_studies_target_end_to_end_at_micro": 110.9,
    "tests/infra/test_mlflow_server.py::test_foreground_server_stops_its_whole_process_group_on_sigterm": 100.0,
    "tests/test_plugins.py::test_a_plugin_row_trains_in_the_dag_is_recorded_and_its_edit_reruns_exactly_its_runs": 96.6,
    "tests/infra/test_report_browser.py::test_report_in_chromium": 87.1,
    "tests/infra/test_mlflow_server.py::test_sync_completes_a_run_the_server_lost_half_of": 84.2,
    "tests/test_dvc_exp.py::test_dvc_exp_run_with_one_changed_param_reruns_only_its_dependents": 83.3,
    "tests/test_plugins.py::test_a_plugin_variant_builds_and_steps_in_every_track": 55.7,
    "tests/test_preflight.py::test_micro_preflight_steps_checkpoints_and_resumes_every_row_and_judges_the_profile": 51.4,
    "tests/infra/test_slurm.py::test_a_training_job_with_two_gpus_trains_as_two_ranks": 50.8,
    "tests/infra/test_slurm.py::test_snakemake_profile_slurm_all_runs_the_micro_pipeline": 43.8,
    "tests/infra/test_slurm.py::test_a_failing_rule_makes_snakemake_exit_nonzero": 40.1,
    "tests/infra/test_mlflow_server.py::test_two_training_jobs_at_once_through_the_server_lose_nothing": 38.6,
    "tests/test_engine.py::test_sigkill_sigterm_sigkill_then_the_same_command_ends_bit_exact": 36.5,
    "tests/test_train.py::test_two_concurrent_runs_into_one_sqlite_store": 36.5,
    "tests/test_preflight.py::test_micro_preflight_of_the_lm_passes_and_shares_a_step_between_rows_of_one_model": 31.8,
    "tests/test_gpu_check.py::test_ddp_part_two_gloo_ranks_train_what_one_process_trains": 30.7,
    "tests/test_lm_harness.py::test_the_harness_s_own_command_scores_a_run_on_a_task_folder": 27.1,
    "tests/infra/test_mlflow_server.py::test_runs_url_opens_the_runs_table_in_the_ui": 26.8,
    "tests/test_records.py::test_published_claims_rebuild_byte_for_byte_from_their_records": 26.3,
    "tests/test_ddp.py::test_nproc_starts_torchrun_whose_ranks_train_the_same_run": 25.9,
}
READS_DAG = "micro_dag"


def name(item) -> str:
    """file::function of a collected test (its parameters dropped)."""
    return item.nodeid.split("[", 1)[0]


def unit(item) -> str:
    """What xdist hands a worker at once: the test's xdist group, else the test."""
    mark = item.get_closest_marker("xdist_group")
    return f"@{mark.args[0] if mark.args else mark.kwargs.get('name')}" if mark else item.nodeid


def order(items: list) -> None:
    """Sort `items` in place by unit (a test, or an xdist group, whose tests keep their order):
    long units that do not read the micro DAG (longest first), then the units that read it
    (longest first), then the rest in their order."""
    seconds: dict[str, float] = {}
    reads: dict[str, bool] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        u = unit(item)
        seconds[u] = seconds.get(u, 0.0) + LONG_S.get(name(item), 0.0)
        reads[u] = reads.get(u, False) or READS_DAG in getattr(item, "fixturenames", ())
        first.setdefault(u, index)

    def key(pair):
        index, item = pair
        u = unit(item)
        if not reads[u] and not seconds[u]:
            return 2, 0.0, index, index  # as collected (xdist keeps a group's tests on one worker anyway)
        return (1 if reads[u] else 0), -seconds[u], first[u], index

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
