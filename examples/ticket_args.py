"""The command line both examples share: which chat message (the trigger) about which ticket,
the tool the agent calls, and how many times the message is delivered."""

import argparse


def parser(resume_help: str) -> argparse.ArgumentParser:
    """The shared arguments; each example adds where it keeps a paused agent's state."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--event", help="the chat message's id (the trigger)")
    parser.add_argument("--ticket")
    parser.add_argument(
        "--tool", default="update_ticket", choices=["update_ticket", "close_ticket"]
    )
    parser.add_argument(
        "--deliveries",
        type=int,
        default=1,
        help="deliver the same message this many times (at-least-once delivery): every "
        "delivery after the first is answered from Takeover's ledger",
    )
    parser.add_argument("--resume", metavar="RUN", help=resume_help)
    return parser
