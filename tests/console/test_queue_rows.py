"""The queue's rows, written in Python (console/queue_rows.py): the same bytes the page's
template wrote for them, every value escaped."""

import itertools

import pytest
from django.template import Context, Template

from console import queue_rows
from tests.builders import make_world
from tests.console.conftest import make_blocked
from tests.console.test_queue import signed_in

# The rows as queue.html had them, in the template engine's `{% for %}`: the reference the
# Python rows must match byte for byte.
TEMPLATE_ROWS = Template("""{% for a in rows %}
      <tr id="row-{{ a.pk }}" data-action="{{ a.pk }}" data-state="{{ a.state }}">
        {% if oncall %}<td class="col-pick"><input type="checkbox" name="id" value="{{ a.pk }}" form="bulk-form" id="pick-{{ a.pk }}" aria-label="Select {{ a.tool }} on {{ a.target }}"></td>{% endif %}
        <td class="col-age nowrap"><time datetime="{{ a.at }}" title="{{ a.at_title }} {{ tz_name }}" data-age-from="{{ a.at }}">{{ a.age }}</time></td>
        <td class="col-state"><span class="pill pill-{{ a.state }}">{{ a.state_label }}</span></td>
        <td><code>{{ a.tool }}</code></td>
        <td class="col-target"><a id="open-{{ a.pk }}" href="{{ a.url }}" data-shortcut-row>{{ a.target }}</a></td>
        <td class="col-why">{{ a.why }}</td>
        <td>{{ a.principal }}</td>
        {% if multi_tenant %}<td>{{ a.tenant }}</td>{% endif %}
        <td>{% if a.claimed_by %}<span class="claim">{{ a.claimed_by }}</span>{% else %}<span class="muted">—</span>{% endif %}</td>
      </tr>
    {% endfor %}""")  # noqa: E501 -- the template's lines, as they were

HOSTILE = "<script>alert(\"x\" & 'y')</script> {pk} {{ a.pk }} %s é —"


def row(n, **cells):
    pk = f"0000000{n}-1111-2222-3333-444444444444"
    return {
        "pk": pk,
        "state": "needs_human",
        "state_label": "needs human",
        "tool": "close_ticket",
        "target": f"T-{n}",
        "why": "the authoritative state differs: status",
        "principal": "agent-1",
        "tenant": "acme",
        "claimed_by": "",
        "at": "2026-12-02T08:00:00+01:00",
        "at_title": "2026-12-02 08:00:00",
        "age": "3 h 5 min",
        "url": f"/actions/{pk}/",
    } | cells


ROWS = [
    row(1),
    row(2, claimed_by="oncall-ann"),
    row(3, **{key: HOSTILE for key in row(3)}),  # every cell, the id and the link included
    row(4, state="blocked", state_label="blocked", why="approval_not_found", claimed_by="0"),
]


@pytest.mark.parametrize(
    ("oncall", "multi_tenant"), list(itertools.product([True, False], repeat=2))
)
def test_rows_are_the_bytes_the_template_wrote(oncall, multi_tenant):
    for tz_name in ("Europe/Paris", HOSTILE):
        context = {"oncall": oncall, "multi_tenant": multi_tenant, "tz_name": tz_name}
        expected = TEMPLATE_ROWS.render(Context({"rows": ROWS, **context}))
        assert queue_rows.html(ROWS, **context) == expected


def test_every_value_is_escaped_once():
    html = queue_rows.html(ROWS, oncall=True, multi_tenant=True, tz_name="UTC")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot; &amp; &#x27;y&#x27;)&lt;/script&gt;" in html
    assert "&amp;lt;" not in html  # not twice
    assert "{pk} {{ a.pk }} %s" in html  # a value is printed, never read as a placeholder


def test_no_rows_write_nothing():
    assert queue_rows.html([], oncall=True, multi_tenant=False, tz_name="UTC") == ""


def test_a_hostile_target_comes_out_escaped_on_the_page(live_db, downstream):
    world = make_world(downstream)
    action = make_blocked(world, target='<script>alert("pwned")</script>@example.com')
    page = signed_in(world.oncall).get("/").content.decode()
    assert f'data-action="{action.pk}"' in page
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;@example.com</a>" in page
    assert 'aria-label="Select send_email on &lt;script&gt;alert(&quot;pwned&quot;)' in page


@pytest.mark.parametrize("value", ["", "tool_3", HOSTILE, "not offered"])
def test_the_filters_selects_are_the_bytes_of_djangos_select(value):
    from django import forms

    from console.forms import ListSelect

    choices = [("", "All tools"), ("tool_3", "tool_3"), (HOSTILE, HOSTILE), ("7d", "Older")]
    attrs = {"id": "id_tool", "class": "wide", "required": True, "disabled": False}
    django_select = forms.Select(choices=choices).render("tool", value, attrs)
    assert ListSelect(choices=choices).render("tool", value, attrs) == django_select
