"""Kafka Connect's single message transforms (SMTs) and predicates, as the connectors we replace run them.

A connector's ``transforms`` (and ``predicates``) name a chain of
transformations, each configured by its ``transforms.<alias>.*`` keys, applied
in order to every record between the converter and the sink: Apache Kafka's
own (``org.apache.kafka.connect.transforms``), Debezium's
``ExtractNewRecordState`` and the Iceberg sink's ``DebeziumTransform`` and
``CopyValue``. The chain is built here from the config, once for its
validation (every key checked, a class we do not have refused by name) and
once in each runtime that decodes records (``workers.transformed``).

Records are transformed in their schemaless form, as Kafka Connect does with
``schemas.enable=false``: a JSON object is a map, a JSON array a list.
"""

from connectors.smt.chain import TransformChain, TransformFailed, parse_chain, transformation_classes
from connectors.smt.record import ConnectRecord, DataException

__all__ = [
    "ConnectRecord",
    "DataException",
    "TransformChain",
    "TransformFailed",
    "parse_chain",
    "transformation_classes",
]
