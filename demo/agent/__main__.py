"""`python -m demo.agent`: the demo agent, until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from takeover_client import (
    Takeover,
    Unauthenticated,
)

from .runner import Agent
from .world import WAIT_SECONDS, World, log


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m demo.agent",
        description="A demo agent runtime on takeover_client (Takeover's HTTP API v1).",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Takeover's base URL")
    parser.add_argument(
        "--token-file",
        type=Path,
        default=Path("var/demo-agent.token"),
        help="a file holding the principal's API token",
    )
    parser.add_argument(
        "--downstream",
        default=f"http://127.0.0.1:{os.environ.get('DOWNSTREAM_PORT', '8100')}",
        help="the demo downstream, whose control API plays the rest of the world",
    )
    args = parser.parse_args(argv)
    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        sys.exit(f"demo agent: cannot read the token file: {exc}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The client's retries (a 503 with Retry-After, a refused connection) are worth seeing.
    retries = logging.StreamHandler(sys.stdout)
    retries.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logging.getLogger("takeover_client").addHandler(retries)
    logging.getLogger("takeover_client").setLevel(logging.INFO)
    # A minute of retries rides out a restart of the web process or a database blip without
    # losing the run in hand.
    client = Takeover(args.url, token, retry_for=60, timeout=WAIT_SECONDS + 25)
    world = World(args.downstream)
    world.try_around_takeover()
    agent = Agent(client, world, stop)
    try:
        agent.loop()
    except Unauthenticated as exc:
        log(f"demo agent: the API refused the token (401): {exc.detail}")
        sys.exit(2)
    finally:
        client.close()
    log("demo agent stopped")


if __name__ == "__main__":
    main()
