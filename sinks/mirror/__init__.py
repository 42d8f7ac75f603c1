"""The exactly-once Kafka mirror (issue 20): MirrorMaker 2's sink with KIP-656's transactions.

``settings`` (its keys, as MM2 names them) and ``engine`` (a task's transactional copy loop). The plugin
that puts it under the product's lifecycle comes on top of them.
"""
