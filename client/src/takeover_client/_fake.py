"""What `takeover_client.testing.FakeTakeover` keeps: its tools and their records, a scripted
outcome, and the problem+json it answers with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

URL = "http://takeover.fake"
OUTCOMES = ("applied", "rejected", "not_sent", "version_conflict", "reconciled", "needs_human")


def utc_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Problem(Exception):
    def __init__(self, status: int, slug: str, detail: str, errors: dict | None = None):
        super().__init__(detail)
        self.body = {
            "type": f"/problems/{slug}",
            "title": slug.replace("-", " ").capitalize(),
            "status": status,
            "detail": detail,
        }
        if errors:
            self.body["errors"] = errors


@dataclass
class FakeTool:
    name: str
    requires_approval: bool = False
    identity_fields: list[str] = field(default_factory=list)
    effect: str = "unsafe"
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    effects: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Script:
    outcome: str
    times: int
    target: str | None
