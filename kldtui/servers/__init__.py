"""Server kinds: one module per kind (:mod:`.vllm`, :mod:`.embedded`, :mod:`.attach`), each a
:class:`~kldtui.servers.base.ServerKind` registered in :mod:`kldtui.servers.registry`; the profile,
the serve stage, the pipeline, preflight, doctor and ``kldtui serve`` ask the registry.
"""
