"""Django settings, read from the environment (docs/operations.md, "Environment")."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

from sinkadmin.env import (
    SettingError,
    env_bool,
    env_bootstrap_servers,
    env_int,
    env_list,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SINKADMIN_VAR_DIR", str(BASE_DIR / "var")))


def _secret_key() -> str:
    """The configured key, or one generated once and kept in var/ for dev use."""
    configured = env_str("SINKADMIN_SECRET_KEY", "")
    if configured:
        if len(configured) < 32:
            raise SettingError("SINKADMIN_SECRET_KEY is shorter than 32 characters")
        return configured
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("SINKADMIN_DEBUG", False)
ALLOWED_HOSTS = env_list("SINKADMIN_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("SINKADMIN_CSRF_TRUSTED_ORIGINS", [])
SECURE_COOKIES = env_bool("SINKADMIN_SECURE_COOKIES", False)
# /metrics: a bearer token if set, else HTTP basic auth of a user, unless public (connectors.metrics).
METRICS_TOKEN = env_str("SINKADMIN_METRICS_TOKEN", "")
METRICS_PUBLIC = env_bool("SINKADMIN_METRICS_PUBLIC", False)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "connectors",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "sinkadmin.urls"
WSGI_APPLICATION = "sinkadmin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _local_database_url() -> str:
    """The database scripts/start-services creates on this machine: the role sinkadmin over TCP, with the
    password it generated into ~/.config/sinkadmin/postgres.password."""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    password_file = config_home / "sinkadmin" / "postgres.password"
    password = password_file.read_text().strip() if password_file.exists() else ""
    return (
        f"postgres://sinkadmin:{password}@127.0.0.1:5432/sinkadmin"
        if password
        else "postgres://sinkadmin@127.0.0.1:5432/sinkadmin"
    )


DATABASE_URL = env_url("DATABASE_URL", _local_database_url(), schemes={"postgres", "postgresql", "pgsql"})
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
except ValueError as exc:
    raise SettingError(f"DATABASE_URL is malformed: {exc}") from None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise warns about a missing root at every start; collectstatic fills it.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "connector-list"
LOGOUT_REDIRECT_URL = "login"

# --- the data plane -------------------------------------------------------

REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", schemes={"redis", "rediss", "unix"})

# When KAFKA_BOOTSTRAP_SERVERS is unset, `make run` and the tests start the
# embedded Apache Kafka broker (sinkadmin.kafka_broker) on this port, its
# controller on the next one, its log under var/kafka.
KAFKA_EMBEDDED_PORT = env_int("SINKADMIN_KAFKA_PORT", 9092, minimum=1, maximum=65535)
KAFKA_EMBEDDED_CONTROLLER_PORT = env_int(
    "SINKADMIN_KAFKA_CONTROLLER_PORT", KAFKA_EMBEDDED_PORT + 1, minimum=1, maximum=65535
)
KAFKA_EMBEDDED_DIR = VAR_DIR / "kafka"
KAFKA_EMBEDDED = env_str("KAFKA_BOOTSTRAP_SERVERS", "") == ""
KAFKA_BOOTSTRAP_SERVERS = env_bootstrap_servers("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{KAFKA_EMBEDDED_PORT}")

# Spark: SPARK_REMOTE (a Spark Connect endpoint) wins; else SPARK_MASTER runs
# an in-process session per worker process; else the host's local Spark
# Connect server that `make run` starts on SINKADMIN_SPARK_CONNECT_PORT.
SPARK_CONNECT_PORT = env_int("SINKADMIN_SPARK_CONNECT_PORT", 15002, minimum=1, maximum=65535)
# Seconds PostgreSQL keeps an idle connection of Spark's JDBC catalog before it closes it (sinks.iceberg.tables
# .spark_catalog_conf); 0: never, for PostgreSQL before 14 or a pooler that refuses a connection's options.
SPARK_CATALOG_IDLE_TIMEOUT_SECONDS = env_int("SINKADMIN_SPARK_CATALOG_IDLE_TIMEOUT", 30, minimum=0)
SPARK_MASTER = env_str("SPARK_MASTER", "")
SPARK_REMOTE = env_str("SPARK_REMOTE", "" if SPARK_MASTER else f"sc://127.0.0.1:{SPARK_CONNECT_PORT}")
if SPARK_REMOTE and not SPARK_REMOTE.startswith("sc://"):
    raise SettingError(f"SPARK_REMOTE={SPARK_REMOTE!r} must be a Spark Connect URL (sc://host:port)")
SPARK_LOCAL_CONNECT = env_str("SPARK_REMOTE", "") == "" and not SPARK_MASTER
# Python workers of a Spark on this machine fork from a daemon that has the
# decoder's libraries imported (sinkadmin/spark_daemon); false: Spark's own.
SPARK_PRELOAD_PYTHON = env_bool("SINKADMIN_SPARK_PRELOAD_PYTHON", True)

LAKE_WAREHOUSE = env_str("LAKE_WAREHOUSE", str(VAR_DIR / "warehouse"))
STAGING_DIR = Path(env_str("SINKADMIN_STAGING_DIR", str(VAR_DIR / "staging")))
# Upsert commits into Iceberg keep each live data file's text keys indexed here (sinks.iceberg.key_index), on
# each machine their lookups run on, up to this many MiB; 0: none (each commit reads the identifier columns).
KEY_INDEX_DIR = env_str("SINKADMIN_KEY_INDEX_DIR", str(VAR_DIR / "key-index"))
KEY_INDEX_MB = env_int("SINKADMIN_KEY_INDEX_MB", 2048, minimum=0)

# --- Celery -----------------------------------------------------------------

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A pool process reports itself up within this many seconds or Celery kills it (its default, 4 s). Forked
# with the product's imports on a loaded two-core machine (forty runners starting at once), processes took
# longer, and each one killed took the runner it was to host with it until the supervisor's next round.
CELERY_WORKER_PROC_ALIVE_TIMEOUT = 30.0
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
SUPERVISOR_INTERVAL_SECONDS = env_int("SINKADMIN_SUPERVISOR_INTERVAL", 5, minimum=1)
HEARTBEAT_TIMEOUT_SECONDS = env_int("SINKADMIN_HEARTBEAT_TIMEOUT", 30, minimum=2)

# --- REST API -----------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "sinkadmin Kafka Connect REST API",
    "DESCRIPTION": "Kafka Connect compatible REST API for sinkadmin connectors.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from the installed package, not a CDN: the docs page works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # A password inside a URI (a catalog's, in a library's error) never reaches a log.
    "filters": {"redact_credentials": {"()": "connectors.config.secrets.RedactCredentials"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_credentials"]}
    },
    "root": {"handlers": ["console"], "level": env_str("SINKADMIN_LOG_LEVEL", "INFO")},
    "loggers": {"py4j": {"level": "WARNING"}, "kafka": {"level": "WARNING"}},
}
