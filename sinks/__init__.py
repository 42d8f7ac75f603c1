"""Sink plugins beside the built-in Iceberg sink: one package each, listed in ``sinks.registry``."""

# The registry (imported by connectors.config) imports each sink's plugin
# module, which imports connectors.config's definitions. Loading the config
# package first keeps that one way round whichever module is imported first
# (a Spark worker unpickling a sink's job starts at the sink's own module).
import connectors.config  # noqa: F401
