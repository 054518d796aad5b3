"""Where the request id comes from (the worker side: test_worker_observability.py)."""


def test_a_callers_traceparent_carries_on_as_the_request_id(world):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = world.agent.client().get(
        "/api/v1/me", HTTP_TRACEPARENT=f"00-{trace_id}-00f067aa0ba902b7-01"
    )
    assert response["X-Request-ID"] == trace_id
    # Malformed or all-zero: a fresh id instead.
    for bad in ["00-zz-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01"]:
        other = world.agent.client().get("/api/v1/me", HTTP_TRACEPARENT=bad)
        assert len(other["X-Request-ID"]) == 32 and other["X-Request-ID"] != trace_id
