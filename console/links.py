"""The console's page for what a notification is about: notifications name a subject
(an action, an approval request, a run, a channel), and the console, which owns its URLs,
gives the link (`notifications.links`)."""

from django.urls import reverse


def subject_path(subject_type: str, subject_id) -> str:
    if subject_type == "action":
        return reverse("console:action", args=[subject_id])
    if subject_type == "approvalrequest":
        return reverse("console:approvals") + f"#request-{subject_id}"
    if subject_type == "run":
        return reverse("console:run", args=[subject_id])
    if subject_type == "channel":
        return reverse("console:notifications")
    return ""
