"""The worked example of docs/design.md ("Signed tool calls") is what the code computes."""

import hashlib
import re
from pathlib import Path

from takeover_client import signing

DOC = (Path(__file__).parents[2] / "docs" / "design.md").read_text()
SECRET = "tks_5bV0mZx2ExampleOnlyDoNotUse"
ACTION = "3f0c9a52-7a5e-4c1e-9d55-0c1f3b8f2a10"
KEY = "evt-981:refund:order/1042"
BODY = (
    b'{"action_id":"3f0c9a52-7a5e-4c1e-9d55-0c1f3b8f2a10","tenant":"acme",'
    b'"principal":"support-bot","tool":"refund","target":"order/1042",'
    b'"desired_state":{"refunded":true},"expected_version":null}'
)


def test_the_documented_signatures_are_the_computed_ones():
    assert BODY.decode() in DOC
    assert hashlib.sha256(BODY).hexdigest() in DOC
    apply = signing.sign(
        SECRET,
        method="POST",
        path="/billing/effects",
        body=BODY,
        action_id=ACTION,
        key=KEY,
        timestamp=1767225600,
    )
    lookup_path = "/billing/effects/" + signing.segment(KEY)
    lookup = signing.sign(
        SECRET, method="GET", path=lookup_path, action_id=ACTION, key=KEY, timestamp=1767225600
    )
    assert f"Takeover-Signature: {apply}" in DOC
    assert lookup in DOC and lookup_path in DOC
    signed = signing.signed_string(
        timestamp=1767225600,
        method="POST",
        path="/billing/effects",
        body=BODY,
        action_id=ACTION,
        key=KEY,
    ).decode()
    assert signed in re.sub(r"```\n?", "", DOC)
