from enum import Enum

class WebhookEndpointStatus(str, Enum):
    DISABLED = "DISABLED"
    ENABLED = "ENABLED"

    def __str__(self) -> str:
        return str(self.value)
