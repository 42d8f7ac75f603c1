"""The Hudi sink (issue 19): topics into Apache Hudi Copy-on-Write tables, written from the format.

``plugin`` (its keys), ``settings`` (checks and typed settings), ``table``
(the on-disk format), ``writer`` (the participants' side), ``commit`` (the
coordinator's instant and Spark's merge), ``runtime`` (what the plugin names).
"""
