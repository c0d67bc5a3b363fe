from django.apps import AppConfig


class AgentopsConfig(AppConfig):
    name = "agentops"
