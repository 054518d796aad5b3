"""Idempotency keys from stable intent (the README's rule, as a function)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from urllib.parse import quote

MAX_KEY_LENGTH = 255
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


def normalize_target(target: str) -> str:
    """Two spellings of one target are one key: trimmed, Unicode NFC, inner runs of
    whitespace collapsed, and an e-mail address lower-cased (the whole address: mailbox
    providers treat the local part case-insensitively in practice). Other ids keep their
    case: `T-1042` and `t-1042` may well be different records in a case-sensitive system.
    """
    if not isinstance(target, str):
        raise TypeError("target must be a string")
    text = " ".join(unicodedata.normalize("NFC", target).split())
    if _EMAIL.match(text):
        text = text.lower()
    if not text:
        raise ValueError("target is empty")
    return text


def _visible(part: str) -> str:
    # The header allows visible ASCII only: percent-encode anything else, which is
    # deterministic, so the same intent still yields the same key.
    return quote(part, safe="!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def idempotency_key(event_id: str, tool: str, target: str) -> str:
    """`"{event_id}:{tool}:{normalized target}"`.

    - `event_id` is the *trigger's* id: the webhook delivery id, the chat message id, the
      schedule slot (from the trigger, never from the clock when sending). A retry, a
      duplicate delivery or a replay of the run then yields the same key.
    - Never pass generated content (model text, a hash of a body, a random UUID).

    Keys longer than 255 characters keep their first 183 characters and end with the
    SHA-256 of the whole key, so long targets still give distinct, stable keys.
    """
    if not event_id or not str(event_id).strip():
        raise ValueError("event_id is required: the id of the trigger (webhook, message, slot)")
    if not tool:
        raise ValueError("tool is required")
    key = ":".join(_visible(p) for p in (str(event_id).strip(), tool, normalize_target(target)))
    if len(key) > MAX_KEY_LENGTH:
        digest = hashlib.sha256(key.encode()).hexdigest()
        key = f"{key[: MAX_KEY_LENGTH - 72]}~sha256:{digest}"
    return key
