"""An independent reference Iceberg REST catalog for the tests (test-only).

The server is a small Java program (``tests/reference_catalog/*.java``) whose catalog logic is
entirely Apache Iceberg's own ``org.apache.iceberg.rest.CatalogHandlers`` over a ``HadoopCatalog``
rooted in a local directory; the Java code only does HTTP plumbing with the JDK's HttpServer.
It lets the suite prove the proxy works in front of a catalog nobody on our team wrote.

It is compiled with ``javac`` on first use into ``.cache/reference-catalog/<hash>/`` (the hash
covers the Java sources, the Iceberg runtime jar name and the javac version) and started with
``reference_catalog(workdir)``::

    with reference_catalog(tmp_path) as uri:      # 'http://127.0.0.1:PORT'
        catalog = RestCatalog("ref", uri=uri)

The server exits by itself when its stdin closes, so a killed test run leaves no orphan JVM.
Its stdout/stderr (one line per request) go to ``workdir/reference-catalog.{stdout,stderr}.log``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.jars import iceberg_runtime_jar, spark_jars_dir

SOURCES_DIR = Path(__file__).resolve().parents[1] / "reference_catalog"
CACHE_ROOT = Path(__file__).resolve().parents[2] / ".cache" / "reference-catalog"
MAIN_CLASS = "referencecatalog.ReferenceCatalog"
STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0

_JDK_HINT = (
    "The reference Iceberg REST catalog needs a Java 17 JDK (`java` and `javac` on PATH): "
    "install it with `apt-get install openjdk-17-jdk-headless`."
)


def _tool(name: str) -> str:
    """`java`/`javac` from $JAVA_HOME if set (as pyspark does), else from PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"`{name}` not found. {_JDK_HINT}")
    return path


def _sources() -> list[Path]:
    sources = sorted(SOURCES_DIR.glob("*.java"))
    if not sources:
        raise RuntimeError(f"No Java sources found in {SOURCES_DIR}")
    return sources


def classpath(classes_dir: Path | None = None) -> str:
    """Runtime jar + pyspark's jars (Hadoop client etc.), optionally preceded by our classes."""
    parts = [str(iceberg_runtime_jar()), str(spark_jars_dir() / "*")]
    if classes_dir is not None:
        parts.insert(0, str(classes_dir))
    return os.pathsep.join(parts)


def _javac_version(javac: str) -> str:
    result = subprocess.run([javac, "-version"], capture_output=True, text=True, check=False)
    return (result.stdout + result.stderr).strip()


def compile_reference_catalog() -> Path:
    """Compile the Java sources if needed; return the directory holding the classes."""
    javac = _tool("javac")
    jar = iceberg_runtime_jar()
    if not jar.is_file():
        raise RuntimeError(f"Iceberg runtime jar not found: {jar}")

    digest = hashlib.sha256()
    digest.update(jar.name.encode())
    digest.update(_javac_version(javac).encode())
    for source in _sources():
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    target = CACHE_ROOT / digest.hexdigest()[:16]
    if (target / ".complete").is_file():
        return target

    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="compile-", dir=CACHE_ROOT))
    try:
        result = subprocess.run(
            [
                javac,
                "--release",
                "17",
                "-Xlint:all,-path",
                "-encoding",
                "UTF-8",
                "-cp",
                classpath(),
                "-d",
                str(staging),
                *map(str, _sources()),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"javac failed to compile the reference catalog:\n{result.stdout}{result.stderr}"
            )
        (staging / ".complete").write_text("ok\n")
        staging.chmod(0o755)  # mkdtemp makes it private
        try:
            staging.rename(target)
        except OSError:
            # Another process (e.g. a parallel pytest worker) finished first: use its copy.
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _tail(path: Path, limit: int = 8000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no output>"
    return text[-limit:] if text else "<empty>"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()  # the server exits on stdin EOF
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
        return
    except subprocess.TimeoutExpired:
        pass
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def reference_catalog(workdir: Path) -> Iterator[str]:
    """Compile (cached) and start the reference catalog; yield its base URI like
    'http://127.0.0.1:PORT'; stop it on exit.

    The warehouse is ``workdir/reference-warehouse``; logs go to
    ``workdir/reference-catalog.stdout.log`` and ``workdir/reference-catalog.stderr.log``.
    """
    java = _tool("java")
    classes = compile_reference_catalog()
    workdir = Path(workdir)
    warehouse = workdir / "reference-warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    stdout_log = workdir / "reference-catalog.stdout.log"
    stderr_log = workdir / "reference-catalog.stderr.log"

    command = [
        java,
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        classpath(classes),
        MAIN_CLASS,
        "--warehouse",
        str(warehouse),
    ]
    with stdout_log.open("wb") as out, stderr_log.open("wb") as err:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=out, stderr=err)
    try:
        uri = _wait_ready(process, stdout_log, stderr_log)
        yield uri
    finally:
        _stop(process)


def _wait_ready(process: subprocess.Popen[bytes], stdout_log: Path, stderr_log: Path) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        complete_lines = stdout_log.read_text(errors="replace").split("\n")[:-1]
        for line in complete_lines:
            if line.startswith("READY "):
                return line.removeprefix("READY ").strip()
        code = process.poll()
        if code is not None:
            raise RuntimeError(
                f"The reference catalog exited with code {code} before it was ready.\n"
                f"stderr:\n{_tail(stderr_log)}\nstdout:\n{_tail(stdout_log)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"The reference catalog was not ready after {STARTUP_TIMEOUT_S:.0f}s.\n"
                f"stderr:\n{_tail(stderr_log)}\nstdout:\n{_tail(stdout_log)}"
            )
        time.sleep(0.05)
