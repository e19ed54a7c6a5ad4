"""tests/cpu_by_test.py: the CPU of the processes a command starts, by the test they ran under."""

from __future__ import annotations

import csv
import sys

from .cpu_by_test import kind, main, rows


def test_kinds_name_the_pipeline_commands():
    assert kind("/v/bin/python /v/bin/kernattn train --params p.yaml --run rope-s0") == "kernattn train"
    assert kind("/v/bin/python -m kernattn.preflight.rowcheck a b") == "kernattn preflight.rowcheck"
    assert kind("/v/bin/python -m snakemake --snakefile S --target-jobs train:run=x") == "snakemake (SLURM job step)"
    assert kind("/v/bin/python /v/bin/snakemake --cores 2 all") == "snakemake"
    assert kind("/v/bin/python /v/bin/dvc repro report") == "dvc"
    assert kind("/usr/bin/chromium --headless") == "chromium"
    # a shell or launcher is itself, not the command it wraps (else a job counts twice)
    assert kind("/bin/bash -euo pipefail -c kernattn train --run rope-s0 > log 2>&1") == "bash"
    assert kind("srun -n1 --cpu-bind=q python -m snakemake --target-jobs train:run=x") == "srun"
    assert kind("slurmstepd: [12.0]") == "slurmstepd"


def test_rows_sum_by_test_and_command_and_leave_out_what_ran_before():
    seen = {("1", "a"): ["/v/bin/kernattn train --run x", "t::one", 2.5, False],
            ("2", "b"): ["/v/bin/kernattn train --run y", "t::one", 1.5, False],
            ("3", "c"): ["/v/bin/kernattn report", "t::two", 3.0, False],
            ("4", "d"): ["/usr/sbin/slurmctld", "", 9.0, True],      # alive before the command
            ("5", "e"): ["/v/bin/python -u -c import sys", "", 4.0, False]}  # a pytest worker
    assert rows(seen) == [{"test": "-", "command": "python", "processes": 1, "cpu_s": 4.0},  # ties: by test
                          {"test": "t::one", "command": "kernattn train", "processes": 2, "cpu_s": 4.0},
                          {"test": "t::two", "command": "kernattn report", "processes": 1, "cpu_s": 3.0}]


def test_a_childs_cpu_is_counted_under_the_test_in_its_environment(tmp_path, monkeypatch):
    out = tmp_path / "cpu.csv"
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/x.py::test_busy (call)")
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    assert main(["--out", str(out), "--", sys.executable, "-c", spin]) == 0
    [row] = [r for r in csv.DictReader(out.open()) if r["test"] == "tests/x.py::test_busy"]
    assert row["command"].startswith("python") and row["processes"] == "1" and 0.5 <= float(row["cpu_s"]) < 5
