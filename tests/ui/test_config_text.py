"""Configs as JSON and .properties text, both ways."""

from __future__ import annotations

import pytest

from connectors.ui.config_text import ConfigTextError, format_json, format_properties, parse_config_text


def test_properties_are_read_as_java_reads_them() -> None:
    text = "\n".join(
        [
            "# a comment",
            "! another",
            "connector.class = iceberg",
            "topics:orders,clicks",
            "iceberg.tables db.orders",
            r"iceberg.catalog.uri=jdbc\:postgresql://h/db",
            r"key\=with\ equals=v",
            "long.value=first \\",
            "    second",
            r"escaped=tab\there",
            r"unicode=caf\u00e9",
            "empty=",
        ]
    )
    assert parse_config_text(text) == {
        "connector.class": "iceberg",
        "topics": "orders,clicks",
        "iceberg.tables": "db.orders",
        "iceberg.catalog.uri": "jdbc:postgresql://h/db",
        "key=with equals": "v",
        "long.value": "first second",
        "escaped": "tab\there",
        "unicode": "café",
        "empty": "",
    }


def test_formatting_and_parsing_round_trip() -> None:
    config = {
        "connector.class": "iceberg",
        "value.converter.avro.schema": '{"type": "record",\n "name": "x"}',
        "a key": " leading space",
        "weird:key=": "back\\slash",
    }
    for text in (format_properties(config), format_json(config)):
        assert parse_config_text(text) == config
    assert format_properties(config).startswith("connector.class=iceberg\n")


def test_json_values_become_strings_and_nesting_is_refused() -> None:
    assert parse_config_text('{"tasks.max": 2, "flag": true}') == {"tasks.max": "2", "flag": "true"}
    with pytest.raises(ConfigTextError, match="topics: values must be strings"):
        parse_config_text('{"topics": ["a"]}')
    with pytest.raises(ConfigTextError, match="must be an object"):
        parse_config_text('["topics", "orders"]')
