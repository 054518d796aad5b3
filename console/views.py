from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from core.models import Membership
from runs.models import Action
from runs.states import OPEN_FOR_HUMANS


@login_required
def queue(request):
    tenants = Membership.objects.filter(user=request.user).values_list("tenant", flat=True)
    actions = (
        Action.objects.filter(tenant__in=tenants, state__in=OPEN_FOR_HUMANS)
        .select_related("tool", "tenant")
        .order_by("created_at")[:100]
    )
    return render(request, "console/queue.html", {"actions": actions})
