"""Console forms. Validation only; the views call the services."""

from datetime import UTC

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from runs.states import ActionState, RunStatus

from .selectors import AGE_LABELS, FILTER_STATES

TTL_CHOICES = [
    (300, "5 minutes"),
    (900, "15 minutes"),
    (3600, "1 hour"),
    (4 * 3600, "4 hours"),
    (24 * 3600, "24 hours"),
]


class ListSelect(forms.Select):
    """A select of plain options rendered in Python: Django renders each option through a
    template of its own, which for the audit filter's hundred verbs was most of the page's
    time, and the queue's four filters a fifth of its own. The same bytes as Django's
    `Select` (tests/console/test_queue_rows.py compares them); no per-option attributes or
    groups."""

    def render(self, name, value, attrs=None, renderer=None):
        # The markup is a function of these alone, and the queue asks for the same four
        # selects on every view: kept per process (bounded), built on the first ask.
        try:
            key = (
                type(self),
                name,
                tuple(value) if isinstance(value, list | tuple) else value,
                tuple(self.build_attrs(self.attrs, attrs).items()),
                tuple(self.choices),
            )
            hash(key)
        except TypeError:  # grouped choices, an unhashable value: not kept
            return self._render(name, value, attrs)
        found = _RENDERED.get(key)
        if found is None:
            found = self._render(name, value, attrs)
            if len(_RENDERED) >= 512:
                _RENDERED.clear()
            _RENDERED[key] = found
        return found

    def _render(self, name, value, attrs):
        widget = self.get_context(name, value, attrs)["widget"]
        options = format_html_join(
            "",
            '\n  <option value="{}"{}>{}</option>\n',
            (
                (option["value"], SELECTED if option["selected"] else "", option["label"])
                for _group, group_options, _index in widget["optgroups"]
                for option in group_options
            ),
        )
        return format_html(
            '<select name="{}"{}>{}\n</select>', widget["name"], _attributes(widget), options
        )


def _attributes(widget) -> str:
    """The widget's attributes as Django's widget template writes them: in their order (not
    sorted, as `flatatt` does), True as a bare name, False left out."""
    return format_html_join(
        "",
        "{}",
        (
            (format_html(" {}", key) if value is True else format_html(' {}="{}"', key, value),)
            for key, value in widget["attrs"].items()
            if value is not False
        ),
    )


SELECTED = mark_safe(" selected")
_RENDERED: dict = {}  # ListSelect's markup by everything it depends on


def _reason_field(label="Reason", placeholder=""):
    return forms.CharField(
        label=label,
        max_length=2000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "required": True, "placeholder": placeholder}),
        error_messages={"required": "Say why: the reason goes into the audit log."},
    )


def _moment_field(label: str, what: str, example: str):
    """A date and time typed in a `datetime-local` input (seconds and a bare date accepted)."""
    return forms.DateTimeField(
        required=False,
        label=label,
        error_messages={"invalid": f"Give {what} as a date and time, e.g. {example}."},
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"],
    )


class _ScopedFilterForm(forms.Form):
    """A list's filters over the operator's tenants (one, or `*` for all of them) and their
    tools, by age."""

    tenant = forms.ChoiceField(required=False, label="Tenant", widget=ListSelect)
    tool = forms.ChoiceField(required=False, label="Tool", widget=ListSelect)
    age = forms.ChoiceField(
        required=False, label="Age", choices=list(AGE_LABELS.items()), widget=ListSelect
    )

    def __init__(self, data, *, tenants, tools, current_slug):
        super().__init__(data)
        tenant_choices = [(t.slug, t.slug) for t in tenants]
        if len(tenants) > 1:
            tenant_choices.append(("*", "All my tenants"))
        self.fields["tenant"].choices = tenant_choices
        self.fields["tenant"].initial = current_slug
        self.fields["tool"].choices = [("", "All tools")] + [(name, name) for name, _ in tools]
        self.current_slug = current_slug


class QueueFilterForm(_ScopedFilterForm):
    field_order = ["tenant", "tool", "state", "age"]

    state = forms.ChoiceField(
        required=False,
        label="State",
        choices=[("", "All open states")] + [(s, ActionState(s).label) for s in FILTER_STATES],
        widget=ListSelect,
    )


class ResolveForm(forms.Form):
    outcome = forms.ChoiceField(
        choices=[(ActionState.SUCCEEDED, "Succeeded"), (ActionState.FAILED, "Failed")],
        error_messages={"required": "Choose succeeded or failed."},
    )
    reason = _reason_field(placeholder="What you checked, and what you found")
    override_claim = forms.BooleanField(required=False)
    # The read of the authoritative state the operator was looking at (the service refuses
    # a decision on a read that is too old or no longer the latest).
    based_on_read = forms.IntegerField(required=False, min_value=1)


class GrantForm(forms.Form):
    ttl_seconds = forms.TypedChoiceField(
        label="Valid for", choices=TTL_CHOICES, coerce=int, initial=3600
    )


class DenyForm(forms.Form):
    reason = _reason_field(placeholder="Why this must not happen")


class ForceReplayForm(forms.Form):
    reason = _reason_field(placeholder="Why repeating these side effects is acceptable")
    confirm = forms.CharField(label="Type the run id to confirm", max_length=64, strip=True)

    def __init__(self, data=None, *, run):
        super().__init__(data)
        self.run = run

    def clean_confirm(self):
        typed = self.cleaned_data["confirm"].lower()
        full = str(self.run.pk)
        # The full id, or the short id the console shows everywhere: friction, not secrecy.
        if typed not in {full, full[:8]}:
            raise forms.ValidationError(
                f"That is not this run's id. Type {full[:8]} (or the full id) to confirm."
            )
        return typed


class ActionFilterForm(_ScopedFilterForm):
    """All actions: any state, tool, principal, age and tenant (choices from the scope)."""

    field_order = ["tenant", "state", "tool", "principal", "age"]

    state = forms.ChoiceField(
        required=False,
        label="State",
        choices=[("", "Any state")] + [(s, ActionState(s).label) for s in ActionState.values],
        widget=ListSelect,
    )
    principal = forms.ChoiceField(required=False, label="Principal", widget=ListSelect)

    def __init__(self, data, *, tenants, tools, principals, current_slug):
        super().__init__(data, tenants=tenants, tools=tools, current_slug=current_slug)
        self.fields["principal"].choices = [("", "All principals")] + [(n, n) for n in principals]


class RunFilterForm(forms.Form):
    status = forms.ChoiceField(
        required=False,
        choices=[("", "Any status")] + [(s, RunStatus(s).label) for s in RunStatus.values],
    )


class AuditFilterForm(forms.Form):
    """Actors and verbs are picked from lists (the tenant's operators and principals, the
    system's actors; every verb Takeover writes, and each family as a prefix), not typed.
    A value from a link that is not in the list (an operator since removed) is still
    accepted when well-formed."""

    actor = forms.ChoiceField(required=False, label="Actor", widget=ListSelect)
    verb = forms.ChoiceField(required=False, label="Verb", widget=ListSelect)
    object = forms.CharField(
        required=False,
        max_length=64,
        label="Object id",
        widget=forms.TextInput(attrs={"placeholder": "uuid"}),
    )
    since = _moment_field("From (UTC)", "the start", "2026-11-30 09:00")
    until = _moment_field("To (UTC)", "the end", "2026-11-30 18:00")

    def __init__(self, data=None, *, actors=(), verbs=()):
        super().__init__(data)
        from django.utils import timezone

        zone = timezone.get_current_timezone_name()
        self.fields["since"].label = f"From ({zone})"
        self.fields["until"].label = f"To ({zone})"
        actor_choices = [("", "Anyone")] + [(a, a) for a in actors]
        verb_choices = [("", "Any verb")] + [
            (v, f"{v[:-1]} (all of them)" if v.endswith(".") else v) for v in verbs
        ]
        data = data or {}
        for name, choices in (("actor", actor_choices), ("verb", verb_choices)):
            given = data.get(name, "")
            if given and len(given) <= 170 and "\x00" not in given and given not in dict(choices):
                choices.append((given, given))
            self.fields[name].choices = choices

    def filters(self) -> dict:
        """The valid filters; an invalid one is reported by the form and left out."""
        self.is_valid()
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        return {
            "actor": data.get("actor", ""),
            "verb": data.get("verb", ""),
            "obj": data.get("object", ""),
            "since": since.replace(tzinfo=UTC) if since and since.tzinfo is None else since,
            "until": until.replace(tzinfo=UTC) if until and until.tzinfo is None else until,
        }
