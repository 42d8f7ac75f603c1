"""The plain-file sink: topics as files in the Confluent HDFS / S3 sinks' layout, exactly once.

``plugin`` holds its config definitions (imported by the web process),
``settings`` their checks and typed values, ``layout`` the partitioners and
names, ``writer`` the data plane and ``committer`` the coordinator's commit.
"""
