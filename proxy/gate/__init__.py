"""The gate: what every governed request passes before a handler acts. Owns authentication and the
coarse and final decisions (``enforce``), the evidence a commit is judged on (``evidence``),
namespaces that are tables in disguise (``nesting``) and listings filtered to what the caller may
see, with their sealed page tokens (``listing``, ``page_tokens``). It may import the rooms below
it down to the shared vocabulary; it uses no handler: it hands its verdict on as an
``Admission`` (``proxy.admission``) and the pipeline in ``proxy.edge`` calls the handler.
"""
