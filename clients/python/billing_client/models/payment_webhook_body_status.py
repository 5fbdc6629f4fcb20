from enum import Enum

class PaymentWebhookBodyStatus(str, Enum):
    DECLINED = "declined"
    SUCCEEDED = "succeeded"

    def __str__(self) -> str:
        return str(self.value)
