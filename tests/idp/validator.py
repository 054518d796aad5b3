from oauth2_provider.oauth2_validators import OAuth2Validator


class GroupsValidator(OAuth2Validator):
    """The standard claims, plus `groups` for the `groups` scope."""

    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "groups"}

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "name": user.get_full_name() or user.username,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
