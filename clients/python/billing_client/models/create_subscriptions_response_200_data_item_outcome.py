from enum import Enum

class CreateSubscriptionsResponse200DataItemOutcome(str, Enum):
    CREATED = "created"
    REPLAYED = "replayed"

    def __str__(self) -> str:
        return str(self.value)
