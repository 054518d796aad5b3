"""`python -m tests.idp.serve --redirect-uri URL`: migrate the provider's database, create
its users, groups and the console's client, print "idp listening on http://localhost:PORT",
and serve until terminated.

Users (password USER_PASSWORD): `olivia` in group `takeover-oncall`, `nora` in `marketing`
only. The client: `takeover-console`, confidential, authorization code, RS256, no consent
screen (a company's own application)."""

import argparse
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.idp.settings")

USERS = {"olivia": ["takeover-oncall"], "nora": ["marketing"]}
USER_PASSWORD = "acme-password"
CLIENT_ID = "takeover-console"
CLIENT_SECRET = "takeover-console-secret"


def _rsa_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redirect-uri", required=True)
    args = parser.parse_args()
    os.environ.setdefault("IDP_RSA_PRIVATE_KEY", _rsa_key())

    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0, interactive=False)
    for username, groups in USERS.items():
        user = User.objects.create_user(
            username, email=f"{username}@acme.example", password=USER_PASSWORD
        )
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
    Application.objects.create(
        name="Takeover console",
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=args.redirect_uri,
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )

    class Quiet(WSGIRequestHandler):
        def log_message(self, format, *args):
            pass

    server = ThreadedWSGIServer(("localhost", 0), Quiet)
    server.set_app(get_wsgi_application())
    print(f"idp listening on http://localhost:{server.server_port}", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
