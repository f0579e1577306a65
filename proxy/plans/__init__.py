"""The planning service behind ``POST …/plan`` and ``…/tasks``: loading the table and judging a scan
against the principal's read view (``read_context``), planning and signing plans and tasks
(``service``) and plans prepared in the background for ``submitted`` answers (``jobs``). It may
import the rooms below it (admission, reads, backing, planning, commits, ...) and the shared
vocabulary, never handlers, the gate or the edge.
"""
