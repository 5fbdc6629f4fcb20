"""The deployment files say what docs/security.md promises (Docker is not run here: these read
the files). Only the API is published; every secret comes from a file; the image runs as a
non-root user from a pinned base, installs from the hashed lock, and has a health check."""

from __future__ import annotations

import re

import yaml

from billing.config import REPO_ROOT

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()


def test_compose_publishes_only_the_api():
    published = {name: svc.get("ports") for name, svc in COMPOSE["services"].items() if svc.get("ports")}
    assert published == {"api": ["8080:8080"]}


def test_compose_has_no_secret_in_clear_and_every_secret_file_exists_in_make_secrets():
    script = (REPO_ROOT / "deploy" / "make-secrets.sh").read_text()
    for name, svc in COMPOSE["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|_URL", key) and key not in ("BILLING_GATEWAY_URL",):
                assert key.endswith("_FILE") and str(value).startswith("/run/secrets/"), (name, key, value)
    for secret, spec in COMPOSE["secrets"].items():
        assert spec["file"].startswith("./deploy/secrets/")
        assert secret in script, f"deploy/make-secrets.sh does not make {secret}"
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    assert "change-me" not in text and "POSTGRES_PASSWORD:" not in text
    assert "scram-sha-256" in text and "SCRAM-SHA-512" in text and "--aclfile" in text


def test_each_process_has_its_own_database_login():
    env = {name: svc.get("environment") or {} for name, svc in COMPOSE["services"].items()}
    assert env["api"]["BILLING_DATABASE_URL_FILE"] != env["worker"]["BILLING_DATABASE_URL_FILE"]
    assert "pg_superuser_url" not in (COMPOSE["services"]["api"].get("secrets") or [])
    assert "pg_superuser_url" not in (COMPOSE["services"]["worker"].get("secrets") or [])


def test_image_is_pinned_non_root_hashed_and_checked():
    bases = re.findall(r"^FROM\s+(\S+)", DOCKERFILE, re.MULTILINE)
    assert bases and all(re.match(r"python:\d+\.\d+\.\d+-slim-\w+", b) for b in bases), bases
    assert re.search(r"^USER\s+10001", DOCKERFILE, re.MULTILINE)
    assert "--require-hashes" in DOCKERFILE and "requirements/runtime.lock" in DOCKERFILE
    assert "HEALTHCHECK" in DOCKERFILE
    # the invoice PDFs' fonts, Chinese included (billing.invoices.documents.CJK_FONT), versions pinned
    assert re.search(r"fonts-wqy-microhei=\S+", DOCKERFILE) and re.search(r"fonts-dejavu-core=\S+", DOCKERFILE)
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "deploy/secrets", ".env"} <= set(ignored)
