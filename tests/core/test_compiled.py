"""A query compiled once per shape runs again with other values, and gives what the ORM
gives; a value the ORM would not bind unchanged is refused when the shape is compiled."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core import compiled
from core.models import Tool
from tests.builders import make_world


def tools_of(tenant_ids, created_before):
    return (
        Tool.objects.filter(tenant_id__in=tenant_ids, created_at__lt=created_before)
        .order_by("tenant__slug", "name")
        .values("tenant_id", "name")
    )


def test_one_shape_compiles_once_and_runs_with_each_call_s_values(live_db, downstream):
    a, b = make_world(downstream), make_world(downstream)
    for world, names in ((a, ["update_ticket", "send_email"]), (b, ["close_ticket"])):
        for name in names:
            world.tool(name)
    later = timezone.now() + timedelta(minutes=1)

    first, for_a = compiled.statement(
        "test-tools", tools_of, tenant_ids=[a.tenant.pk], created_before=later
    )
    again, for_b = compiled.statement(
        "test-tools", tools_of, tenant_ids=[b.tenant.pk], created_before=later
    )
    assert again is first  # the same shape: compiled once
    assert first.dicts(for_a) == list(tools_of([a.tenant.pk], later))
    assert first.dicts(for_b) == list(tools_of([b.tenant.pk], later))
    assert first.dicts(for_a) and first.dicts(for_a) != first.dicts(for_b)
    assert first.dicts({**for_a, "created_before": timezone.now() - timedelta(days=1)}) == []

    both, for_both = compiled.statement(
        "test-tools", tools_of, tenant_ids=[a.tenant.pk, b.tenant.pk], created_before=later
    )
    assert both is not first  # two tenants: another shape
    assert both.dicts(for_both) == list(tools_of([a.tenant.pk, b.tenant.pk], later))


def test_a_value_the_orm_transforms_is_refused_not_kept_as_a_constant(live_db):
    def contains(n):
        return Tool.objects.filter(base_url__contains=str(n))

    with pytest.raises(ValueError, match="not bound as parameters unchanged"):
        compiled.statement("test-contains", contains, n=7)
