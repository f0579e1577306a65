"""Server-side commits: landing an admitted commit (``committer``) through the table's queue in this
replica (``queue``), judging on the heads this replica's commits left, with their pins
(``heads``, ``pinning``), and rebuilding rebuildable changes on a moved head (``rebuild``). It
may import admission and the rooms below it (backing, commits, ops, ...) and the shared
vocabulary, never the planning service, handlers, the gate or the edge.
"""
