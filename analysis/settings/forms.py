"""The settings pages' forms: they turn what was posted into checked values or say, per field,
what is wrong. Every posted name is untrusted; the templates escape what they show back."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.core.validators import MinValueValidator

from analysis.costs import PRICE_COLUMNS
from analysis.models import ModelPrice
from ingest.models import IngestKey, ProjectMembership
from ingest.services import KEY_NAME_MAX

SCOPE_HELP = {
    IngestKey.SCOPE_INGEST: "send traces and metrics (/v1/traces, /v1/metrics, /api/v1/ingest)",
    IngestKey.SCOPE_READ: "read the API and MCP (/api/v1/…, /mcp)",
    IngestKey.SCOPE_ADMIN: "manage alert rules through the API",
}
ROLE_HELP = {
    ProjectMembership.ROLE_ADMIN: "sees the project and changes its settings (keys, members)",
    ProjectMembership.ROLE_MEMBER: "sees the project's pages; no settings",
}


class KeyForm(forms.Form):
    name = forms.CharField(max_length=KEY_NAME_MAX, required=False, strip=True)
    scopes = forms.MultipleChoiceField(choices=[(s, s) for s in IngestKey.SCOPES],
                                       error_messages={"required": "choose at least one scope"})


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=[(r, r) for r in ProjectMembership.ROLES])

    def clean_username(self):
        username = self.cleaned_data["username"]
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"no active user named “{username}”: users are created by an operator")
        self.cleaned_data["user"] = user
        return username


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=[(r, r) for r in ProjectMembership.ROLES])


class PriceForm(forms.ModelForm):
    """Validated as the model is (decimals, not negative, one price per model and instant)."""

    class Meta:
        model = ModelPrice
        fields = PRICE_COLUMNS
        widgets = {"effective_from": forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("input_per_million", "output_per_million"):  # the model's check, said per field
            self.fields[name].validators.append(MinValueValidator(0, "a price is not negative"))
