"""Where the Iceberg Spark runtime jar and Spark's own jars live on this machine."""

from __future__ import annotations

from pathlib import Path

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def iceberg_runtime_jar() -> Path:
    """The Iceberg 1.10.2 Spark runtime jar shipped by `snowpark-connect-deps-iceberg==1.0.2`."""
    import snowpark_connect_deps_iceberg

    return Path(snowpark_connect_deps_iceberg.get_jar_path(ICEBERG_RUNTIME_JAR))


def spark_jars_dir() -> Path:
    """The directory of jars bundled with the installed pyspark (Hadoop client included)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"
