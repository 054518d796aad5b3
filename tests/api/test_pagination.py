"""Lists are {"results", "next"}, newest first, paged by an opaque keyset cursor."""

from ..conftest import problem


def test_runs_page_by_cursor_newest_first_without_overlap(world):
    started = [world.start_run()["id"] for _ in range(60)]
    client = world.agent.client()
    first = client.get("/api/v1/runs").json()
    assert len(first["results"]) == 50 and first["next"]
    second = client.get(f"/api/v1/runs?cursor={first['next']}").json()
    assert second["next"] is None
    seen = [r["id"] for r in first["results"] + second["results"]]
    assert seen == list(reversed(started))


def test_a_cursor_we_did_not_issue_is_a_400_naming_it(world):
    response = world.agent.client().get("/api/v1/runs?cursor=not-a-cursor")
    assert response.status_code == 400
    assert "cursor" in problem(response)["errors"]
