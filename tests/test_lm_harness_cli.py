"""`kernattn lm-eval`'s own part of the harness's command line (tracks/lm/harness_cli.py)."""

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
