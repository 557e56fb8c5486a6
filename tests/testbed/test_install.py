"""Installers: a current cache costs nothing, a missing tool is named."""

import pytest

from testbed import install


def test_current_cache_is_reused_without_any_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPETUNE_CACHE", str(tmp_path))
    libs = install.kafka_libs_dir()
    libs.mkdir(parents=True)
    install._stamp(libs).write_text(install._inputs_hash(install._HERE / "kafka" / "pom.xml"))
    monkeypatch.setattr(install.shutil, "which", lambda name: None)  # any tool use would now fail
    assert install.install_kafka() == libs


def test_changed_build_inputs_invalidate_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPETUNE_CACHE", str(tmp_path))
    binary = install.filebeat_binary()
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"")
    install._stamp(binary).write_text("built from other inputs")
    monkeypatch.setattr(install.shutil, "which", lambda name: None)
    with pytest.raises(install.PrerequisiteError, match="`go` is not on PATH"):
        install.install_filebeat()


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPETUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(install.shutil, "which", lambda name: None)
    with pytest.raises(install.PrerequisiteError, match="`mvn` is not on PATH.*Maven Central"):
        install.install_kafka()


@pytest.mark.slow
def test_the_peers_are_installed_once_kafkas_perf_test_at_the_brokers_version(monkeypatch):
    peers = install.install_peers()
    jars = {jar.name for jar in peers.kafka_tools_libs.glob("*.jar")}
    assert {f"kafka-tools-{install.KAFKA_VERSION}.jar", f"kafka-clients-{install.KAFKA_VERSION}.jar"} <= jars
    assert peers.k6.exists() and peers.nginx.exists()
    real_which = install.shutil.which
    monkeypatch.setattr(install.shutil, "which", lambda name: None if name in ("mvn", "apt-get") else real_which(name))
    assert install.install_peers() == peers  # cached: no Maven, no apt-get the second time
