"""A small OpenID Connect provider for the sign-in tests: django-oauth-toolkit, as a company's
identity provider would run it (authorization code with PKCE, RS256-signed ID tokens, a
userinfo endpoint, a groups claim). Its own process, its own PostgreSQL database
(IDP_DATABASE_URL), its own cookies; started by tests/console/test_sso.py through
`python -m tests.idp.serve`."""

import os
from pathlib import Path

import dj_database_url

SECRET_KEY = "idp-test-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.idp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": dj_database_url.parse(os.environ["IDP_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# Its own cookie names as well as its own host name (localhost, the console is 127.0.0.1).
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
LOGIN_URL = "/accounts/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ.get("IDP_RSA_PRIVATE_KEY", ""),
    "PKCE_REQUIRED": True,
    "SCOPES": {
        "openid": "Sign in",
        "profile": "Your name and user name",
        "email": "Your e-mail address",
        "groups": "Your groups",
    },
    "OAUTH2_VALIDATOR_CLASS": "tests.idp.validator.GroupsValidator",
}
