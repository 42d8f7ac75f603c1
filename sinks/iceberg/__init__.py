"""The Iceberg sink: topics into Apache Iceberg tables through a catalog, one snapshot per table and commit.

``plugin`` holds its config definitions (imported by the web process),
``settings`` their checks and typed values, ``tables`` the catalog and the
idempotent commit, ``writer``, ``arrow_writer`` and ``spark_writer`` the data
planes, ``committer`` the coordinator's commit, ``upserts`` keyed writes and
``maintenance`` its tables' upkeep by Iceberg's Spark procedures.
"""
