import subprocess
import sys

import pytest

from sinkadmin.env import SettingError, env_bool, env_bootstrap_servers, env_int, env_url


def test_env_bool_rejects_words_that_are_not_booleans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(SettingError, match="X_FLAG='maybe' is not a boolean"):
        env_bool("X_FLAG", False)


def test_env_int_enforces_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_PORT", "70000")
    with pytest.raises(SettingError, match="X_PORT=70000 is above the maximum 65535"):
        env_int("X_PORT", 1, minimum=1, maximum=65535)


def test_env_url_hides_the_password_when_it_complains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_URL", "mysql://u:s3cret@h/db")
    with pytest.raises(SettingError) as excinfo:
        env_url("X_URL", "", schemes={"postgres"})
    assert "s3cret" not in str(excinfo.value)
    assert "X_URL" in str(excinfo.value)


def test_bootstrap_servers_need_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker-without-port")
    with pytest.raises(SettingError, match="host:port"):
        env_bootstrap_servers("KAFKA_BOOTSTRAP_SERVERS", "")


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DATABASE_URL", "mysql://localhost/x", "DATABASE_URL="),
        ("DATABASE_URL", "postgres://localhost:notaport/x", "malformed port"),
        ("SINKADMIN_DEBUG", "perhaps", "SINKADMIN_DEBUG="),
        ("KAFKA_BOOTSTRAP_SERVERS", "nohost", "KAFKA_BOOTSTRAP_SERVERS="),
        ("SPARK_REMOTE", "http://spark:15002", "SPARK_REMOTE="),
    ],
)
def test_bad_settings_fail_at_start_with_one_line_naming_the_variable(variable: str, value: str, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env={**_base_env(), variable: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sinkadmin: configuration error:")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_unreachable_broker_is_reported_by_name() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "preflight"],
        env={**_base_env(), "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "KAFKA_BOOTSTRAP_SERVERS: no Kafka broker answers at 127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.stderr


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "SPARK_", "KAFKA_"))}
