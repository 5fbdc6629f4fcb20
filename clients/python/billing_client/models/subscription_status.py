from enum import Enum

class SubscriptionStatus(str, Enum):
    ACTIVE = "ACTIVE"
    CANCELED = "CANCELED"
    PAST_DUE = "PAST_DUE"
    PAUSED = "PAUSED"
    TRIALING = "TRIALING"

    def __str__(self) -> str:
        return str(self.value)
