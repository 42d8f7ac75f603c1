"""The local Spark Connect server answers only this machine: Spark 3.5's server listens on every
interface, and our interceptor (jvm/connect-guard) refuses every peer not on a loopback address.
Against a real server started by ``start_spark_connect``, reached once through 127.0.0.1 and once
through this machine's own non-loopback address (never another machine's)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator

import psutil
import pytest
from django.conf import settings

from sinkadmin.services import CONNECT_GUARD_INTERCEPTOR, connect_guard_conf, spark_conf, start_spark_connect
from tests.conftest import free_port
from workers import spark_writer

pytestmark = pytest.mark.integration

REFUSAL = "sinkadmin's Spark Connect server answers only this machine (loopback)"


def own_non_loopback_address() -> str | None:
    """An IPv4 address of one of this machine's own interfaces that is not a loopback one."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                return str(address.address)
    return None


@pytest.fixture(scope="module")
def guarded_port() -> Iterator[int]:
    """A Spark Connect server of this module's own, as the project starts it (host 127.0.0.1)."""
    port = free_port()
    server = start_spark_connect(port, settings.VAR_DIR / "log" / "tests", master="local[1]", driver_memory="1g")
    try:
        yield port
    finally:
        server.stop()


def test_the_guard_is_the_servers_alone_and_only_for_a_loopback_host() -> None:
    assert "spark.connect.grpc.interceptor.classes" not in spark_conf(server=False)
    guard = connect_guard_conf("127.0.0.1")
    assert guard["spark.connect.grpc.interceptor.classes"] == CONNECT_GUARD_INTERCEPTOR
    assert guard["spark.jars"].endswith("sinkadmin-connect-guard.jar")
    assert connect_guard_conf("localhost") == guard
    # Whoever binds elsewhere means to be reached from other machines.
    assert connect_guard_conf("0.0.0.0") == {}
    assert connect_guard_conf("") == {}


def test_a_loopback_client_is_answered(guarded_port: int) -> None:
    spark = spark_writer.connect(f"sc://127.0.0.1:{guarded_port}")
    try:
        assert spark.range(3).count() == 3
    finally:
        spark.stop()


def test_a_client_through_a_non_loopback_address_is_refused(guarded_port: int) -> None:
    address = own_non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to reach its own server through")
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    spark = spark_writer.connect(f"sc://{address}:{guarded_port}", max_retries=0)
    try:
        with pytest.raises(SparkConnectGrpcException, match="PERMISSION_DENIED") as refused:
            spark.range(3).count()
    finally:
        spark.stop()
    assert REFUSAL in str(refused.value)
    assert f"/{address}:" in str(refused.value)  # the peer, as the server saw it
