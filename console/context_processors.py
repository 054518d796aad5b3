def scope(request):
    """The signed-in operator's scope (current tenant, roles, memberships) for every page.

    Set by the console views' `operator_required`; None on the sign-in page and on error
    pages raised before it ran.
    """
    return {"scope": getattr(request, "scope", None)}
