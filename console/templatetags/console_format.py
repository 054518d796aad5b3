"""Formatting for people, declared once: the console's templates use these as filters
(`{% load console_format %}`: `|age`, `|age_until`, `|json_pretty`, `|json_compact`), and the
few Python callers (CSV cells, diff rows) call the same functions."""

import json

from django import template
from django.utils import timezone

register = template.Library()


def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def compact_json(value) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def age_label(at, now=None) -> str:
    """A compact age for dense tables: 42 s, 12 min, 3 h 5 min, 2 d 4 h."""
    seconds = max(int(((now or timezone.now()) - at).total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter(name="age")
def age(at) -> str:
    """How long ago: `{{ action.created_at|age }}`."""
    return age_label(at) if at else ""


@register.filter(name="age_until")
def age_until(at) -> str:
    """How long from now: `{{ request.expires_at|age_until }}`."""
    return age_label(timezone.now(), at) if at else ""


register.filter("json_pretty", pretty_json)
register.filter("json_compact", compact_json)
