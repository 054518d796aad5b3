"""gunicorn configuration for Takeover:
`gunicorn -c python:takeover.gunicorn_conf takeover.wsgi`.

gunicorn answers some malformed requests itself, before Django sees them: a request line
over `limit_request_line` (414), headers over `limit_request_field_size` or too many of
them (431), an unparseable request (400). Its built-in answer is an HTML page, and gunicorn
has no setting for that page; this module replaces the one function that writes it, so
those answers are RFC 9457 problem+json like every other error of the API (docs/design.md,
"The API's conventions").
"""

import json

from gunicorn import util

SLUGS = {403: "permission-denied", 500: "internal-error"}


def write_problem(sock, status_int, reason, mesg):
    body = json.dumps(
        {
            "type": f"/problems/{SLUGS.get(status_int, 'validation-error')}",
            "title": reason,
            "status": status_int,
            "detail": mesg or reason,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/problem+json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin1") + body)


# gunicorn's workers call util.write_error by module attribute, so this takes effect in
# every worker forked from a master that read this configuration.
util.write_error = write_problem


def post_worker_init(worker):
    """Everything loaded by now (Django, the apps, the URL conf) lives as long as the
    process: `gc.freeze()` takes it out of the cyclic collector's scans, and a larger first
    generation makes collections rarer (a request allocates thousands of objects, almost
    none of them in cycles)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
