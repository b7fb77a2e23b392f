"""Command-line interface: argument parsing, one module per command, the headless reporter."""

from kldtui.cli.main import main

__all__ = ["main"]
