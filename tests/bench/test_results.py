"""bench.results: docs/results.md is built from the result.json files under the evidence folder."""

from bench.result import BenchResult
from bench.results import collect, main, render


def _result(name: str, command: str, figures, **changes) -> BenchResult:
    fields = dict(name=name, command=command, commit="7dc0d00" + "0" * 33, dirty=False, cores=2,
                  load_start=[0.4, 0.3, 0.2], load_end=[1.5, 0.9, 0.5], started_utc="2026-11-27T09:40:00+00:00",
                  finished_utc="2026-11-27T10:01:00+00:00", figures=figures)
    return BenchResult(**fields | changes)


def test_each_benchmark_gets_a_section_with_its_command_commit_load_date_figures_and_folder(tmp_path):
    evidence, docs = tmp_path / "docs" / "evidence", tmp_path / "docs"
    _result("bench.tuners", "python -m bench.tuners --seeds 5",
            [{"case": "paper / steady", "regret": 0.01312, "reached": None}, {"case": "paper | burst", "regret": 0.5}],
            ).write(evidence / "tuners" / "psb" / "result.json")
    _result("bench.live", "python -m bench.live", {"side by side": [{"config": "defaults", "p95_s": 1.964}],
                                                  "the tuning run": [{"lost": 0, "converged": True}]},
            dirty=True, note="ran before the rename").write(evidence / "live" / "result.json")

    text = render(collect(evidence), docs)

    live, tuners = text.index("## bench.live"), text.index("## bench.tuners")
    assert 0 < live < tuners  # one section per benchmark, in name order
    assert "### [evidence/tuners/psb](evidence/tuners/psb/)" in text[tuners:]
    assert "`python -m bench.tuners --seeds 5`" in text[tuners:]
    assert "commit `7dc0d00`;" in text[tuners:] and "commit `7dc0d00` + changes;" in text[live:tuners]
    assert "ran 2026-11-27 09:40:00+00:00 to 2026-11-27 10:01:00+00:00" in text
    assert "load average 0.4 at the start, 1.5 at the end" in text
    assert "- ran before the rename" in text[live:tuners]
    assert "| case | regret | reached |" in text and "| paper / steady | 0.01312 | - |" in text
    assert "| paper \\| burst | 0.5 | - |" in text  # a cell cannot end its row early
    assert "side by side:" in text and "| defaults | 1.964 |" in text and "| 0 | yes |" in text
    assert "2 runs of 2 benchmarks" in text


def test_a_converted_run_without_a_recorded_date_or_load_says_so(tmp_path):
    _result("bench.soak", "python -m bench.soak", [{"windows": 2000}], load_start=None, load_end=None,
            started_utc=None, finished_utc=None).write(tmp_path / "soak" / "result.json")
    text = render(collect(tmp_path), tmp_path)
    assert "date not recorded" in text and "load not recorded" in text
    assert "1 of them ran before this format existed" in text


def test_the_command_writes_results_md_where_it_is_told(tmp_path, monkeypatch):
    _result("bench.soak", "python -m bench.soak", [{"windows": 2000}]).write(tmp_path / "evidence/soak/result.json")
    out = tmp_path / "results.md"
    monkeypatch.setattr("sys.argv", ["bench.results", "--evidence", str(tmp_path / "evidence"), "--out", str(out)])
    main()
    assert "## bench.soak" in out.read_text() and "(evidence/soak/)" in out.read_text()
