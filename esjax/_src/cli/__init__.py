"""Command line.

The ``esjax`` command: typer options, one call into the library per command, rich tables
and live progress. ``esjax --help`` and argument errors load no JAX.
"""
