def scope(request):
    """The signed-in operator's current tenant and role, for every page."""
    return {"scope": getattr(request, "scope", None)}
