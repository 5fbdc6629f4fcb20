from enum import Enum

class PaymentMethodStatus(str, Enum):
    ACTIVE = "ACTIVE"
    DECLINED = "DECLINED"
    DETACHED = "DETACHED"

    def __str__(self) -> str:
        return str(self.value)
