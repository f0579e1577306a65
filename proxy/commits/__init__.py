"""Table commits classified by what they really do, verified against their manifests.

Public API::

    check_classification_complete()              # at start-up: every REST update action known
    check_commit_shape(body, limits)              # cheap, before any read: shape, 413 on size
    intent = classify_commit(body, base, io, limits=limits)  # one table commit -> CommitIntent
    creates_table(body)                           # is this commit / table-changes entry a create?
    table_locations(base, body)                   # where the table's files may be (TableLocations)

``intent.actions`` is every right the commit needs; ``intent.evidence`` (``to_dict()``) is what
the audit record shows. A commit that cannot be verified raises ``UnverifiableCommit`` (400),
one that references a file outside the table's locations too (before reading it; local locations
with symbolic links resolved), one that adds a file that is not what its manifest entry claims
(``footers``: missing, another size, a Parquet footer whose rows, columns or statistics disagree
with the entry or the table's schemas), one whose verification would exceed ``CommitLimits``
``CommitTooLarge`` (400: manifests per list, list records and entries read per commit, footer
bytes and time), one that adds more than ``max_snapshots`` snapshots or carries more than
``max_updates`` updates ``PayloadTooLarge`` (413, before any read). A data snapshot must be
built on its ref's predecessor (the asserted or current snapshot; a ref that is new or removed
earlier in the commit has none): one naming another parent, or none, is refused.

Modules: ``classify`` (orchestration, ref analysis), ``updates`` (one classifier per update
action, the dispatch table and the start-up check), ``snapshots`` (claimed snapshots, which state
each replaces), ``refs`` (ref type and retention changes), ``diff`` (what a snapshot changes, from
manifests), ``history`` (what a snapshot carries over must be unchanged), ``rules`` (change ->
action, summary checks), ``manifests`` (reading, within limits), ``confine`` (the table's
locations), ``shape`` (the cheap checks), ``listing`` (fresh manifests' list records against their
entries), ``lineage`` (format-3 row ids: ``first-row-id``, ``added-rows``, manifests'
``first_row_id``), ``rows`` / ``rowfiles`` / ``rowkeys`` / ``rowscope`` / ``rowstats``
(row-level checks: which deletes readers apply, metrics and partitions against content),
``timeline`` (snapshot timestamps in order), ``footers`` / ``footstats`` / ``columns`` (added
files against their entries and the table's schemas, shared with the data operations),
``intent`` (result types).

History: a snapshot that alters a manifest or entry it carries over from its predecessor (a kept
manifest's sequence number or counts, a re-listed file's bounds), re-lists an EXISTING or DELETED
entry that no replaced manifest held live, writes a manifest-list record for a fresh manifest that
its entries contradict (counts, sequence numbers, partition summaries: ``listing``), or — while
delete files are live — lists again or removes a file that a kept manifest still holds live,
or, in a format-3 table, assigns other row ids than the table's next ones (``lineage``),
rewrites history: it is an UPDATE, never verified, whatever it claims (see ``history``). A file's
identity is its canonical location (``confine.canonical_location``): one physical file under two
spellings is one file.

Removed delete files: removing a delete file re-exposes the rows it deleted, so a snapshot that
does is an UPDATE, unless the removal provably exposes nothing: the delete file is expired or
orphaned by the removal of its one data file (``diff``), or every row it deleted is verified, row
by row, to stay deleted (``rows``). Copy-on-write rewrites are a DELETE only when every added row
is one of the removed files' live rows (``rows``), and a ``replace`` that changes files is a
REWRITE only when the live rows it removes are, as a multiset, the live rows it adds and its kept
data files keep their deleted rows (``rewrite_rows``); reading rows is bounded by
``CommitLimits.row_bytes_budget``, beyond which the stricter classification stands.

Room: pure classification; it may import ops, defaults and the shared vocabulary, nothing above
(the gate's evidence and the committer drive it).
"""

from proxy.commits.classify import classify_commit, creates_table
from proxy.commits.confine import TableLocations, table_locations
from proxy.commits.intent import CommitEvidence, CommitIntent, FileCounts, UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.manifests import CommitTooLarge
from proxy.commits.shape import check_commit_shape
from proxy.commits.updates import (
    SPEC_TABLE_UPDATES,
    UPDATE_CLASSIFIERS,
    IncompleteClassification,
    check_classification_complete,
)

__all__ = [
    "SPEC_TABLE_UPDATES",
    "UPDATE_CLASSIFIERS",
    "CommitEvidence",
    "CommitIntent",
    "CommitLimits",
    "CommitTooLarge",
    "FileCounts",
    "IncompleteClassification",
    "TableLocations",
    "UnverifiableCommit",
    "check_classification_complete",
    "check_commit_shape",
    "classify_commit",
    "creates_table",
    "table_locations",
]
