"""GET / of the Connect API and the OpenAPI document and docs page."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from connectors.api import server_info
from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db


@pytest.fixture
def unreachable_kafka(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.KAFKA_BOOTSTRAP_SERVERS = f"127.0.0.1:{port}"
    monkeypatch.setattr(server_info, "cluster_ids", server_info.ClusterIdCache())


def _git_head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=django_settings.BASE_DIR, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.parametrize("path", [BASE, f"{BASE}/"])
def test_the_base_url_tells_version_commit_and_cluster(api: APIClient, unreachable_kafka: None, path: str) -> None:
    # The commit is read once per process; commits made since this session
    # started must not make the test compare against an older one.
    server_info.source_commit.cache_clear()
    response = api.get(path)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"version", "commit", "kafka_cluster_id"}
    assert body["version"] == "3.9.0-sinkadmin-0.1.0"
    assert body["commit"] == _git_head()
    # The broker cannot be reached: Connect clients get null rather than a hang.
    assert body["kafka_cluster_id"] is None


def test_an_unreachable_cluster_is_asked_again_only_after_a_while(unreachable_kafka: None) -> None:
    cache = server_info.cluster_ids
    assert cache.get() is None
    failed_at = cache._failed_at
    assert failed_at is not None
    assert cache.get() is None
    assert cache._failed_at == failed_at


def test_the_commit_is_read_from_a_packed_ref(tmp_path: Path, settings: Any) -> None:
    git = tmp_path / ".git"
    git.mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("# pack-refs with: peeled\n" + "ab" * 20 + " refs/heads/main\n")
    settings.BASE_DIR = tmp_path
    server_info.source_commit.cache_clear()
    try:
        assert server_info.source_commit() == "ab" * 20
    finally:
        server_info.source_commit.cache_clear()


def test_the_openapi_document_describes_the_connect_api(anonymous: APIClient) -> None:
    response = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    assert paths[f"{BASE}/connectors"]["post"]["responses"]["201"]["headers"]["Location"]
    assert set(paths[f"{BASE}/connectors/{{name}}/restart"]["post"]["responses"]) >= {"202", "204", "404"}
    assert set(schema["components"]["securitySchemes"]) >= {"basicAuth", "tokenAuth"}
    for name in ("ConnectorInfo", "ConnectorStateInfo", "ConnectorOffsets", "ConfigInfos", "ErrorMessage"):
        assert name in schema["components"]["schemas"]


def test_the_docs_page_renders(anonymous: APIClient) -> None:
    response = anonymous.get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()
