"""The Textual front end (the only package that imports Textual).

Import :mod:`kldtui.tui.app` for ``create_app``, ``run_dashboard`` and ``run_viewer``.
"""
