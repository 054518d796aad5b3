"""The console shows what tools declare: the declarations on the action page,
the tool's lookup answer in the timeline, resends numbered as attempts, and, in the replay
panel, which tools are safe to repeat and why."""

from runs import runtime
from tests.conftest import make_world
from tests.console.conftest import (
    agent_of,
    declared_tool,
    make_needs_human,
    make_resent,
    make_settled_by_lookup,
    propose,
    start_run,
    tool,
    wait_state,
)
from tests.console.test_views import signed_in, text


def test_the_action_page_shows_the_declarations_and_the_lookup_answer(live_db, downstream):
    world = make_world(downstream)
    action = make_settled_by_lookup(world)
    page = text(signed_in(world.oncall).get(f"/actions/{action.pk}/"))
    assert 'id="declarations"' in page
    assert "pill-effect-idempotent" in page and "pill-effect-lookup" in page
    assert "Applies one Idempotency-Key at most once" in page
    assert "Declared by system:tests" in page
    assert 'id="lookup-answer"' in page
    assert f'the tool reports it applied key <code class="wrap">{action.idempotency_key}' in page
    assert "Lookup of the key: the tool reports it applied the key" in page
    assert "asked because the tool declares lookup: true" in page
    assert "resolution: reconciled" in page


def test_resends_are_numbered_attempts_with_the_declaration_that_allowed_them(live_db, downstream):
    world = make_world(downstream)
    action = make_resent(world)
    page = text(signed_in(world.oncall).get(f"/actions/{action.pk}/"))
    assert "Dispatch attempt 1: unknown" in page
    assert "Dispatch attempt 2 (resend, same key): applied" in page
    assert "Claimed for a resend (attempt 2, same key)" in page
    assert "allowed by the declaration: idempotent, lookup (declared by system:tests)" in page
    assert "Lookup of the key: the tool reports it never received the key" in page
    assert "Sent again 1 time with the same key" in page


def test_an_unsafe_tool_says_it_is_never_sent_again(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    page = text(signed_in(world.oncall).get(f"/actions/{action.pk}/"))
    assert "pill-effect-unsafe" in page
    assert "never sent again" in page
    assert 'id="lookup-answer"' not in page


def test_the_replay_panel_says_which_tools_are_safe_and_why(live_db, downstream):
    world = make_world(downstream)
    run = start_run(world)
    email = make_settled_by_lookup(world, run=run)
    search = declared_tool(
        world, "search_tickets", prefix="search", effect="read_only", lookup=False
    )
    read = propose(world, run, search, "open", {"status": "open"})
    runtime.run_finish(
        run,
        status="error",
        error_message="model timeout",
        tools_called=["notify_customer", "search_tickets"],
        actor=agent_of(world),
    )
    wait_state(read.pk, {"succeeded", "queued", "dispatching"})
    page = text(signed_in(world.admin).get(f"/runs/{run.pk}/"))
    assert email.state == "succeeded"
    assert "Replay allowed." in page
    assert 'id="safe-tools"' in page
    assert "<code>notify_customer</code>" in page and "<code>search_tickets</code>" in page
    assert "it applies an Idempotency-Key at most once" in page
    assert "it has no side effect" in page
    assert "Replay this run" in page

    # One unsafe tool among them: it alone is at risk, and the others still say why not.
    other = start_run(world)
    propose(world, other, tool(world), "T-9", {"status": "open"})
    runtime.run_finish(
        other,
        status="error",
        error_message="x",
        tools_called=["update_ticket", "search_tickets"],
        actor=agent_of(world),
    )
    page = text(signed_in(world.admin).get(f"/runs/{other.pk}/"))
    assert "Before failing, this run called update_ticket. A replay may repeat them." in page
    assert "Tools at risk: <code>update_ticket</code>" in page
    assert '<code>search_tickets</code> <span class="pill pill-effect-read_only">' in page
