"""bench.result: a benchmark's result survives its JSON file whole, and says what ran, where and when."""

import subprocess

from bench.result import ROOT, BenchResult


def test_a_result_reads_back_as_it_was_written(tmp_path):
    started = BenchResult.start("bench.convergence", ["--seed", "1", "--json", "out dir/x.json"])
    result = started.finish({"cases": [{"case": "paper-2vcpu / steady", "final_p95_s": 1.91, "converged_at": None}]},
                            {"decisions": [{"window": 0, "change": {"filebeat.backoff": [1, 0.5]}}]})
    path = result.write(tmp_path / "run" / "result.json")
    assert BenchResult.read(path) == result


def test_a_started_run_records_its_command_commit_and_machine():
    result = BenchResult.start("bench.twin", ["--json", "out dir/x.json"]).finish([{"preset": "baseline"}])
    assert result.command == "python -m bench.twin --json 'out dir/x.json'"  # as a shell would take it back
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert result.commit == (head.stdout.strip() if head.returncode == 0 else "unknown")  # "unknown" off a checkout
    assert result.cores >= 1 and len(result.load_start) == len(result.load_end) == 3
    assert result.started_utc <= result.finished_utc and result.finished_utc.endswith("+00:00")
