"""Server-side scan planning: requests, plans, plan tasks and their caches.

Room: pure planning; it may import commits, ops, defaults and the shared vocabulary, nothing above
(the planning service in ``proxy.plans`` drives it).
"""
