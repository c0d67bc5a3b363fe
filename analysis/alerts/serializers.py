"""JSON shapes and validation of alert rules, shared by the API and the HTML form: one place
says what a valid rule is, and every error names its field."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import EmailValidator
from rest_framework import serializers

from analysis.alerts import targets
from analysis.alerts.metrics import FINDING_METRICS, METRICS
from analysis.alerts.models import AlertEvent, AlertRule, Delivery, Notification
from ingest.records import STEP_KINDS

MAX_WINDOW_MINUTES = 24 * 60
MAX_FOR_MINUTES = 24 * 60
MAX_CHANNELS = 10
MAX_FILTER_CHARS = 200
SECRET_MASK = "********"


class AlertRuleSerializer(serializers.ModelSerializer):
    metric = serializers.ChoiceField(choices=sorted(METRICS))
    threshold = serializers.FloatField()
    window_minutes = serializers.IntegerField(min_value=1, max_value=MAX_WINDOW_MINUTES, default=10)
    for_minutes = serializers.IntegerField(min_value=0, max_value=MAX_FOR_MINUTES, default=0)
    min_samples = serializers.IntegerField(min_value=1, max_value=1_000_000, default=20)
    filters = serializers.JSONField(required=False)
    channels = serializers.JSONField(required=False)

    class Meta:
        model = AlertRule
        fields = ["id", "name", "metric", "finding_kind", "comparator", "threshold", "window_minutes",
                  "for_minutes", "min_samples", "filters", "baseline", "baseline_release", "channels",
                  "enabled", "muted", "no_data", "state", "consecutive", "last_value",
                  "last_sample_count", "last_evaluated_at", "created_at", "updated_at"]
        read_only_fields = ["id", "state", "consecutive", "last_value", "last_sample_count",
                            "last_evaluated_at", "created_at", "updated_at"]

    def validate_threshold(self, value: float) -> float:
        if value != value or value in (float("inf"), float("-inf")):
            raise serializers.ValidationError("must be a finite number")
        return value

    def validate_filters(self, value) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be an object")
        unknown = sorted(set(value) - set(AlertRule.FILTER_KEYS))
        if unknown:
            raise serializers.ValidationError(
                f"unknown key {unknown[0]!r}; allowed: {', '.join(AlertRule.FILTER_KEYS)}")
        clean = {}
        for key, item in value.items():
            if item in (None, ""):
                continue
            if not isinstance(item, str) or len(item) > MAX_FILTER_CHARS:
                raise serializers.ValidationError(f"{key}: must be a string of at most {MAX_FILTER_CHARS} characters")
            clean[key] = item
        if clean.get("step_kind") and clean["step_kind"] not in STEP_KINDS:
            raise serializers.ValidationError(f"step_kind: must be one of {', '.join(STEP_KINDS)}")
        return clean

    def validate_channels(self, value) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            raise serializers.ValidationError("must be a list of channels")
        if len(value) > MAX_CHANNELS:
            raise serializers.ValidationError(f"at most {MAX_CHANNELS} channels")
        previous = {c.get("url"): c.get("secret", "") for c in (self.instance.channels if self.instance else [])
                    if isinstance(c, dict) and c.get("type") == "webhook"}
        return [_channel(item, i, previous) for i, item in enumerate(value)]

    def validate(self, attrs):
        metric = attrs.get("metric", getattr(self.instance, "metric", None))
        kind = attrs.get("finding_kind", getattr(self.instance, "finding_kind", ""))
        if kind and metric not in FINDING_METRICS:
            raise serializers.ValidationError(
                {"finding_kind": f"only for the metrics {', '.join(sorted(FINDING_METRICS))}"})
        baseline = attrs.get("baseline", getattr(self.instance, "baseline", AlertRule.BASELINE_NONE))
        base_release = attrs.get("baseline_release", getattr(self.instance, "baseline_release", ""))
        if baseline == AlertRule.BASELINE_RELEASE and not base_release:
            raise serializers.ValidationError(
                {"baseline_release": "required when baseline is 'release'"})
        return attrs

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["channels"] = [{**c, "secret": SECRET_MASK} if c.get("secret") else c
                            for c in instance.channels or []]
        return data


def _channel(item, index: int, previous: dict) -> dict:
    where = f"[{index}]"
    if not isinstance(item, dict):
        raise serializers.ValidationError(f"{where}: must be an object")
    kind = item.get("type")
    if kind == "webhook":
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2000:
            raise serializers.ValidationError(f"{where}.url: must be an http:// or https:// URL")
        try:
            targets.check(url, unresolved_ok=True)
        except targets.TargetRefused as exc:
            raise serializers.ValidationError(f"{where}.url: {exc}") from None
        secret = item.get("secret") or ""
        if not isinstance(secret, str) or len(secret) > 200:
            raise serializers.ValidationError(f"{where}.secret: must be a string of at most 200 characters")
        if secret == SECRET_MASK:  # the masked value read back: keep the stored secret
            secret = previous.get(url, "")
        return {"type": "webhook", "url": url, **({"secret": secret} if secret else {})}
    if kind == "email":
        to = item.get("to")
        addresses = to if isinstance(to, list) else [to]
        if not addresses or not all(isinstance(a, str) for a in addresses):
            raise serializers.ValidationError(f"{where}.to: must be an email address or a list of them")
        addresses = [a.strip() for a in addresses if a.strip()]
        try:
            for address in addresses:
                EmailValidator()(address)
        except DjangoValidationError:
            raise serializers.ValidationError(f"{where}.to: {address!r} is not an email address") from None
        if not addresses:
            raise serializers.ValidationError(f"{where}.to: must be an email address or a list of them")
        return {"type": "email", "to": addresses}
    raise serializers.ValidationError(f"{where}.type: must be 'webhook' or 'email'")


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = ["channel", "target", "attempt", "ok", "status_code", "error", "duration_ms", "at"]


class NotificationSerializer(serializers.ModelSerializer):
    """Where one channel's delivery stands: pending (retried at next_attempt_at), delivered,
    failed (not worth retrying), expired (gave up at expires_at) or superseded by a newer event."""

    channel = serializers.SerializerMethodField()

    class Meta:
        model = Notification
        fields = ["channel", "target", "state", "attempts", "next_attempt_at", "expires_at", "last_error"]

    def get_channel(self, obj) -> str:
        return str((obj.channel or {}).get("type", "")) if isinstance(obj.channel, dict) else ""


class AlertEventSerializer(serializers.ModelSerializer):
    rule = serializers.IntegerField(source="rule_id")
    deliveries = DeliverySerializer(many=True)
    notifications = NotificationSerializer(many=True)

    class Meta:
        model = AlertEvent
        fields = ["id", "rule", "state", "previous_state", "value", "baseline_value", "threshold",
                  "sample_count", "window_start", "window_end", "link", "notified", "at", "notifications",
                  "deliveries"]


class AlertEventPageSerializer(serializers.Serializer):
    results = AlertEventSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)
