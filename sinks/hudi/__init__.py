"""Apache Hudi tables: the on-disk format (``table``), written from its specification (issue 19).

The sink plugin that streams topics into these tables comes on top of it.
"""
