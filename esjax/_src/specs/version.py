"""esjax's version, in a module of its own so that any module can record it without importing
the package's public names (and, through them, the host loop)."""

__version__ = "0.1.0"
