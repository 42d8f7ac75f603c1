"""Runtime of a connector: control channel, coordinator, participants, Spark writer, table committer."""
