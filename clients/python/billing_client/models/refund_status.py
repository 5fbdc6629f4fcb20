from enum import Enum

class RefundStatus(str, Enum):
    FAILED = "FAILED"
    REQUESTED = "REQUESTED"
    SUCCEEDED = "SUCCEEDED"

    def __str__(self) -> str:
        return str(self.value)
