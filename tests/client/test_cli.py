"""The `takeover` CLI, every command, against a live server (real HTTP, worker, downstream)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from takeover_client import Takeover, Unauthenticated
from takeover_client.cli import main

from .conftest import event, ticket

pytestmark = pytest.mark.worker


@pytest.fixture
def cli(w, live_server):
    runner = CliRunner()

    def run(persona, *args, code=0):
        env = {"TAKEOVER_URL": live_server.url, "TAKEOVER_TOKEN": getattr(w, persona).token}
        result = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result

    def as_json(persona, *args):
        return json.loads(run(persona, *args, "--json").output)

    run.json = as_json
    return run


@pytest.fixture
def needs_human(w, agent):
    target = ticket()
    w.downstream.seed(target, {"status": "new"})
    w.downstream.fault("error_before_commit", prefix="tickets", target=target)
    with agent.start_run("webhook", {}, event_id=event()) as run:
        outcome = run.propose("update_ticket", target, {"status": "open"})
        w.wait_action(outcome.id)
    return outcome.id, target


def test_queue_show_recheck_resolve(cli, needs_human, w):
    action_id, target = needs_human
    listed = cli.json("oncall", "queue", "--state", "needs_human")
    assert [a["id"] for a in listed] == [action_id]
    table = cli("oncall", "queue", "--state", "needs_human").output
    assert table.splitlines()[0].split() == ["ID", "STATE", "WHY", "TOOL", "TARGET", "AGE"]
    assert action_id in table and "needs_human" in table

    shown = cli("oncall", "show", action_id).output
    assert f"update_ticket on {target!r}" in shown
    assert '≠ status: wanted "open", found "new"' in shown
    assert cli.json("oncall", "show", action_id)["state"] == "needs_human"

    w.downstream.external_write(target, {"status": "open"})  # someone fixed it by hand
    rechecked = cli.json("oncall", "recheck", action_id)
    assert rechecked["reconciliations"][-1]["verdict"] in {"match", "moved_on"}

    cli("oncall", "resolve", action_id, "--reason", "x", code=2)  # neither flag
    done = cli("oncall", "resolve", action_id, "--succeeded", "--reason", "fixed by hand")
    assert "succeeded" in done.output and "resolved_by_operator" in done.output
    again = cli("oncall", "resolve", action_id, "--failed", "--reason", "oops", code=1)
    assert "409 state-conflict" in again.output
    assert cli.json("oncall", "queue", "--state", "needs_human") == []


def test_approvals_grant_and_deny(cli, w, agent):
    with agent.start_run("chat", {}, event_id=event()) as run:
        first = run.propose("close_ticket", ticket(), {"status": "closed"})
        second = run.propose("close_ticket", ticket(), {"status": "closed"})
        pending = cli.json("approver", "approvals")
        assert {r["action"] for r in pending} == {first.id, second.id}
        assert "close_ticket" in cli("approver", "approvals").output
        request = {r["action"]: r["id"] for r in pending}
        granted = cli("approver", "grant", request[first.id], "--ttl", "600").output
        assert "granted" in granted
        cli("approver", "deny", request[second.id], code=2)  # --reason is required
        assert "denied" in cli("approver", "deny", request[second.id], "--reason", "no").output
        assert first.wait(30).state == "succeeded"
        assert second.refresh().state == "blocked"
    assert cli.json("approver", "approvals") == []
    cli("agent", "approvals", code=1)  # a principal is not an approver: 403


def test_runs_replay_ledger_and_audit(cli, w, agent):
    target = ticket()
    run = agent.start_run("webhook", {}, event_id=event())
    with pytest.raises(RuntimeError), run:
        run.propose("update_ticket", target, {"status": "open"}).wait(30)
        raise RuntimeError("boom")
    rows = cli.json("admin", "runs", "--status", "error")
    assert [r["id"] for r in rows] == [run.id]
    assert run.id in cli("admin", "runs").output

    refused = cli("admin", "replay", run.id, code=1)
    assert "409 replay-refused" in refused.output and "update_ticket" in refused.output
    # The server's rule, in the server's words: a force needs a reason.
    no_reason = cli("admin", "replay", run.id, "--force", code=1)
    assert "400 validation-error" in no_reason.output
    assert "A forced replay needs a reason." in no_reason.output
    replayed = cli("admin", "replay", run.id, "--force", "--reason", "tool is idempotent")
    assert f"a replay of {run.id}" in replayed.output

    key = run.key("update_ticket", target)
    [entry] = cli.json("admin", "ledger", "--key", key)
    assert entry["status"] == "applied"
    assert key in cli("admin", "ledger", "--tool", "update_ticket").output

    events = cli.json("admin", "audit", "--verb", "force_replay", "--since", "10m")
    assert [e["object_id"] for e in events if e["reason"] == "tool is idempotent"] == [run.id]
    assert cli.json("admin", "audit", "--object", run.id, "--since", "2000-01-01T00:00:00")
    assert cli.json("admin", "audit", "--object", run.id, "--since", "2999-01-01") == []
    assert "run.replay" in cli("admin", "audit", "--verb", "run.").output
    cli("admin", "audit", "--since", "yesterday", code=2)


def test_the_installed_command_runs_and_reports_errors(w, live_server):
    command = shutil.which("takeover", path=str(Path(sys.executable).parent))
    env = {"TAKEOVER_URL": live_server.url, "TAKEOVER_TOKEN": "wrong", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([command, "queue"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "revoked token" in done.stderr
    env["TAKEOVER_TOKEN"] = w.oncall.token
    done = subprocess.run([command, "queue", "--json"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and json.loads(done.stdout) == []
    env.update(TAKEOVER_URL="http://127.0.0.1:9", TAKEOVER_RETRY_FOR="1")
    done = subprocess.run([command, "queue"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "unavailable" in done.stderr


def test_tokens_issue_your_own_list_and_revoke(cli, w, live_server):
    issued = cli.json("oncall", "tokens", "issue", "--name", "laptop", "--expires-in", "2h")
    assert issued["name"] == "laptop" and issued["owner"]["name"] == w.oncall.username
    assert issued["token"] and issued["state"] == "active"
    shown = cli("oncall", "tokens", "issue", "--name", "script").output
    assert "Shown once" in shown

    with Takeover(live_server.url, issued["token"]) as own:  # the new token works
        assert own.me().name == w.oncall.username
    mine = cli.json("oncall", "tokens", "list")
    assert issued["id"] in {t["id"] for t in mine}
    assert all(t["owner"]["name"] == w.oncall.username for t in mine)
    assert "token" not in mine[0]  # never shown again
    assert issued["id"] in {t["id"] for t in cli.json("admin", "tokens", "list")}

    revoked = cli.json("oncall", "tokens", "revoke", issued["id"], "--reason", "laptop lost")
    assert revoked["state"] == "revoked"
    with Takeover(live_server.url, issued["token"]) as own, pytest.raises(Unauthenticated):
        own.me()
    cli("oncall", "tokens", "issue", "--expires-in", "soon", code=2)
