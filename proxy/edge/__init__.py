"""The HTTP edge: where a request enters and leaves. Owns the app shell that maps every exception to
an Iceberg ErrorModel (``dispatch``), the per-request context and request id (``context``) and the
governed pipeline that runs route → gate → handler → one audit record (``pipeline``). It is the
top room: it may import every room below it (gate, handlers, services, vocabulary), and only
``proxy.app`` and ``proxy.cli`` import it.
"""
