import io
import json
import logging

import pytest

from core.logs import ContextFilter, JsonFormatter


@pytest.fixture
def json_log():
    """The access log as LOG_FORMAT=json writes it (same formatter, same filter)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    )
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("takeover.access")
    logger.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
