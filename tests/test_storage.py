"""A table's storage as the workers reach it: Spark's defaults file, Hadoop's S3A settings per bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from sinkadmin.services import spark_defaults, with_spark_defaults
from workers.storage import StoragePath, s3a_settings

DEFAULTS = """\
# Spark's own file: key, whitespace, value
spark.hadoop.fs.s3a.endpoint           http://127.0.0.1:9000
spark.hadoop.fs.s3a.access.key=lake-user
spark.hadoop.fs.s3a.secret.key: lake-secret
spark.hadoop.fs.s3a.path.style.access  true
spark.hadoop.fs.s3a.bucket.archive.endpoint   s3.eu-west-1.amazonaws.com
spark.hadoop.fs.s3a.bucket.archive.access.key archive-user
spark.jars                             /opt/extra.jar
spark.serializer                       org.apache.spark.serializer.JavaSerializer
spark.executor.memory                  3g
"""


@pytest.fixture
def conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "spark-defaults.conf").write_text(DEFAULTS)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    return tmp_path


def test_spark_defaults_are_read_as_spark_reads_them(conf_dir: Path) -> None:
    found = spark_defaults()
    assert found["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert found["spark.hadoop.fs.s3a.access.key"] == "lake-user"
    assert found["spark.hadoop.fs.s3a.secret.key"] == "lake-secret"


def test_no_conf_dir_means_no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert spark_defaults() == {}
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "absent"))
    assert spark_defaults() == {}


def test_the_servers_properties_keep_the_users_and_the_projects_needs_win(conf_dir: Path) -> None:
    merged = with_spark_defaults(
        {"spark.jars": "/var/jars/hudi.jar", "spark.serializer": "org.apache.spark.serializer.KryoSerializer"}
    )
    assert merged["spark.executor.memory"] == "3g"
    assert merged["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    # Hudi's writer needs Kryo: the project's setting wins; jars are joined.
    assert merged["spark.serializer"] == "org.apache.spark.serializer.KryoSerializer"
    assert merged["spark.jars"] == "/var/jars/hudi.jar,/opt/extra.jar"


def test_a_buckets_own_s3a_settings_override_the_connectors() -> None:
    properties = {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.access.key": "lake-user",
        "spark.hadoop.fs.s3a.bucket.archive.access.key": "archive-user",
        "spark.hadoop.fs.s3a.bucket.archive.endpoint": "s3.eu-west-1.amazonaws.com",
        "spark.hadoop.fs.s3a.multipart.size": "64M",
    }
    assert s3a_settings("lake", properties) == {"endpoint": "http://127.0.0.1:9000", "access.key": "lake-user"}
    assert s3a_settings("archive", properties) == {
        "endpoint": "s3.eu-west-1.amazonaws.com",
        "access.key": "archive-user",
    }


def test_an_s3a_path_carries_its_buckets_settings_to_pyarrow_and_hudi_rs(conf_dir: Path) -> None:
    lake = StoragePath.parse("s3a://lake//tables/orders/")
    assert lake.uri == "s3a://lake/tables/orders"
    assert StoragePath.parse("s3a://lake/orders").uri == "s3a://lake/orders"
    assert lake.child(".sinkadmin", "incoming").uri == "s3a://lake/tables/orders/.sinkadmin/incoming"
    assert lake.storage_options() == {
        "aws_access_key_id": "lake-user",
        "aws_secret_access_key": "lake-secret",
        "aws_endpoint": "http://127.0.0.1:9000",
        "aws_allow_http": "true",
    }
    fs, path = lake.filesystem()
    assert (type(fs).__name__, path) == ("S3FileSystem", "lake/tables/orders")
    # An endpoint without a scheme is https unless Hadoop's connection.ssl.enabled says otherwise.
    archive = StoragePath.parse("s3a://archive/orders")
    assert archive.storage_options()["aws_endpoint"] == "https://s3.eu-west-1.amazonaws.com"


def test_a_local_path_is_normalised_and_needs_no_settings(tmp_path: Path) -> None:
    local = StoragePath.parse(f"file://{tmp_path}/a/../orders/")
    assert local.uri == f"{tmp_path}/orders" and local.storage_options() == {}
    local.write_bytes("probe/file", b"x")
    assert local.exists("probe/file")
    assert [name for name, _ in local.folders()] == ["probe"]
    local.delete("probe")
    assert not local.exists("probe/file") and list(local.folders()) == []
    with pytest.raises(ValueError, match="hdfs:// is not a storage"):
        StoragePath.parse("hdfs://namenode/orders")
