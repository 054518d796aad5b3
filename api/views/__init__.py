"""HTTP API v1 (docs/design.md, "The API's conventions"). Thin: validate, find the object
in the caller's scope, call a service, present the result. Another tenant's object is always
a 404. One module per part of the API; `api/urls.py` maps the paths."""
