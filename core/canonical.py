import hashlib
import json


def canonical_json(value) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8. `1` and `true` stay distinct."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(value) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
