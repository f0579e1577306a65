"""Governed snapshots: the data a row- or mask-restricted principal reads, written by icegov.

For a table and a principal whose read view has a row filter or a mask, icegov serves table
metadata whose snapshots list only data the principal may read: base data files proven to hold
only permitted rows and no masked column (referenced in place), and governed Parquet files
icegov wrote holding exactly the permitted live rows of files that mix, masked. Every engine that
reads through the catalog then reads governed data, whatever it plans with.

Owns: the governed layout (``layout``), masks on rows (``masks``), governed copies of data files
(``copies``, in process or on PySpark), per-manifest governed manifests, governed snapshot trees
and metadata, and the build service. It may import the shared vocabulary, ``proxy.commits``' file
readers, ``proxy.planning``'s delete index and ``proxy.backing``'s table state; never the edge,
the gate or the handlers.
"""
