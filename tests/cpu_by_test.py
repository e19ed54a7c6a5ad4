"""Where a test job's CPU time goes, by test and by command, child processes included.

    python tests/cpu_by_test.py --out results/tests/e2e-cpu-DATE-COMMIT.csv -- make test-e2e

Runs the command and samples /proc every 0.3 s: each process's own CPU time (user + system),
its command line and the test it was started under (pytest puts the running test's id in
PYTEST_CURRENT_TEST; every process a test starts inherits it, SLURM jobs included, since
sbatch exports the submitting environment). pytest's JUnit times say how long a test took on a
loaded machine; this says what it cost, which is what a CPU-bound job's wall time is made of.
A process living under one sample period is missed (a few milliseconds each); pytest's own
workers carry no test in their environment (pytest sets it while they run), so their in-process
work is the rows of test "-". Linux only.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
TEST_ENV = b"PYTEST_CURRENT_TEST="


def sample(seen: dict, before: bool = False) -> None:
    """Update `seen` ((pid, start) -> [command, test, last cpu, alive before the command]) from /proc."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            cpu, key = (int(fields[11]) + int(fields[12])) / TICK, (pid, fields[19])
            if key not in seen:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                test = next((e[len(TEST_ENV):].decode(errors="replace") for e in env if e.startswith(TEST_ENV)), "")
                seen[key] = [cmd, test.rsplit(" (", 1)[0], cpu, before]
            seen[key][2] = cpu
        except (OSError, ValueError, IndexError):  # the process ended between listing and reading
            continue


LAUNCHERS = {"bash", "sh", "dash", "srun", "sbatch", "slurmstepd:", "timeout", "env"}  # wrap a command, run none


def kind(cmd: str) -> str:
    """A short name for what a process runs: `kernattn <subcommand>`, a Snakemake job step, ...
    A shell or launcher (`bash -c "kernattn train ..."`, srun) is named as itself, not as the
    command it wraps: else each job counts twice under its command, once with no CPU."""
    head = Path(cmd.split(" ", 1)[0]).name
    if head in LAUNCHERS:
        return head.rstrip(":")
    if "snakemake" in cmd:
        return "snakemake (SLURM job step)" if "--target-jobs" in cmd else "snakemake"
    found = re.search(r"kernattn(?:\.cli)? ([a-z][\w-]+)", cmd) or re.search(r"-m kernattn\.([\w.]+)", cmd)
    if found:
        return f"kernattn {found.group(1)}"
    if "/dvc " in cmd or cmd.split(" ", 2)[1:2] == ["dvc"]:
        return "dvc"
    return head or "?"


def rows(seen: dict) -> list[dict]:
    """CPU seconds per (test, kind) of every process the command started; those started outside
    any test (pytest's own workers, whose tests run in-process, and the session's daemons)
    under the test name "-"."""
    cpu, count = defaultdict(float), defaultdict(int)
    for cmd, test, total, before in seen.values():
        if before:
            continue
        key = (test or "-", kind(cmd))
        cpu[key] += total
        count[key] += 1
    return [{"test": t, "command": k, "processes": count[t, k], "cpu_s": round(cpu[t, k], 2)}
            for (t, k) in sorted(cpu, key=lambda tk: (-cpu[tk], tk)) if cpu[t, k] > 0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="CSV to write: test, command, processes, cpu_s")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("name the command to run after --")
    seen: dict = {}
    sample(seen, before=True)  # this machine's other processes: not the command's
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(seen)
        time.sleep(0.3)
    table = rows(seen)
    from kernattn.io import atomic_path  # the CSV whole or not at all, as every output of the project

    with atomic_path(args.out) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["test", "command", "processes", "cpu_s"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    print(f"{args.out}: {sum(r['cpu_s'] for r in table):.0f} CPU-s under {len({r['test'] for r in table})} tests",
          file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
