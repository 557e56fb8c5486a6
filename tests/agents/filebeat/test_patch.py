"""Tuning an operator's own Filebeat config in place (`agents.filebeat.patch`)."""

import difflib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agents.filebeat.patch import FilebeatConfigError, InputSelector, discover, patch

GOLDEN = Path(__file__).parents[1] / "golden" / "operator"
TUNED = {"filebeat.scan_frequency": 0.08, "filebeat.backoff": 0.001, "filebeat.max_backoff": 0.008,
         "filebeat.queue.mem.flush.min_events": 2, "filebeat.queue.mem.flush.timeout": 0.001,
         "filebeat.output.bulk_max_size": 1742, "filebeat.multiline.timeout": 0.5,
         "filebeat.output.pipelining": 4}


@pytest.fixture
def inline(tmp_path: Path) -> Path:
    shutil.copy(GOLDEN / "filebeat.yml", tmp_path / "filebeat.yml")
    return tmp_path / "filebeat.yml"


@pytest.fixture
def reloading(tmp_path: Path) -> Path:
    shutil.copytree(GOLDEN / "reloading", tmp_path / "reloading")
    return tmp_path / "reloading" / "filebeat.yml"


def _changed(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:2] in ("- ", "+ ")]


def test_inputs_written_in_filebeat_yml_are_found_by_id(inline):
    files = discover(inline, [InputSelector(id="nginx-access")])
    assert [(t.file, t.id, t.type) for t in files.inputs] == [(inline, "nginx-access", "filestream")]
    assert files.output == "kafka" and files.files() == (inline,)


def test_only_the_selected_input_the_queue_and_the_output_change(inline):
    before = inline.read_text()
    patched = patch(discover(inline, [InputSelector(id="nginx-access")]), TUNED)
    after = patched[inline]
    assert sorted(_changed(before, after)) == sorted([
        "-     prospector.scanner.check_interval: 10s   # default",
        "+     prospector.scanner.check_interval: 80ms   # default",
        "-       init: 1s", "+       init: 1ms", "-       max: 10s", "+       max: 8ms",
        "-   flush.min_events: 2048", "+   flush.min_events: 2", "-   flush.timeout: 1s", "+   flush.timeout: 1ms",
        "+   bulk_max_size: 1742"])
    loaded = yaml.safe_load(after)
    assert loaded["output.kafka"]["bulk_max_size"] == 1742 and "pipelining" not in loaded["output.kafka"]
    other = before[before.index("  # application errors"):before.index("filebeat.config.modules")]
    assert other in after  # the other input (and its multiline parser), byte for byte


def test_tuned_durations_are_written_as_people_write_them(inline):
    """Not `55828.24ms`: at most 3 significant digits, in the largest unit that keeps them (item 7, issue 39)."""
    files = discover(inline, [InputSelector(id="nginx-access")])
    tuned = {"filebeat.max_backoff": 55.82824, "filebeat.backoff": 0.2500004, "filebeat.queue.mem.flush.timeout": 31e-6,
             "filebeat.scan_frequency": 59.9996}
    loaded = yaml.safe_load(patch(files, tuned)[inline])
    assert loaded["filebeat.inputs"][0]["backoff"] == {"init": "250ms", "max": "55.8s"}
    assert loaded["filebeat.inputs"][0]["prospector.scanner.check_interval"] == "1m"  # 60s: its range's top
    assert loaded["queue.mem"]["flush.timeout"] == "31us"


def test_inputs_in_loaded_input_files_are_found_by_path_and_patched_there(reloading):
    files = discover(reloading, [InputSelector(path_glob="/var/log/nginx/access.log*")])
    web = reloading.parent / "inputs.d" / "web.yml"
    assert [(t.file.name, t.type) for t in files.inputs] == [("web.yml", "log")]
    assert files.files() == (reloading, web)
    before = web.read_text()
    patched = patch(files, TUNED)
    inputs = yaml.safe_load(patched[web])
    assert inputs[0]["scan_frequency"] == "80ms" and inputs[0]["backoff"] == "1ms"
    assert inputs[0]["multiline.timeout"] == "500ms" and inputs[0]["fields"] == {"tier": "web"}
    assert inputs[1] == yaml.safe_load(before)[1]  # the syslog input is not selected
    assert yaml.safe_load(patched[reloading])["output.logstash"]["pipelining"] == 4


def test_a_selector_that_matches_nothing_names_what_there_is(inline):
    with pytest.raises(FilebeatConfigError, match=r"no input has id 'nginx'; inputs found: filebeat.yml:6 "
                                                  r"filestream id='nginx-access'"):
        discover(inline, [InputSelector(id="nginx")])


def test_a_config_that_is_not_yaml_is_refused_with_its_line(tmp_path):
    broken = tmp_path / "filebeat.yml"
    broken.write_text("filebeat.inputs:\n- type: log\n  paths: [/x\noutput.kafka: {}\n")
    with pytest.raises(FilebeatConfigError, match=rf"^{broken}:\d+: "):
        discover(broken, [InputSelector(id="x")])


def test_an_output_pipetune_cannot_tune_is_refused(tmp_path):
    config = tmp_path / "filebeat.yml"
    config.write_text("filebeat.inputs:\n- type: filestream\n  id: a\n  paths: [/x]\n"
                      "output.elasticsearch:\n  hosts: [es:9200]\n")
    with pytest.raises(FilebeatConfigError, match="expected one output.kafka or output.logstash to tune, found neither"):
        discover(config, [InputSelector(id="a")])


def _with_real_tls_files(config: Path) -> None:
    """Point the operator's TLS settings at files that exist here (Filebeat opens them when it checks)."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("filebeat.example")
    pem = config.parent / "pem"
    pem.mkdir()
    ca.cert_pem.write_to_path(str(pem / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(pem / "cert.pem"))
    cert.private_key_pem.write_to_path(str(pem / "cert.key"))
    text = config.read_text()
    for old, new in (("/etc/filebeat/ca.pem", "ca.pem"), ("/etc/pki/root/ca.pem", "ca.pem"),
                     ("/etc/pki/client/cert.pem", "cert.pem"), ("/etc/pki/client/cert.key", "cert.key")):
        text = text.replace(old, str(pem / new))
    config.write_text(text)


@pytest.mark.slow
@pytest.mark.parametrize("name, selector", [("filebeat.yml", InputSelector(id="nginx-access")),
                                            ("reloading/filebeat.yml", InputSelector(path_glob="/var/log/nginx/*"))])
def test_real_filebeat_accepts_the_patched_operator_config(installed, tmp_path, name, selector, monkeypatch):
    shutil.copytree(GOLDEN, tmp_path / "operator")
    config = tmp_path / "operator" / name
    _with_real_tls_files(config)
    for path, text in patch(discover(config, [selector]), TUNED).items():
        path.write_text(text)
    for path in config.parent.rglob("*.yml"):
        path.chmod(0o600)  # Filebeat refuses config files others can write
    monkeypatch.setenv("KAFKA_PASSWORD", "not-a-secret")
    check = subprocess.run([str(installed.filebeat), "test", "config", "-c", config.name, "--path.config",
                            str(config.parent), "--path.data", str(tmp_path / "data"), "--path.logs",
                            str(tmp_path / "logs")], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "Config OK" in check.stdout, check.stdout + check.stderr
