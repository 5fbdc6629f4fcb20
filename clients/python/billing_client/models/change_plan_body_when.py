from enum import Enum

class ChangePlanBodyWhen(str, Enum):
    NOW = "now"
    PERIOD_END = "period_end"

    def __str__(self) -> str:
        return str(self.value)
