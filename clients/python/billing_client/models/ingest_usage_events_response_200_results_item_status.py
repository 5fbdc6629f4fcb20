from enum import Enum

class IngestUsageEventsResponse200ResultsItemStatus(str, Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"

    def __str__(self) -> str:
        return str(self.value)
