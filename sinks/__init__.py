"""Sink plugins beside the built-in Iceberg sink: one package each, listed in ``sinks.registry``."""
