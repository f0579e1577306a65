"""Operational plumbing with no knowledge of requests: Prometheus metrics (``metrics``), structured
logs and the request-id context variable (``logs``), uvicorn worker slots (``workers``) and
reading files that operators replace at run time (``stablefiles``). It may import only
``defaults`` and the shared vocabulary (``proxy.settings`` included); every room above may use it.
"""
