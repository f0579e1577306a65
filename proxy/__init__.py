"""icegov: a governance proxy for Apache Iceberg REST catalogs."""

__version__ = "0.1.0"
