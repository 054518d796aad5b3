from rest_framework import exceptions, permissions


class IsAuthenticatedCaller(permissions.BasePermission):
    """Every API view needs a caller; views narrow it with `require_*` below."""

    def has_permission(self, request, view):
        if request.user is None:
            raise exceptions.NotAuthenticated("Send 'Authorization: Bearer <token>'.")
        return True


def require_principal(request):
    if not request.user.is_principal:
        raise exceptions.PermissionDenied("Only an agent principal may do this.")
    return request.user.principal


def require_operator(request, role: str | None = None):
    caller = request.user
    if caller.is_principal:
        raise exceptions.PermissionDenied("Only an operator may do this.")
    if role and not caller.has_role(role):
        raise exceptions.PermissionDenied(f"This needs the {role} role in {caller.tenant.slug}.")
    return caller
